"""The disk pool: a sandbox's disk, wiped, is the next sandbox's, and nothing of the first
is visible to the second; the quota holds; shutdown and the start-up sweep leave none."""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from service.config import Settings
from service.models import Resources, SandboxSpec
from service.sandboxes.base import SandboxRequest
from service.sandboxes.local.backend import LocalBackend, LocalSandbox
from testing.server_process import ServerProcess
from testing.specs import command_spec
from tests.e2e.processes import eventually

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="disk quotas need a root server")

_QUOTA_MB = 64
_MIB = 1024 * 1024
_LISTING = "find ~ /tmp -mindepth 1 -printf '%p %m %u\\n' | sort; df --output=used -B1K ~ | tail -1"
_ADVERSARY = (
    "echo secret > ~/workdir/left.txt; echo secret > /tmp/.hidden; mkdir -p ~/.cache/a/b; "
    "echo secret > ~/.cache/a/b/c; mkfifo /tmp/pipe; ln -s /etc/passwd ~/link; "
    "ln ~/workdir/left.txt ~/hardlink; mkdir ~/locked; echo secret > ~/locked/f; "
    "chmod 000 ~/locked; setfattr -n user.note -v secret ~/workdir 2>/dev/null; "
    "chmod 700 ~/workdir; head -c 20M /dev/urandom > /tmp/big; sync; echo done"
)


@pytest.fixture
def pool_settings(local_settings: Settings) -> Settings:
    return local_settings.model_copy(update={"local_disk_pool": 1, "sandbox_disk_mb": _QUOTA_MB})


@pytest.fixture
async def pool_backend(pool_settings: Settings) -> AsyncIterator[LocalBackend]:
    backend = LocalBackend(pool_settings)
    await backend.warm_up()  # the pool's one disk, made ahead
    yield backend
    await backend.close()


def _pooled(settings: Settings) -> list[Path]:
    pool = Path(os.path.realpath(settings.state_dir)) / "disk-pool"
    return sorted(pool.iterdir()) if pool.is_dir() else []


def _mounts_below(path: Path) -> list[str]:
    root = os.path.realpath(path)
    with open("/proc/self/mountinfo") as mountinfo:
        return [line.split()[4] for line in mountinfo if line.split()[4].startswith(root)]


async def _create(backend: LocalBackend, name: str, disk_mb: int = 0) -> LocalSandbox:
    spec = SandboxSpec(resources=Resources(disk_mb=disk_mb))
    return await backend.create(SandboxRequest(name, spec, 300))


async def _used_once(backend: LocalBackend, script: str) -> tuple[int, str]:
    """Run `script` in a new sandbox, then tear it down and wait for its disk to be back
    in the pool; the disk image's inode and what a fresh sandbox sees."""
    sandbox = await _create(backend, "first")
    fresh = await sandbox.exec(_LISTING, timeout_s=30)
    image = sandbox.layout.disk_image.stat().st_ino
    done = await sandbox.exec(script, timeout_s=120)
    assert done.exit_code == 0, done.stderr
    await sandbox.kill()
    await backend.reaped()
    return image, fresh.stdout


async def test_the_next_sandbox_gets_the_disk_wiped(
    pool_backend: LocalBackend, pool_settings: Settings
) -> None:
    [ready] = _pooled(pool_settings)
    image, fresh = await _used_once(pool_backend, _ADVERSARY)
    [recycled] = _pooled(pool_settings)
    assert recycled != ready  # the first sandbox took the ready one; its own came back
    allocated = os.stat(recycled / "disk.img").st_blocks * 512
    assert allocated < 20 * _MIB, allocated  # freed blocks went back to the host (FITRIM)

    second = await _create(pool_backend, "second")
    try:
        assert second.layout.disk_image.stat().st_ino == image  # the same disk, reused
        assert _pooled(pool_settings) == []
        seen = await second.exec(_LISTING, timeout_s=30)
        listing, used = seen.stdout.rsplit("\n", 2)[0], int(seen.stdout.split()[-1])
        assert listing == fresh.rsplit("\n", 2)[0]  # what a new disk holds, nothing more
        assert used <= int(fresh.split()[-1]) + 1024, (used, fresh)
    finally:
        await second.kill()


