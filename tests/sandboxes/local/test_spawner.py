"""The local backend's fork server and per-sandbox spawners (`local.forkserver`)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
from pathlib import Path

import pytest

from service.config import Settings
from service.errors import SandboxError
from service.models import SandboxSpec
from service.sandboxes.base import WORKDIR, SandboxRequest
from service.sandboxes.local.backend import LocalBackend, LocalSandbox
from service.sandboxes.local.wire import MAX_MESSAGE_BYTES, receive, send
from tests.e2e.processes import eventually
from tests.sandboxes.conftest import MakeSandbox, SleepMarker, fork_processes


def _spawners_of(fork_server: int) -> list[int]:
    return [pid for pid, parent in fork_processes().items() if parent == fork_server]


def _fork_server() -> int:
    """The fork server of this test process's backend."""
    servers = [pid for pid, parent in fork_processes().items() if parent == os.getpid()]
    assert len(servers) == 1, servers
    return servers[0]


def _zombies_of(parent: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                state, ppid = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:2]
            except OSError:
                continue  # exited while we looked
            if state == "Z" and int(ppid) == parent:
                found.append(int(entry.name))
    return found


def test_messages_carry_descriptors() -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    read, write = os.pipe()
    with ours, theirs:
        send(ours, {"op": "run", "argv": ["bash"]}, [write])
        os.close(write)
        message, fds = receive(theirs)
        assert message == {"op": "run", "argv": ["bash"]}
        assert len(fds) == 1
        os.write(fds[0], b"through")
        os.close(fds[0])
        assert os.read(read, 16) == b"through"
        with pytest.raises(ValueError, match="exceeds"):
            send(ours, {"env": {"X": "x" * MAX_MESSAGE_BYTES}})
    os.close(read)


def test_a_closed_peer_reads_as_none() -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    ours.close()
    with theirs:
        assert receive(theirs) == (None, [])


async def test_one_spawner_per_sandbox_outside_its_pid_namespace(
    make_local_sandbox: MakeSandbox,
) -> None:
    first = await make_local_sandbox("s1")
    second = await make_local_sandbox("s2")
    spawners = _spawners_of(_fork_server())
    assert len(spawners) == 2
    listing = await first.exec("ls /proc | grep -E '^[0-9]+$' | wc -l", timeout_s=30)
    assert int(listing.stdout) <= 6  # init, holder, this bash, ls, grep, wc: no spawner
    await first.kill()
    await second.kill()
    assert _spawners_of(_fork_server()) == []  # each exits once its sandbox is killed


@pytest.mark.skipif(os.geteuid() != 0, reason="privileges drop only when the server is root")
async def test_each_command_has_the_sandbox_uid_and_a_tag_of_its_own(
    local_sandbox: LocalSandbox,
) -> None:
    first = await local_sandbox.exec("id -u; id -g; id -G", timeout_s=30)
    second = await local_sandbox.exec("id -G", timeout_s=30)
    uid, gid, groups = first.stdout.splitlines()
    assert uid == gid
    assert 0x6000_0000 <= int(uid) < 0x6100_0000
    primary, tag = groups.split()  # id -G lists the primary group first
    assert primary == gid
    assert int(tag) >= 0x6100_0000
    assert second.stdout.split()[0] == gid
    assert second.stdout.split()[1] != tag


async def test_commands_keep_default_signal_dispositions(local_sandbox: LocalSandbox) -> None:
    result = await local_sandbox.exec("yes | head -n1; echo ${PIPESTATUS[0]}", timeout_s=30)
    assert result.stdout == "y\n141\n"  # killed by SIGPIPE, not an EPIPE error loop
    caught = await local_sandbox.exec("grep -E '^Sig(Ign|Blk):' /proc/self/status", timeout_s=30)
    masks = dict(line.split(":\t") for line in caught.stdout.splitlines())
    assert int(masks["SigBlk"], 16) == 0
    glibc_own = (1 << 31) | (1 << 32)  # 32 and 33: out of Python's reach, see the fork server
    assert int(masks["SigIgn"], 16) & ~glibc_own == 0


