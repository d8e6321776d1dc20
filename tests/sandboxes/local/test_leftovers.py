"""A local sandbox never outlives its server: not one whose server died while bwrap built
it (`holder_start.await_holder`), and the next start kills whatever an earlier run left
(`reaper.kill_leftover_holders`)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from service.config import Settings
from service.sandboxes.local.backend import LocalBackend
from service.sandboxes.local.bwrap import require_bwrap
from service.sandboxes.local.descriptors import readable
from service.sandboxes.local.reaper import kill_leftover_holders
from service.sandboxes.local.spawner import SpawnerSetup, fork_server_argv
from service.sandboxes.local.wire import send
from tests.e2e.processes import eventually
from tests.sandboxes.conftest import SleepMarker, fork_processes

_BOUND_S = 30.0
"""How long a process that should die is given, on a loaded machine, before the test fails."""


def _naming(needle: str) -> list[int]:
    """Host pids of the live processes whose command line holds `needle`."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and needle.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue  # exited while we looked
    return found


def _still_alive(pidfds: list[int]) -> list[int]:
    """Those of `pidfds` whose process is still alive after waiting for each at most
    `_BOUND_S`."""
    pending = set(pidfds)
    while pending and (ended := readable(list(pending), _BOUND_S)):
        pending -= ended
    return sorted(pending)


async def test_a_server_gone_while_bwrap_builds_the_sandbox_leaves_no_process(
    sleep_marker: SleepMarker,
) -> None:
    """bwrap's `--block-fd` holds the sandbox's init before it arms its parent-death signal
    (its mounts are in place, it has not forked the holder yet), for as long as the
    fork server's stdin, inherited, stays open: the window where a server gone used to
    leave the init (and its namespaces and mounts) alive for good."""
    gate, gate_open = os.pipe()
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    fork_server = await asyncio.create_subprocess_exec(
        *fork_server_argv(),
        str(theirs.fileno()),
        cwd=Path(__file__).parents[3],
        stdin=gate,
        stdout=subprocess.DEVNULL,
        pass_fds=(theirs.fileno(),),
        env={},
        start_new_session=True,
    )
    theirs.close()
    os.close(gate)
    holder = [require_bwrap(), "--die-with-parent", "--unshare-pid", "--unshare-net"]
    holder += ["--block-fd", "0", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"]
    holder += ["--", "sh", "-c", f"echo ready; exec {sleep_marker.command}"]
    server, spawner_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pidfds: list[int] = []
    try:
        send(ours, vars(SpawnerSetup(holder=holder, cgroup=None, uid=None)), [spawner_end.fileno()])
        spawner_end.close()
        await eventually(lambda: len(_naming(sleep_marker.seconds)) == 2)  # bwrap, its init
        spawners = [pid for pid, parent in fork_processes().items() if parent == fork_server.pid]
        pidfds = [os.pidfd_open(pid) for pid in [*spawners, *_naming(sleep_marker.seconds)]]
        assert len(pidfds) == 3
        server.close()  # the server is gone
        assert _still_alive(pidfds) == []
        assert _naming(sleep_marker.seconds) == []
    finally:
        for pidfd in pidfds:
            if not readable([pidfd], 0):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            os.close(pidfd)
        server.close()
        os.close(gate_open)
        ours.close()
        await fork_server.wait()


async def test_the_start_up_sweep_kills_the_leftover_holders_of_orphans_only(
    tmp_path: Path, sleep_marker: SleepMarker
) -> None:
    """A holder left by an earlier run (bwrap and the sandbox's init, whose parent-death
    signal never fired) dies before its directory is removed; the holders of a live
    rollout's sandbox and of another state dir's are left alone."""
    state = tmp_path / "state"
    root = Path(os.path.realpath(state)) / "sandboxes"
    directories = {
        "orphan": root / "orphan",
        "live": root / "live",
        "elsewhere": Path(os.path.realpath(tmp_path)) / "other" / "sandboxes" / "orphan",
    }
    holders = {}
    for name, directory in directories.items():
        (directory / "home").mkdir(parents=True)
        command = sleep_marker.command if name == "orphan" else "sleep 3600"
        # Only the orphan's init outlives its bwrap; the others end with theirs, below.
        argv = [require_bwrap(), "--unshare-pid", "--ro-bind", "/", "/"]
        if name != "orphan":
            argv.insert(1, "--die-with-parent")
        argv += ["--bind", str(directory / "home"), "/mnt", "--", "sh", "-c", command]
        holders[name] = await asyncio.create_subprocess_exec(*argv, start_new_session=True)
    try:
        await sleep_marker.wait_running()
        backend = LocalBackend(Settings(state_dir=state, cache_dir=tmp_path / "cache"))
        assert await backend.sweep_orphans({"live"}) == 1
        assert sleep_marker.pids() == []  # its whole pid namespace died with its init
        assert await asyncio.wait_for(holders["orphan"].wait(), _BOUND_S) == -signal.SIGKILL
        assert holders["live"].returncode is None
        assert holders["elsewhere"].returncode is None
        assert [p.name for p in root.iterdir()] == ["live"]
    finally:
        for process in holders.values():
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()


def test_a_holder_gone_between_its_match_and_its_pidfd_is_passed_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sweep reads each command line twice, the second time once it holds a pidfd; a
    holder that exits (and is reaped) in between is no holder to kill, and the sweep goes
    on (it raised before: the start-up sweep, which nothing may stop). The holder stands in
    for bwrap: one process, whose command line names a path in an orphan's directory."""
    home = tmp_path / "sandboxes" / "orphan" / "home"
    home.mkdir(parents=True)
    program = "/bin/sh"
    holder = subprocess.Popen([program, "-c", "read _", str(home)], stdin=subprocess.PIPE)
    cmdline = Path(f"/proc/{holder.pid}/cmdline")
    for _ in range(int(_BOUND_S / 0.01)):  # until it has exec'd
        if cmdline.read_bytes().startswith(program.encode()):
            break
        time.sleep(0.01)
    opened = os.pidfd_open
    gone: list[int] = []

    def exits_meanwhile(pid: int, flags: int = 0) -> int:
        pidfd = opened(pid, flags)
        if pid == holder.pid:
            holder.kill()
            holder.wait()
            gone.append(pid)
        return pidfd

    monkeypatch.setattr(os, "pidfd_open", exits_meanwhile)  # the sweep's own os module
    try:
        assert kill_leftover_holders(program, home.parent.parent, {"orphan"}) == []
    finally:
        holder.kill()
        holder.wait()
    assert gone == [holder.pid]
