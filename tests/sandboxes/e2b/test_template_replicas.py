"""A task's E2B template across replicas (`service.sandboxes.e2b.template`): E2B knows a
template's name from the moment its build is requested, so a replica never trusts a name
another replica's failed build left; it reads the template's builds, builds it again, and its
own backend then runs a sandbox of it (or it fails, saying why, when the task cannot build). A
build under way elsewhere is waited for, not repeated, and two replicas sharing a PostgreSQL
store that both find no build at the same moment build it once. Each replica is its own
`TemplateBuilds` and `E2BBackend` against one fake cloud.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

import pytest

from service.errors import SandboxError
from service.sandboxes.e2b.template import TemplateBuilds
from testing.e2b_support import eventually, make_backend, make_request
from testing.fakes.e2b_cloud import FakeE2B
from tests.e2e.test_replicas import database_url as database_url  # the PostgreSQL fixture

pytestmark = [
    pytest.mark.timeout(600),  # cold buildah builds on a loaded machine
    pytest.mark.skipif(os.geteuid() != 0, reason="the fake builds templates with buildah"),
]


def _context(tmp_path: Path, dockerfile: str) -> tuple[Path, str]:
    """A build context of `dockerfile` and a fresh template name for it."""
    context = tmp_path / "environment"
    context.mkdir()
    (context / "Dockerfile").write_text(dockerfile)
    return context, f"harbor-task-{uuid.uuid4().hex[:24]}"


async def test_a_name_whose_build_failed_on_one_replica_is_built_again_on_another(
    cloud: FakeE2B, tmp_path: Path
) -> None:
    marker = uuid.uuid4().hex
    context, name = _context(tmp_path, f"FROM rollout/base\nRUN echo {marker} > /built.txt\n")
    cloud.templates.fail_next_build("builder unavailable")
    with pytest.raises(SandboxError, match="builder unavailable"):
        await TemplateBuilds().ensure(context, name, lambda _: None)  # replica A
    assert cloud.templates.registered(name)

    messages: list[str] = []
    await TemplateBuilds().ensure(context, name, messages.append)  # replica B
    assert [build.status for build in cloud.templates.builds] == ["error", "ready"]
    assert f"template {name}: no ready build (error), building it again" in messages
    backend = make_backend(tmp_path)  # B's backend
    try:
        sandbox = await backend.create(make_request(template=name))
        result = await sandbox.exec("cat /built.txt", timeout_s=30)
        assert result.stdout == f"{marker}\n"
    finally:
        await backend.close()


async def test_a_task_that_cannot_build_fails_on_every_replica_with_its_log(
    cloud: FakeE2B, tmp_path: Path
) -> None:
    marker = uuid.uuid4().hex
    context, name = _context(tmp_path, f"FROM rollout/base\nRUN echo {marker} && exit 7\n")
    for _ in "ab":  # each replica builds it, neither takes the name for built
        with pytest.raises(SandboxError) as error:
            await TemplateBuilds().ensure(context, name, lambda _: None)
        assert marker in str(error.value).split("build log (last", 1)[1]
    assert [build.status for build in cloud.templates.builds] == ["error", "error"]


async def test_a_build_under_way_on_one_replica_is_waited_for_by_another(
    cloud: FakeE2B, tmp_path: Path
) -> None:
    context, name = _context(tmp_path, "FROM rollout/base\nRUN sleep 2 && touch /built\n")
    first = asyncio.create_task(TemplateBuilds().ensure(context, name, lambda _: None))
    await eventually(lambda: bool(cloud.templates.builds), timeout_s=300)  # A's has started
    messages: list[str] = []
    await TemplateBuilds().ensure(context, name, messages.append)
    await first
    assert [build.status for build in cloud.templates.builds] == ["ready"]
    assert messages == [
        f"template {name}: another build of it is under way, waiting for it",
        f"template {name}: built before, reused",
    ]


async def test_replicas_that_find_no_build_at_the_same_moment_build_it_once(
    cloud: FakeE2B, tmp_path: Path, database_url: str
) -> None:
    context, name = _context(tmp_path, "FROM rollout/base\nRUN touch /built\n")
    cloud.templates.hold_lookups(2)  # each replica's first look finds no build, at once
    messages: tuple[list[str], list[str]] = ([], [])
    await asyncio.gather(
        *(TemplateBuilds(database_url).ensure(context, name, said.append) for said in messages)
    )
    assert [build.status for build in cloud.templates.builds] == ["ready"]
    waited = f"template {name}: another build of it is under way, waiting for it"
    reused = f"template {name}: built before, reused"
    assert sorted([waited, reused] == said[-2:] for said in messages) == [False, True]
