"""A failure to install or find opencode is infrastructure (AGENT_INSTALL), never AGENT:
a trainer retries it rather than scoring the policy for npm's trouble."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from service.agents.base import AgentContext
from service.agents.opencode import OpencodeAgent, closed_to_sandbox_users
from service.config import Settings
from service.errors import AgentInstallError
from service.models import ErrorKind, NetworkPolicy, SandboxSpec
from service.sandboxes.base import SandboxRequest
from service.sandboxes.local.backend import LocalBackend
from testing.fakes.public_host import public_host
from tests.agents.npm_registry import FakeNpmRegistry

pytestmark = pytest.mark.opencode


async def test_an_in_sandbox_install_that_fails_is_agent_install(
    settings: Settings, backend: LocalBackend
) -> None:
    # A remote-style sandbox (the host cache out of view) whose npm registry lacks the package.
    settings = settings.model_copy(
        update={"opencode_version": "0.0.3-missing", "cache_dir": settings.state_dir / "unseen"}
    )
    request = SandboxRequest("oc-fail", SandboxSpec(network=NetworkPolicy.FULL), lifetime_s=300)
    sandbox = await backend.create(request)
    try:
        # A FULL sandbox reaches the internet, never the host: the registry is on a test host.
        with public_host() as host:
            async with FakeNpmRegistry(host.listen()) as registry:
                env = {"npm_config_registry": registry.url, "npm_config_cache": "/tmp/npm-cache"}
                context = AgentContext("oc-fail", "x", "", {}, 60.0, env=env)
                with pytest.raises(AgentInstallError) as raised:
                    await OpencodeAgent(settings).prepare(sandbox, context)
    finally:
        await sandbox.kill()

    assert raised.value.kind is ErrorKind.AGENT_INSTALL
    assert "installing opencode in the sandbox failed" in str(raised.value)
    assert "E404" in str(raised.value)


@pytest.mark.skipif(os.geteuid() != 0, reason="sandboxes keep the server's uid unless it is root")
def test_a_cache_closed_to_sandbox_users_is_named(tmp_path: Path) -> None:
    # `mktemp -d` makes 0700 directories: the sandbox's own uid then got "Permission denied"
    # running opencode, a failure scored as the agent's.
    cache = tmp_path / "cache"
    binary = cache / "opencode" / "1.0" / "bin" / "opencode"
    binary.parent.mkdir(parents=True)
    binary.write_text("")
    assert closed_to_sandbox_users(binary, cache) is None

    cache.chmod(0o700)
    assert closed_to_sandbox_users(binary, cache) == cache
    cache.chmod(0o755)
    (cache / "opencode" / "1.0").chmod(0o750)
    assert closed_to_sandbox_users(binary, cache) == cache / "opencode" / "1.0"