async def test_the_quota_holds_on_a_reused_disk(
    pool_backend: LocalBackend, pool_settings: Settings
) -> None:
    image, _ = await _used_once(pool_backend, "head -c 100M /dev/zero > ~/full; true")
    second = await _create(pool_backend, "second")
    try:
        assert second.layout.disk_image.stat().st_ino == image
        fill = await second.exec(
            "head -c 40M /dev/zero > a.bin; echo home=$?; "
            "head -c 200M /dev/urandom > /tmp/b.bin; echo more=$?",
            timeout_s=120,
        )
        assert fill.stdout.splitlines() == ["home=0", "more=1"], fill.stderr
        assert "No space left on device" in fill.stderr
    finally:
        await second.kill()


async def test_another_size_is_made_for_its_sandbox_and_never_pooled(
    pool_backend: LocalBackend, pool_settings: Settings
) -> None:
    [ready] = _pooled(pool_settings)
    other = await _create(pool_backend, "other", disk_mb=2 * _QUOTA_MB)
    assert _pooled(pool_settings) == [ready]  # not taken: another size
    sizes = await other.exec("df --output=size -B1M ~ | tail -1", timeout_s=30)
    assert int(sizes.stdout) > _QUOTA_MB
    await other.kill()
    await pool_backend.reaped()
    assert _pooled(pool_settings) == [ready]
    assert _mounts_below(pool_settings.state_dir / "sandboxes") == []


async def test_close_and_the_start_up_sweep_leave_no_pooled_disk(
    pool_settings: Settings,
) -> None:
    backend = LocalBackend(pool_settings)
    await backend.warm_up()
    sandbox = await _create(backend, "live")
    await backend.warm_up()
    crashed = _pooled(pool_settings)
    assert crashed  # made ahead again after the take

    restarted = LocalBackend(pool_settings)  # a server started over a crashed one's state
    await restarted.sweep_orphans({"live"})
    assert _pooled(pool_settings) == []
    assert _mounts_below(pool_settings.state_dir / "disk-pool") == []

    await restarted.warm_up()
    assert len(_pooled(pool_settings)) == 1
    await restarted.sweep_orphans({"live"})  # its own ready disk stays
    assert len(_pooled(pool_settings)) == 1
    await sandbox.kill()
    await backend.close()
    await restarted.close()
    assert _pooled(pool_settings) == []
    assert _mounts_below(pool_settings.state_dir) == []


async def _run_rollout(target: str) -> None:
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.RolloutServiceStub(channel)
        done = await stub.RunRollout(pb.RunRolloutRequest(spec=command_spec("echo x > f")))
    assert done.rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, done.rollout.result.error


@pytest.mark.e2e
async def test_a_killed_servers_pooled_disks_are_swept_and_a_stopped_one_leaves_none(
    tmp_path: Path,
) -> None:
    env = {"ROLLOUT_LOCAL_DISK_POOL": "2", "ROLLOUT_SANDBOX_DISK_MB": str(_QUOTA_MB)}
    server = ServerProcess(tmp_path / "state", env=env)
    state = Path(os.path.realpath(tmp_path / "state"))
    pool = state / "disk-pool"
    await _run_rollout(server.start())
    await eventually(lambda: len(_mounts_below(pool)) == 2)  # made ahead and given back
    server.stop(signal.SIGKILL)
    assert len(_mounts_below(pool)) == 2  # a crash leaves them mounted

    target = server.start()
    await eventually(lambda: _mounts_below(pool) == [])  # the start-up sweep
    assert list(pool.iterdir()) == []
    await _run_rollout(target)
    await eventually(lambda: len(_mounts_below(pool)) == 2)
    assert server.stop() == 0
    assert _mounts_below(state) == []
    assert list(pool.iterdir()) == []
