"""A Harbor task's Dockerfile as an E2B template, built once per task content.

The e2b SDK's template builder parses the Dockerfile (`Template.from_dockerfile`), uploads
what its COPY steps need and has E2B's builders run the steps; the template is named by the
task's digest, so a template that exists already (`AsyncTemplate.exists`) is reused and the
same task content never builds twice. E2B registers a template's name when its build is
requested, before the build succeeds, so a name whose build failed (or was cancelled) in
this process is built again rather than trusted. The template's default user is set to root, as
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

from e2b import AsyncTemplate, BuildException, FileUploadException, Template, TemplateException
from e2b.template.logger import LogEntry

from service.errors import SandboxError
from service.sandboxes.e2b.backend import API_KEY_ENV
from service.sandboxes.e2b.sandbox import SDK_ERRORS

__all__ = ["TemplateBuilds"]

LOG_TAIL_LINES = 20
"""Build log lines a failed build's error carries."""
_BUILD_ERRORS = (BuildException, FileUploadException, TemplateException, ValueError, *SDK_ERRORS)
"""What the builder raises: a failed step, an upload, the API, a Dockerfile it cannot parse."""


class TemplateBuilds:
    """Builds templates through the SDK, one build per name at a time in this process."""

    def __init__(self) -> None:
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
            try:
                if name not in self._failed and await AsyncTemplate.exists(name, api_key=api_key):
                    report(f"template {name}: built before, reused")
                    return
            except (*SDK_ERRORS, TemplateException) as exc:
                raise SandboxError(f"looking up the task's E2B template {name}: {exc}") from exc
            tail: collections.deque[str] = collections.deque(maxlen=LOG_TAIL_LINES)

            def log(entry: LogEntry) -> None:
                tail.append(entry.message)
                report(f"template {name}: {entry.message}"[:500])

            self._failed.add(name)
            try:
                template = (
                    Template(file_context_path=str(context))
                    .from_dockerfile(str(context / "Dockerfile"))
                    .set_user("root")
                )
                await AsyncTemplate.build(template, name, on_build_logs=log, api_key=api_key)
                self._failed.discard(name)
            except _BUILD_ERRORS as exc:
                lines = "\n".join(tail)
                raise SandboxError(
                    f"building the task's E2B template {name}: {exc}\nbuild log (last "
                    f"{len(tail)} lines):\n{lines}"
                ) from exc
