"""Through the real server: whatever a sandbox leaves, teardown and the start-up sweep go on."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.server_process import ServerProcess
from testing.specs import command_spec

pytestmark = pytest.mark.e2e

_HOSTILE_TREE = (
    # `for i in $(seq 1500); do mkdir d && cd d; done`, without 1,500 processes
    "python3 -c \"import os; [(os.mkdir('d'), os.chdir('d')) for _ in range(1500)]\"; "
    "mkdir -p ro/inner && touch ro/inner/f $'odd\\xff\\n name' && chmod 500 ro/inner ro && "
    "mkdir locked && chmod 000 locked && ln -s /etc/passwd link"
)


def sandbox_dir(server: ServerProcess, rollout_id: str) -> Path:
    return Path(os.path.realpath(server.state_dir)) / "sandboxes" / rollout_id


async def wait_for_phase(
    stub: pb_grpc.RolloutServiceAsyncStub, rollout_id: str, phase: int
) -> None:
    async for response in stub.WatchRollout(pb.WatchRolloutRequest(rollout_id=rollout_id)):
        if response.event.HasField("phase") and response.event.phase.phase == phase:
            return
    raise AssertionError(f"rollout ended before phase {phase}")


async def finished(stub: pb_grpc.RolloutServiceAsyncStub, rollout_id: str) -> pb.Rollout:
    async for response in stub.WatchRollout(pb.WatchRolloutRequest(rollout_id=rollout_id)):
        if response.event.HasField("finished"):
            return response.event.finished
    raise AssertionError("no finished event")


async def test_teardown_removes_a_deep_read_only_tree(
    stub: pb_grpc.RolloutServiceAsyncStub, server_process: ServerProcess
) -> None:
    response = await stub.RunRollout(pb.RunRolloutRequest(spec=command_spec(_HOSTILE_TREE)))
    rollout = response.rollout
    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result.error.message
    assert not sandbox_dir(server_process, rollout.id).exists()
    assert Path("/etc/passwd").exists()


async def test_cancel_while_staging_many_files_leaves_no_directory(
    stub: pb_grpc.RolloutServiceAsyncStub, server_process: ServerProcess
) -> None:
    files = {f"d{i % 50}/f{i}.txt": b"x" * 256 for i in range(4096)}
    spec = command_spec("true", task={"instruction": "stage", "files": {}})
    for path, data in files.items():
        spec.task.files[path] = data
    started = await stub.StartRollout(pb.StartRolloutRequest(spec=spec))
    rollout_id = started.rollout.id
    await wait_for_phase(stub, rollout_id, pb.PHASE_SETUP)
    await stub.CancelRollout(pb.CancelRolloutRequest(rollout_id=rollout_id))
    ended = await finished(stub, rollout_id)
    assert ended.status == pb.ROLLOUT_STATUS_CANCELLED
    assert not sandbox_dir(server_process, rollout_id).exists()


def _deep_tree(top: Path, depth: int) -> None:
    """`depth` nested directories below `top`, made relative to open descriptors."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(depth):
        os.mkdir("d", dir_fd=fd)
        child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.close(fd)


def _orphan(server: ServerProcess) -> Path:
    """A crashed sandbox's directory: a deep tree, a read-only directory holding a
    sandbox uid's file."""
    root = Path(os.path.realpath(server.state_dir)) / "sandboxes" / "crashed-rollout"
    root.mkdir(parents=True)
    _deep_tree(root, 3000)
    readonly = root / "readonly"
    readonly.mkdir()
    (readonly / "file").write_text("x")
    if os.geteuid() == 0:
        os.chown(readonly / "file", 0x6000_1234, 0x6000_1234)
    readonly.chmod(0o500)
    return root


async def _run_one(server: ServerProcess) -> pb.Rollout:
    async with grpc.aio.insecure_channel(server.target) as channel:
        stub = pb_grpc.RolloutServiceStub(channel)
        response = await stub.RunRollout(pb.RunRolloutRequest(spec=command_spec("true")))
    return response.rollout


async def test_start_up_sweep_removes_a_crashed_sandboxs_deep_tree(
    fresh_server: ServerProcess,
) -> None:
    orphan = _orphan(fresh_server)
    fresh_server.start()
    assert (await _run_one(fresh_server)).status == pb.ROLLOUT_STATUS_SUCCEEDED
    assert not orphan.exists()


@pytest.fixture
def immutable_file(fresh_server: ServerProcess) -> Iterator[Path]:
    """A file in a crashed sandbox's directory nobody can remove until the fixture ends."""
    path = _orphan(fresh_server) / "stuck" / "immutable"
    path.parent.mkdir()
    path.write_text("x")
    subprocess.run(["chattr", "+i", str(path)], check=True)
    yield path
    subprocess.run(["chattr", "-i", str(path)], check=False)


@pytest.mark.skipif(os.geteuid() != 0, reason="chattr +i needs root")
async def test_server_starts_over_what_the_sweep_cannot_remove(
    fresh_server: ServerProcess, immutable_file: Path
) -> None:
    fresh_server.start()
    assert (await _run_one(fresh_server)).status == pb.ROLLOUT_STATUS_SUCCEEDED
    orphan = immutable_file.parent.parent
    assert sorted(path.name for path in orphan.iterdir()) == ["stuck"]
    assert "could not remove all of sandbox directory" in fresh_server.text()
    assert "immutable: Operation not permitted" in fresh_server.text()


def _mounts_under(path: Path) -> list[str]:
    text = Path("/proc/self/mountinfo").read_text()
    return [line.split()[4] for line in text.splitlines() if str(path) in line.split()[4]]


@pytest.mark.skipif(os.geteuid() != 0, reason="disk quotas need a root server")
async def test_a_killed_servers_mounted_disks_are_swept_at_restart(
    fresh_server: ServerProcess,
) -> None:
    target = fresh_server.start()
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.RolloutServiceStub(channel)
        started = await stub.StartRollout(
            pb.StartRolloutRequest(spec=command_spec("head -c 8M /dev/zero > f; sleep 300"))
        )
        await wait_for_phase(stub, started.rollout.id, pb.PHASE_AGENT)
    sandboxes = Path(os.path.realpath(fresh_server.state_dir)) / "sandboxes"
    assert _mounts_under(sandboxes)  # its disk, and the warm sandbox's
    fresh_server.stop(signal.SIGKILL)
    assert _mounts_under(sandboxes)  # a crash leaves them mounted
    fresh_server.start()
    assert (await _run_one(fresh_server)).status == pb.ROLLOUT_STATUS_SUCCEEDED
    assert not sandbox_dir(fresh_server, started.rollout.id).exists()
    for _ in range(400):  # the new rollout's directory is removed after its result (`reaper`)
        live = {entry.name for entry in sandboxes.iterdir()}
        if not any(name.startswith(".gone-") for name in live):
            break
        await asyncio.sleep(0.05)
    assert all(name.startswith("warm-") for name in live), live  # the new server's own
    assert all(any(name in point for name in live) for point in _mounts_under(sandboxes))