async def test_a_missing_workdir_fails_the_command_not_the_sandbox(
    local_sandbox: LocalSandbox,
) -> None:
    await local_sandbox.exec(f"rm -rf {WORKDIR}", timeout_s=30)
    result = await local_sandbox.exec("true", timeout_s=30)
    assert result.exit_code == 127
    assert WORKDIR in result.stderr
    assert "cannot start bash" in result.stderr


async def test_a_path_without_bash_fails_the_command(local_sandbox: LocalSandbox) -> None:
    process = await local_sandbox.spawn("true", env={"PATH": "/nowhere"})
    result = await process.wait()
    assert result.exit_code == 127
    assert "cannot start bash" in result.stderr


async def test_an_ended_command_is_reaped_with_the_next_one_or_soon_after(
    local_sandbox: LocalSandbox,
) -> None:
    """Its release waits for the next message to the spawner (one message per command),
    which reaps it before forking the next: that one never sees it; the last one's goes
    on its own."""
    [spawner] = _spawners_of(_fork_server())
    await local_sandbox.exec("true", timeout_s=30)
    [ended] = _zombies_of(spawner)  # released, not reaped yet: nothing told the spawner
    listing = await local_sandbox.exec("grep -l '^State:.Z' /proc/[0-9]*/status", timeout_s=30)
    assert listing.stdout == ""  # reaped before this one was forked
    assert ended not in _zombies_of(spawner)
    await eventually(lambda: not _zombies_of(spawner))


async def test_a_dead_spawner_fails_its_commands_with_a_sandbox_error(
    local_sandbox: LocalSandbox, sleep_marker: SleepMarker
) -> None:
    running = await local_sandbox.spawn(sleep_marker.command)
    await sleep_marker.wait_running()
    [spawner] = _spawners_of(_fork_server())
    os.kill(spawner, signal.SIGKILL)
    with pytest.raises(SandboxError, match="spawner"):
        await asyncio.wait_for(running.wait(), 30)
    with pytest.raises(SandboxError, match="spawner"):
        await local_sandbox.exec("true", timeout_s=30)
    await local_sandbox.kill()
    assert await sleep_marker.wait_gone() == []


async def test_a_dead_fork_server_is_started_again(
    local_backend: LocalBackend, make_local_sandbox: MakeSandbox
) -> None:
    first = await make_local_sandbox("before")
    old = _fork_server()
    os.kill(old, signal.SIGKILL)
    await first.exec("true", timeout_s=30)  # a live sandbox keeps its spawner
    second = await make_local_sandbox("after")
    assert (await second.exec("echo ok", timeout_s=30)).stdout == "ok\n"
    new = _fork_server()
    assert new != old
    await local_backend.close()
    assert new not in fork_processes()
    assert _spawners_of(new) == _spawners_of(old) == []


@pytest.mark.parametrize("delay_s", [0.0, 0.002, 0.005, 0.01, 0.02])
async def test_a_create_cancelled_midway_leaves_no_process(
    local_backend: LocalBackend, local_settings: Settings, delay_s: float
) -> None:
    """Cancelled while preparing, starting bwrap or entering: nothing of it is left."""
    marker = str(local_settings.state_dir / "sandboxes" / "cancelled").encode()
    creating = asyncio.ensure_future(local_backend.create(_request("cancelled")))
    await asyncio.sleep(delay_s)
    creating.cancel()
    try:
        sandbox = await creating
    except asyncio.CancelledError:
        pass
    else:
        await sandbox.kill()  # made before the cancel landed
    await eventually(lambda: not _processes_with(marker))
    assert not (local_settings.state_dir / "sandboxes" / "cancelled").exists()


def _request(rollout_id: str) -> SandboxRequest:
    return SandboxRequest(rollout_id, SandboxSpec(), 60)


def _processes_with(needle: bytes) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and needle in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found
