"""A Harbor task's Dockerfile as an E2B template (`service.sandboxes.e2b.template`), built
through the e2b SDK's template builder against the fake cloud's build routes, which realise
the steps with the service's image store: a sandbox of the template sees what they did."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from service.errors import SandboxError
from service.sandboxes.e2b.template import TemplateBuilds
from testing.e2b_support import make_backend, make_request
from testing.fakes.e2b_cloud import FakeE2B

pytestmark = [
    pytest.mark.timeout(600),  # a cold buildah build on a loaded machine
    pytest.mark.skipif(os.geteuid() != 0, reason="the fake builds templates with buildah"),
]


def _context(tmp_path: Path, dockerfile: str) -> Path:
    context = tmp_path / "environment"
    context.mkdir()
    (context / "Dockerfile").write_text(dockerfile)
    (context / "greeting.txt").write_text("hello from the context\n")
    return context


async def test_a_built_template_yields_a_sandbox_with_the_dockerfiles_effects(
    cloud: FakeE2B, tmp_path: Path
) -> None:
    marker = uuid.uuid4().hex
    context = _context(
        tmp_path,
        "FROM rollout/base\n"
        "COPY greeting.txt /app/greeting.txt\n"
        "WORKDIR /app\n"
        f"ENV TASK_MARKER={marker}\n"
        f"RUN echo {marker} > built.txt && mkdir -p /srv/data\n",
    )
    name = f"harbor-task-{marker[:24]}"
    messages: list[str] = []
    builds = TemplateBuilds()
    await builds.ensure(context, name, messages.append)
    await builds.ensure(context, name, messages.append)
    assert len(cloud.templates.builds) == 1  # the second found the template by its name
    assert messages[-1] == f"template {name}: built before, reused"
    assert any(marker in m and "RUN" in m for m in messages), messages

    backend = make_backend(tmp_path)
    sandbox = await backend.create(make_request(template=name))
    try:
        command = "cat /app/greeting.txt /app/built.txt; echo $TASK_MARKER; test -d /srv/data"
        result = await sandbox.exec(command, timeout_s=30)
        assert result.exit_code == 0, result.stderr
        assert result.stdout == f"hello from the context\n{marker}\n{marker}\n"
        await sandbox.write_files({"/tests/test.sh": b"echo ok\n"})
        assert await sandbox.read_file("/tests/test.sh", max_bytes=100) == b"echo ok\n"
    finally:
        await backend.close()


async def test_a_failing_build_is_a_sandbox_error_with_the_log_tail(
    cloud: FakeE2B, tmp_path: Path
) -> None:
    marker = uuid.uuid4().hex
    context = _context(
        tmp_path, f"FROM rollout/base\nRUN echo {marker} && exit 7\nRUN echo never\n"
    )
    name = f"harbor-task-{marker[:24]}"
    builds = TemplateBuilds()
    with pytest.raises(SandboxError) as error:
        await builds.ensure(context, name, lambda _: None)
    message = str(error.value)
    assert name in message
    assert "build log (last" in message
    assert marker in message.split("build log (last", 1)[1]  # the failed step's own output
    assert [build.status for build in cloud.templates.builds] == ["error"]

    # E2B knows the name from the build's request on; it is still not taken for built.
    assert cloud.templates.registered(name)
    with pytest.raises(SandboxError):
        await builds.ensure(context, name, lambda _: None)
    assert [build.status for build in cloud.templates.builds] == ["error", "error"]
