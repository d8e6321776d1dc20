"""Fixtures for the sandbox tests: a real LocalBackend (real bwrap) in a temporary state dir."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from service.config import Settings
from service.models import NetworkPolicy, Resources, SandboxSpec
from service.sandboxes.base import SandboxRequest
from service.sandboxes.local.backend import LocalBackend, LocalSandbox
from service.sandboxes.local.spawner import fork_server_argv
from testing.e2b_support import fake_cloud
from testing.fakes.e2b_cloud import FakeE2B

MakeSandbox = Callable[..., Awaitable[LocalSandbox]]
_POLL_S = 0.02
_POLLS = 500


LEADER_LEAVES = (
    "import ctypes, threading, time\n"
    "libc, named = ctypes.CDLL(None), threading.Event()\n"
    "def run() -> None:\n"
    "    libc.prctl(15, b'{name}')  # PR_SET_NAME: the host finds this thread by it\n"
    "    named.set()\n"
    "    time.sleep(600)\n"
    "threading.Thread(target=run).start()\n"
    "named.wait()\n"
    "libc.syscall(60, 0)  # SYS_exit: the leader thread alone leaves, a zombie\n"
)
"""A Python script (format `name`) whose leader thread leaves alone while a thread named
`name` runs on: the process reads as a zombie, and is not one."""


def threads_named(name: str) -> list[Path]:
    """The comm files of every live thread on the host named `name`."""
    found = []
    for process in Path("/proc").iterdir():
        try:
            tasks = list((process / "task").iterdir()) if process.name.isdigit() else []
            found += [task / "comm" for task in tasks if _read(task / "comm") == name]
        except OSError:
            continue  # exited while we looked
    return found


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""  # exited while we looked


@dataclass(frozen=True)
class SleepMarker:
    """A `sleep` with a duration no other process uses, so the host can find its processes."""

    seconds: str

    @property
    def command(self) -> str:
        return f"sleep {self.seconds}"

    def pids(self) -> list[int]:
        """Host pids of every live process running this sleep."""
        needle = f"sleep\0{self.seconds}\0".encode()
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue  # exited while we looked
            if cmdline.endswith(needle):
                found.append(int(entry.name))
        return found

    async def wait_gone(self) -> list[int]:
        """Pids still running after waiting up to ~10 s for them all to end."""
        for _ in range(_POLLS):
            if not self.pids():
                return []
            await asyncio.sleep(_POLL_S)
        return self.pids()

    async def wait_running(self, count: int = 1) -> None:
        """Wait (up to ~10 s) until at least `count` such processes exist."""
        for _ in range(_POLLS):
            if len(self.pids()) >= count:
                return
            await asyncio.sleep(_POLL_S)
        raise AssertionError(f"fewer than {count} processes ran {self.command!r}")


def fork_processes() -> dict[int, int]:
    """pid -> parent pid of every local fork server and spawner on the host."""
    found = {}
    needle = fork_server_argv()[-1].encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle in (entry / "cmdline").read_bytes():
                stat = (entry / "stat").read_text()
                found[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
        except OSError:
            continue  # exited while we looked
    return found


@pytest.fixture
def sleep_marker() -> SleepMarker:
    return SleepMarker(f"{random.randrange(10**6, 10**7)}.25")


@pytest.fixture
async def cloud(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeE2B]:
    """A fake E2B control plane and envd on loopback (a test module may override it)."""
    async with fake_cloud(tmp_path, monkeypatch) as fake:
        yield fake


@pytest.fixture
def local_settings(tmp_path: Path) -> Settings:
    return Settings(
        state_dir=tmp_path / "state",
        cache_dir=tmp_path / "cache",
        output_head_bytes=4096,
        output_tail_bytes=4096,
        local_warm_sandboxes=0,  # exactly the sandboxes a test makes (test_local_warm: more)
    )


@pytest.fixture
async def local_backend(local_settings: Settings) -> AsyncIterator[LocalBackend]:
    local = LocalBackend(local_settings)
    yield local
    await local.close()


@pytest.fixture
def make_local_sandbox(local_backend: LocalBackend) -> MakeSandbox:
    """Create a sandbox of `backend`; keyword arguments shape its spec."""

    async def make(
        rollout_id: str = "r1",
        *,
        network: NetworkPolicy = NetworkPolicy.NONE,
        resources: Resources | None = None,
        lifetime_s: float = 300.0,
    ) -> LocalSandbox:
        spec = SandboxSpec(network=network, resources=resources or Resources())
        request = SandboxRequest(rollout_id, spec, lifetime_s)
        return await local_backend.create(request)

    return make


@pytest.fixture
async def local_sandbox(make_local_sandbox: MakeSandbox) -> AsyncIterator[LocalSandbox]:
    local = await make_local_sandbox()
    yield local
    await local.kill()
