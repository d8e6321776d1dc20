"""Finding and killing processes of a local sandbox from the host: one command's, or all.

A command's processes are its first process (the leader, forked by the sandbox's
spawner), the leader's session, every descendant of theirs, and, when privileges drop,
every process of the sandbox's uid carrying the command's supplementary group
(`bwrap.command_tag`): a daemon that left the session and was orphaned still carries it,
and no sandboxed process can shed it.

All of a sandbox's processes (`SandboxProcesses`) are every member of its pid namespace
and every descendant of one (a namespace nested inside included), but for its init and
holder: whatever a command started, however it hid (setsid, double fork, SIGTERM
ignored, another uid), lives in that namespace, which no process can leave.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

__all__ = [
    "ProcessInfo",
    "ProcessTree",
    "SandboxProcesses",
    "await_exits",
    "kill_all",
    "kill_tree",
    "process_info",
    "processes",
]

_EXIT_WAIT_S = 10.0
_STOP_ROUNDS = 8


@dataclass(frozen=True)
class ProcessInfo:
    """What /proc/<pid>/status says of a process, as the host sees it."""

    parent: int
    session: int
    uid: int
    groups: frozenset[int]
    inner_pid: int
    """Its pid in its own pid namespace (the host pid outside any)."""
    zombie: bool
    """Exited, not yet reaped: nothing left to kill."""


def process_info(pid: int) -> ProcessInfo:
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    groups = frozenset(int(gid) for gid in fields["Groups"].split())
    parent, session = int(fields["PPid"]), int(fields["NSsid"].split()[0])
    inner_pid = int(fields["NSpid"].split()[-1])
    zombie = fields["State"].split()[0] in {"Z", "X"}
    uid = int(fields["Uid"].split()[0])
    return ProcessInfo(parent, session, uid, groups, inner_pid, zombie)


def processes() -> dict[int, ProcessInfo]:
    found = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, KeyError, IndexError):
                found[int(entry.name)] = process_info(int(entry.name))
    return found


class Selection(Protocol):
    """Which processes `kill_tree` kills."""

    def find(self, processes: dict[int, ProcessInfo]) -> set[int]:
        """The selected pids among `processes` (all of the host's)."""
        ...

    def owns(self, pid: int, info: ProcessInfo, found: set[int]) -> bool:
        """Whether `pid` is selected, given the pids `found` so far."""
        ...


@dataclass(frozen=True)
class ProcessTree:
    """A command's processes: its first (`leader`), its session, its descendants, and every
    process carrying its tag (`bwrap.command_tag`), daemons included."""

    leader: int
    owner: tuple[int, int] | None
    """(uid, tag) of the command's processes; None when privileges do not drop."""

    def owns(self, pid: int, info: ProcessInfo, found: set[int]) -> bool:
        tagged = self.owner is not None and (
            info.uid == self.owner[0] and self.owner[1] in info.groups
        )
        return pid == self.leader or tagged or info.session == self.leader or info.parent in found

    def find(self, processes: dict[int, ProcessInfo]) -> set[int]:
        return _closure({self.leader}, processes, self.owns)


@dataclass(frozen=True)
class SandboxProcesses:
    """Every process of a sandbox but its init and holder (pids 1 and 2 of its namespace)."""

    namespace: str
    """The sandbox's pid namespace, as /proc/<init>/ns/pid names it (`pid:[inode]`)."""

    def _member(self, pid: int) -> bool:
        try:
            return os.readlink(f"/proc/{pid}/ns/pid") == self.namespace
        except OSError:
            return False

    def owns(self, pid: int, info: ProcessInfo, found: set[int]) -> bool:
        if info.zombie:
            return False
        if info.parent in found:  # a nested namespace's processes descend from a member
            return True
        return self._member(pid) and info.inner_pid > _HOLDER_PID

    def find(self, processes: dict[int, ProcessInfo]) -> set[int]:
        members = {pid for pid in processes if self._member(pid)}
        spared = {pid for pid in members if processes[pid].inner_pid <= _HOLDER_PID}
        found = _closure(members, processes, self.owns)
        return {pid for pid in found - spared if not processes[pid].zombie}


_HOLDER_PID = 2
"""The holder's pid in its sandbox's namespace; bwrap's init is 1 (`bwrap.holder_argv`)."""


def _closure(
    seed: set[int],
    processes: dict[int, ProcessInfo],
    owns: Callable[[int, ProcessInfo, set[int]], bool],
) -> set[int]:
    found = set(seed)
    for _ in range(len(processes)):
        more = {pid for pid, info in processes.items() if owns(pid, info, found)} - found
        if not more:
            break
        found |= more
    return found


def kill_tree(tree: Selection) -> list[int]:
    """SIGKILL the selected processes; returns the pidfds of those signalled.

    Everything found is stopped first, and /proc read again, so nothing forked meanwhile
    escapes. Without a tag (an unprivileged server), a daemon (setsid, orphaned) escapes
    and lives on until the sandbox's teardown.
    """
    pinned: dict[int, int] = {}
    for _ in range(_STOP_ROUNDS):
        found = tree.find(processes())
        new = found - pinned.keys()
        if not new:
            break
        for pid in new:
            with contextlib.suppress(OSError, ValueError, KeyError, IndexError):
                pidfd = os.pidfd_open(pid)
                pinned[pid] = pidfd
                if tree.owns(pid, process_info(pid), found):  # the pid is pinned now
                    signal.pidfd_send_signal(pidfd, signal.SIGSTOP)
                else:
                    os.close(pinned.pop(pid))
    for pidfd in pinned.values():
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    return list(pinned.values())


async def kill_all(selection: Selection, rounds: int) -> tuple[int, bool]:
    """Kill the selected processes and wait for them, again until a round finds none.

    Returns how many were killed, and whether a round found none within `rounds`.
    """
    killed = 0
    for _ in range(rounds):
        pidfds = await asyncio.to_thread(kill_tree, selection)
        if not pidfds:
            return killed, True
        killed += len(pidfds)
        await await_exits(pidfds)
    return killed, False


async def await_exits(pidfds: list[int], timeout_s: float = _EXIT_WAIT_S) -> None:
    """Wait (`timeout_s` at most) until every process behind `pidfds` has exited; closes them.

    A pidfd becomes readable once its process has exited.
    """
    loop = asyncio.get_running_loop()
    pending = set(pidfds)
    done: asyncio.Future[None] = loop.create_future()

    def exited(fd: int) -> None:
        loop.remove_reader(fd)
        pending.discard(fd)
        if not pending and not done.done():
            done.set_result(None)

    try:
        for fd in pidfds:
            loop.add_reader(fd, exited, fd)
        if pending:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done, timeout_s)
    finally:
        for fd in pidfds:
            loop.remove_reader(fd)
            os.close(fd)
