"""The proxy's forwarder runs on the server's own interpreter in every local sandbox, and a
forwarder that cannot start is the sandbox's failure (SandboxError), never the agent's.

Real bwrap; the image cases on the Debian base of the server's shared cache. On main the
forwarder ran as the agent command's prefix (`... || exit 70`): its failure was the agent's
exit code, and on an image it ran on whatever python3.X the image had at the server's path.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from service.config import Settings
from service.errors import SandboxError
from service.images import ImageStore
from service.models import SandboxSpec
from service.proxy.access import start_forwarder
from service.sandboxes.base import SandboxRequest
from service.sandboxes.local.backend import LocalBackend, LocalSandbox
from service.sandboxes.local.host_kit import KIT_DIR


@pytest.fixture
async def backend(tmp_path: Path) -> AsyncIterator[LocalBackend]:
    local = LocalBackend(Settings(state_dir=tmp_path / "state", local_warm_sandboxes=0))
    yield local
    await local.close()


async def _sandbox(backend: LocalBackend, image: str) -> LocalSandbox:
    return await backend.create(
        SandboxRequest(f"fw-{image.replace('/', '-')}", SandboxSpec(image=image), 120)
    )


async def test_a_forwarder_that_cannot_start_is_a_sandbox_error(backend: LocalBackend) -> None:
    sandbox = await _sandbox(backend, "host")
    try:  # no route is open: the sandbox's proxy directory holds no socket
        with pytest.raises(
            SandboxError, match=r"forwarder did not start \(exit 1\): .*cannot forward"
        ):
            await start_forwarder(sandbox, sandbox.forwarder_argv)
    finally:
        await sandbox.kill()


@pytest.mark.skipif(os.geteuid() != 0, reason="image sandboxes need a root server")
async def test_on_an_image_the_forwarder_runs_on_the_hosts_interpreter(
    backend: LocalBackend,
) -> None:
    await asyncio.to_thread(lambda: asyncio.run(ImageStore(Settings().cache_dir).base()))
    sandbox = await _sandbox(backend, "rollout/base")
    try:
        assert sandbox.forwarder_argv[0].startswith(f"{KIT_DIR}/")
        # Root inside takes the image's interpreters away: the forwarder does not care.
        gone = await sandbox.exec("rm /usr/bin/python3*; ! command -v python3", timeout_s=60)
        assert gone.exit_code == 0, gone.stderr
        with pytest.raises(SandboxError, match=r"cannot forward 127\.0\.0\.1:48080"):
            await start_forwarder(sandbox, sandbox.forwarder_argv)
    finally:
        await sandbox.kill()
