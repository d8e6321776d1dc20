"""Warm local sandboxes: made ahead, renamed to the rollout that claims them."""

from __future__ import annotations

import errno
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from service.config import Settings
from service.models import NetworkPolicy, Resources, SandboxSpec
from service.sandboxes.base import WORKDIR, SandboxRequest
from service.sandboxes.local.backend import LocalBackend
from service.sandboxes.local.cgroup import MemoryCgroups
from tests.e2e.processes import eventually
from tests.sandboxes.conftest import fork_processes


@pytest.fixture
async def warm_backend(local_settings: Settings) -> AsyncIterator[LocalBackend]:
    backend = LocalBackend(local_settings.model_copy(update={"local_warm_sandboxes": 1}))
    await backend.warm_up()
    yield backend
    await backend.close()


def _request(rollout_id: str, **spec: object) -> SandboxRequest:
    return SandboxRequest(rollout_id, SandboxSpec.model_validate(spec), 300)


def _names(settings: Settings) -> list[str]:
    return sorted(entry.name for entry in (settings.state_dir / "sandboxes").iterdir())


def _warm_names(settings: Settings) -> list[str]:
    return [name for name in _names(settings) if name.startswith("warm-")]


async def test_a_rollout_takes_the_warm_sandbox_renamed_to_it(
    warm_backend: LocalBackend, local_settings: Settings
) -> None:
    [warm] = _warm_names(local_settings)
    sandbox = await warm_backend.create(_request("r1"))
    assert sandbox.id == "local-r1"
    assert warm not in _names(local_settings)
    assert "r1" in _names(local_settings)
    await sandbox.write_files({f"{WORKDIR}/staged.txt": b"host side\n"})
    seen = await sandbox.exec("cat staged.txt; echo made > made.txt", timeout_s=30)
    assert seen.stdout == "host side\n"  # its mounts followed the renamed directories
    assert await sandbox.read_file(f"{WORKDIR}/made.txt", max_bytes=100) == b"made\n"
    await warm_backend.warm_up()
    assert len(_warm_names(local_settings)) == 1  # the next one, already made
    await sandbox.kill()
    assert "r1" not in _names(local_settings)


async def test_a_claimed_sandbox_gets_the_rollouts_limits(warm_backend: LocalBackend) -> None:
    resources = Resources(max_processes=16, memory_mb=96, max_file_size_mb=1)
    sandbox = await warm_backend.create(_request("limited", resources=resources))
    result = await sandbox.exec("ulimit -u; ulimit -f", timeout_s=30)
    assert result.stdout.split() == ["16", "1024"]  # -f counts 1 KiB blocks
    if sandbox.cgroup is not None:
        assert sandbox.cgroup.path.name == "limited"
        limit = (sandbox.cgroup.path / "memory.limit_in_bytes").read_text()
        assert int(limit) == 96 * 1024 * 1024
        spawners = set((sandbox.cgroup.path / "cgroup.procs").read_text().split())
        assert len(spawners) == 1  # the spawner moved with the renamed group
    await sandbox.kill()


async def test_another_network_policy_is_not_served_warm(
    warm_backend: LocalBackend, local_settings: Settings
) -> None:
    [warm] = _warm_names(local_settings)
    sandbox = await warm_backend.create(_request("open", network=NetworkPolicy.FULL))
    assert warm in _names(local_settings)  # still waiting for a NONE rollout
    host = os.readlink("/proc/self/ns/net")
    inside = await sandbox.exec("readlink /proc/self/ns/net; ip -4 -brief address", timeout_s=30)
    namespace, *interfaces = inside.stdout.splitlines()
    assert namespace != host  # FULL: a namespace of its own, routed by pasta
    assert any(line.startswith("eth0") for line in interfaces), inside.stdout
    await sandbox.kill()


def _bwrap_of(home: bytes) -> list[int]:
    """Pids of the bwrap processes (outer and init) of the sandbox with this home."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if Path(argv[0].decode(errors="replace")).name == "bwrap" and home in argv:
            found.append(int(entry.name))
    return found


async def test_a_warm_sandbox_that_died_is_not_handed_out(
    warm_backend: LocalBackend, local_settings: Settings
) -> None:
    [warm] = _warm_names(local_settings)
    home = str(local_settings.state_dir / "sandboxes" / warm / "disk" / "home").encode()
    holder = _bwrap_of(home)
    assert holder
    for pid in holder:
        os.kill(pid, signal.SIGKILL)
    await eventually(lambda: not any(Path(f"/proc/{pid}").exists() for pid in holder))
    sandbox = await warm_backend.create(_request("after"))
    assert (await sandbox.exec("echo fresh", timeout_s=30)).stdout == "fresh\n"
    assert warm not in _names(local_settings)
    await sandbox.kill()


async def test_warm_sandboxes_survive_the_sweep_and_die_with_the_backend(
    local_settings: Settings,
) -> None:
    backend = LocalBackend(local_settings.model_copy(update={"local_warm_sandboxes": 1}))
    await backend.warm_up()
    assert await backend.sweep_orphans(set()) == 0
    assert len(_warm_names(local_settings)) == 1
    forks = fork_processes()
    ours = {pid for pid, parent in forks.items() if parent == os.getpid()}
    assert len([pid for pid, parent in forks.items() if parent in ours]) == 1
    await backend.close()
    assert _names(local_settings) == []
    assert not ours & fork_processes().keys()


async def test_a_failed_claim_falls_back_to_a_new_sandbox(
    warm_backend: LocalBackend,
    local_settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    [warm] = _warm_names(local_settings)
    if not MemoryCgroups("probe").enabled:
        pytest.skip("the fault is injected into the cgroup rename; no memory cgroups here")

    def refuse(self: object, group: Path, name: str) -> Path:
        raise OSError(errno.EBUSY, "refused", str(group))

    monkeypatch.setattr(MemoryCgroups, "rename", refuse)
    sandbox = await warm_backend.create(_request("fallback"))
    assert f"could not claim warm sandbox {warm}" in caplog.text
    assert (await sandbox.exec("echo made", timeout_s=30)).stdout == "made\n"
    assert warm not in _names(local_settings)
    await sandbox.kill()
    await warm_backend.reaped()
    await warm_backend.warm_up()
    assert [name for name in _names(local_settings) if not name.startswith("warm-")] == []
