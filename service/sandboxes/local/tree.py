"""Finding and killing every process of one local sandbox command, from the host.

A command's processes are its first process (the leader, forked by the sandbox's
spawner), the leader's session, every descendant of theirs, and, when privileges drop,
every process of the sandbox's uid carrying the command's supplementary group
(`bwrap.command_tag`): a daemon that left the session and was orphaned still carries it,
and no sandboxed process can shed it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

__all__ = [
    "ProcessInfo",
    "ProcessTree",
    "Selection",
    "await_exits",
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


def process_info(pid: int) -> ProcessInfo:
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    groups = frozenset(int(gid) for gid in fields["Groups"].split())
    parent, session = int(fields["PPid"]), int(fields["NSsid"].split()[0])
    return ProcessInfo(parent, session, int(fields["Uid"].split()[0]), groups)


def processes() -> dict[int, ProcessInfo]:
    found = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, KeyError, IndexError):
                found[int(entry.name)] = process_info(int(entry.name))
    return found


class Selection(Protocol):
    """Which processes `kill_tree` kills (`ProcessTree`, `local_reclaim.SandboxProcesses`)."""

    def find(self) -> set[int]:
        """The pids selected now."""
        ...

    def owns(self, pid: int, found: set[int]) -> bool:
        """Whether `pid` is selected, given the pids `found` so far."""
        ...


@dataclass(frozen=True)
class ProcessTree:
    """A command's processes: its first (`leader`), its session, its descendants, and every
    process carrying its tag (`bwrap.command_tag`), daemons included."""

    leader: int
    owner: tuple[int, int] | None
    """(uid, tag) of the command's processes; None when privileges do not drop."""

    def _owns(self, info: ProcessInfo, found: set[int]) -> bool:
        tagged = self.owner is not None and (
            info.uid == self.owner[0] and self.owner[1] in info.groups
        )
        return tagged or info.session == self.leader or info.parent in found

    def owns(self, pid: int, found: set[int]) -> bool:
        return pid == self.leader or self._owns(process_info(pid), found)

    def find(self) -> set[int]:
        everyone = processes()
        found = {self.leader}
        for _ in range(len(everyone)):
            more = {pid for pid, info in everyone.items() if self._owns(info, found)} - found
            if not more:
                break
            found |= more
        return found


def kill_tree(tree: Selection) -> list[int]:
    """SIGKILL the selected processes (a command's); returns the pidfds of those signalled.

    Everything found is stopped first, and /proc read again, so nothing forked meanwhile
    escapes. Without a tag (an unprivileged server), a daemon (setsid, orphaned) escapes
    and lives on until the sandbox's teardown.
    """
    pinned: dict[int, int] = {}
    for _ in range(_STOP_ROUNDS):
        found = tree.find()
        new = found - pinned.keys()
        if not new:
            break
        for pid in new:
            with contextlib.suppress(OSError, ValueError, KeyError, IndexError):
                pidfd = os.pidfd_open(pid)
                pinned[pid] = pidfd
                if tree.owns(pid, found):  # the pid is pinned now
                    signal.pidfd_send_signal(pidfd, signal.SIGSTOP)
                else:
                    os.close(pinned.pop(pid))
    for pidfd in pinned.values():
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    return list(pinned.values())


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
