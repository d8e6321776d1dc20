"""Fixtures for harness tests: a real local bwrap sandbox wired to the real capture proxy,
which forwards to a scripted upstream on loopback."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from service.agents.base import AgentContext
from service.config import Settings
from service.models import AgentOutput, CaptureSpec, ModelAccess, NetworkPolicy, SandboxSpec, Turn
from service.proxy.access import host_socket_access, start_forwarder
from service.proxy.capture.route import Route
from service.proxy.endpoints import ResolvedEndpoint
from service.proxy.server import CaptureProxy
from service.sandboxes.base import PROXY_SOCKET, SandboxRequest
from service.sandboxes.local.backend import LocalBackend, LocalSandbox
from service.sandboxes.local.bwrap import sandbox_uid
from testing.fakes.llm_upstream import FakeUpstream

UPSTREAM_KEY = "sk-upstream-secret-5b1e"
"""The upstream's real key: only the proxy may send it."""
UPSTREAM_MODEL = "fake-policy-7b"


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    """Private state; the default cache, so the real opencode install is made once per machine
    (and the cache must not be under /tmp, which every sandbox replaces with its own)."""
    return Settings(state_dir=tmp_path / "state", proxy_listen="127.0.0.1:0")


@pytest.fixture
async def upstream() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream(api_key=UPSTREAM_KEY, model=UPSTREAM_MODEL) as upstream:
        yield upstream


@pytest.fixture
async def proxy(settings: Settings) -> AsyncIterator[CaptureProxy]:
    proxy = CaptureProxy(settings)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.stop()


@pytest.fixture
async def backend(settings: Settings) -> AsyncIterator[LocalBackend]:
    backend = LocalBackend(settings)
    try:
        yield backend
    finally:
        await backend.close()


@dataclass
class Rig:
    """One rollout's sandbox and its route through the proxy to the scripted upstream."""

    settings: Settings
    rollout_id: str
    sandbox: LocalSandbox
    route: Route
    access: ModelAccess
    turns: list[Turn] = field(default_factory=list)
    outputs: list[AgentOutput] = field(default_factory=list)

    def context(
        self, instruction: str, *, timeout_s: float = 120.0, **options: object
    ) -> AgentContext:
        return AgentContext(
            rollout_id=self.rollout_id,
            instruction=instruction,
            command="",
            options=options,
            timeout_s=timeout_s,
            model=self.access,
        )

    def survivors(self) -> list[int]:
        """Host pids running as this sandbox's uid that are neither dead nor being killed,
        but the capture proxy's forwarder: the service's plumbing, which lives until the
        sandbox does, not the agent's.

        A process the kernel is still tearing down (SIGKILL pending, or a zombie) counts as
        killed: a pid namespace's members may outlive its first process by a moment.
        """
        uid = sandbox_uid(Path(os.path.realpath(self.settings.state_dir)), self.rollout_id)
        return [
            pid
            for pid, status in _statuses()
            if _uid(status) == uid and _alive(status) and not _is_forwarder(pid)
        ]


_SIGKILL_BIT = 1 << (9 - 1)


def _statuses() -> list[tuple[int, dict[str, str]]]:
    statuses = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        statuses.append((int(entry.name), {k: v.strip() for k, v in fields.items()}))
    return statuses


def _is_forwarder(pid: int) -> bool:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return PROXY_SOCKET.encode() in argv


def _uid(status: dict[str, str]) -> int:
    return int(status["Uid"].split()[1])


def _alive(status: dict[str, str]) -> bool:
    pending = int(status["SigPnd"], 16) | int(status["ShdPnd"], 16)
    return status["State"][:1] not in "ZX" and not pending & _SIGKILL_BIT


@pytest.fixture
async def rig(
    settings: Settings, upstream: FakeUpstream, proxy: CaptureProxy, backend: LocalBackend
) -> AsyncIterator[Rig]:
    rollout_id = f"oc-{uuid.uuid4().hex[:12]}"
    turns: list[Turn] = []
    endpoint = ResolvedEndpoint(
        base_url=upstream.base_url, api_key=UPSTREAM_KEY, model=UPSTREAM_MODEL
    )
    request = SandboxRequest(
        rollout_id=rollout_id, spec=SandboxSpec(network=NetworkPolicy.NONE), lifetime_s=600
    )
    sandbox = await backend.create(request)
    try:
        route = await proxy.open_sandbox_route(
            rollout_id, endpoint, CaptureSpec(), turns.append, sandbox.proxy_socket_path
        )
        try:
            await start_forwarder(sandbox, sandbox.forwarder_argv)
            yield Rig(settings, rollout_id, sandbox, route, host_socket_access(), turns)
        finally:
            proxy.close_route(route)
    finally:
        await sandbox.kill()
