"""A Harbor task's Dockerfile as an E2B template, built once per task content.

The e2b SDK's template builder parses the Dockerfile (`Template.from_dockerfile`), uploads
what its COPY steps need and has E2B's builders run the steps; the template is named by the
task's digest, so a template that exists already (`AsyncTemplate.exists`) is reused and the
same task content never builds twice. E2B registers a template's name when its build is
requested, before the build succeeds, so the name alone is not trusted: every replica reads the
template's builds (`GET /templates/{id}`, the SDK's API client) and reuses it only with a ready
build, waits (up to _OTHERS_BUILD_S) while another server's build is under way, and otherwise
builds it again; a name whose build failed (or was cancelled) in this process is built again
without asking. Replicas sharing a PostgreSQL store check and start a build under one lock per
name (`service.store.postgres_lock`, released once E2B has the build under way): two that find
no build at the same moment do not both build, the second finds the first's build under way and
waits for it. The template's default user is set to root, as
Docker's is: the service runs a Harbor task's commands and stages its files (`/tests`,
`/solution`) as the sandbox's root, as it does on a local image sandbox (admission refuses
a Dockerfile whose USER is not root).
"""

from __future__ import annotations

import asyncio
import collections
import os
from collections.abc import Callable
from pathlib import Path

import psycopg
from e2b import AsyncTemplate, BuildException, FileUploadException, Template, TemplateException
from e2b.api import encode_path_param
from e2b.api.client.api.templates import get_templates_aliases_alias, get_templates_template_id
from e2b.api.client.models import TemplateAliasResponse, TemplateBuildStatus, TemplateWithBuilds
from e2b.api.client_async import get_api_client
from e2b.connection_config import ConnectionConfig
from e2b.template.logger import LogEntry
from e2b.template_async.build_api import wait_for_build_finish

from service.errors import SandboxError
from service.sandboxes.e2b.backend import API_KEY_ENV
from service.sandboxes.e2b.sandbox import SDK_ERRORS
from service.store import shared_lock

__all__ = ["TemplateBuilds"]

LOG_TAIL_LINES = 20
"""Build log lines a failed build's error carries."""
_BUILD_ERRORS = (BuildException, FileUploadException, TemplateException, ValueError, *SDK_ERRORS)
"""What the builder raises: a failed step, an upload, the API, a Dockerfile it cannot parse."""
_OTHERS_BUILD_S = 1800.0
"""How long a build another server started may stay under way before this one builds too."""
_POLL_S = 2.0
"""How often the state of another server's build is read."""
_IN_PROGRESS = (TemplateBuildStatus.WAITING, TemplateBuildStatus.BUILDING)


class TemplateBuilds:
    """Builds templates through the SDK, one build per name at a time in this process, and
    across the replicas sharing the PostgreSQL database at `database_url` (None: alone)."""

    def __init__(self, database_url: str | None = None) -> None:
        self._database_url = database_url
        self._locks: collections.defaultdict[str, asyncio.Lock] = collections.defaultdict(
            asyncio.Lock
        )
        self._failed: set[str] = set()
        """Names whose last build here did not finish (failed or cancelled): they may exist
        on E2B with no ready build."""

    async def ensure(self, context: Path, name: str, report: Callable[[str], None]) -> None:
        """Make template `name` from `context`'s Dockerfile unless it exists; raises
        SandboxError with the build log's tail."""
        api_key = os.environ.get(API_KEY_ENV, "")
        async with self._locks[name]:
            # A ready build is reused without the replicas' lock (a database connection).
            if name not in self._failed and TemplateBuildStatus.READY in await _build_statuses(
                name, api_key
            ):
                report(f"template {name}: built before, reused")
                return
            tail: collections.deque[str] = collections.deque(maxlen=LOG_TAIL_LINES)

            def log(entry: LogEntry) -> None:
                tail.append(entry.message)
                report(f"template {name}: {entry.message}"[:500])

            try:
                async with shared_lock(self._database_url, f"e2b-template:{name}"):
                    if name not in self._failed and await _built(name, api_key, report):
                        report(f"template {name}: built before, reused")
                        return
                    self._failed.add(name)
                    template = (
                        Template(file_context_path=str(context))
                        .from_dockerfile(str(context / "Dockerfile"))
                        .set_user("root")
                    )
                    build = await AsyncTemplate.build_in_background(
                        template, name, on_build_logs=log, api_key=api_key
                    )
                client = get_api_client(ConnectionConfig(api_key=api_key))
                await wait_for_build_finish(client, build.template_id, build.build_id, log)
                self._failed.discard(name)
            except psycopg.Error as exc:
                raise SandboxError(
                    f"taking the replicas' lock on building the task's E2B template {name}: {exc}"
                ) from exc
            except _BUILD_ERRORS as exc:
                lines = "\n".join(tail)
                raise SandboxError(
                    f"building the task's E2B template {name}: {exc}\nbuild log (last "
                    f"{len(tail)} lines):\n{lines}"
                ) from exc


async def _built(name: str, api_key: str, report: Callable[[str], None]) -> bool:
    """Whether template `name` has a ready build, once a build under way (another server's)
    has ended or outlasted _OTHERS_BUILD_S."""
    waited_s = 0.0
    while True:
        statuses = await _build_statuses(name, api_key)
        if TemplateBuildStatus.READY in statuses:
            return True
        if not statuses or statuses[-1] not in _IN_PROGRESS or waited_s >= _OTHERS_BUILD_S:
            if statuses:
                report(f"template {name}: no ready build ({statuses[-1]}), building it again")
            return False
        if not waited_s:
            report(f"template {name}: another build of it is under way, waiting for it")
        await asyncio.sleep(_POLL_S)
        waited_s += _POLL_S


async def _build_statuses(name: str, api_key: str) -> list[TemplateBuildStatus]:
    """The statuses of template `name`'s builds, oldest first; none if E2B does not know it."""
    client = get_api_client(ConnectionConfig(api_key=api_key))
    try:
        alias = await get_templates_aliases_alias.asyncio_detailed(
            alias=encode_path_param(name), client=client
        )
        if alias.status_code == 404:
            return []
        if not isinstance(alias.parsed, TemplateAliasResponse):
            raise SandboxError(
                f"looking up the task's E2B template {name}: HTTP {alias.status_code}"
            )
        template = await get_templates_template_id.asyncio_detailed(
            template_id=encode_path_param(alias.parsed.template_id), client=client
        )
    except (*SDK_ERRORS, TemplateException) as exc:
        raise SandboxError(f"looking up the task's E2B template {name}: {exc}") from exc
    if not isinstance(template.parsed, TemplateWithBuilds):
        raise SandboxError(
            f"reading the builds of the task's E2B template {name}: HTTP {template.status_code}"
        )
    builds = sorted(template.parsed.builds, key=lambda build: build.created_at)
    return [build.status for build in builds]
