"""Killing every process of a local sandbox but its init and holder, from the host.

Whatever a command started, however it hid (setsid, double fork, SIGTERM ignored,
another uid, a pid namespace of its own), lives in the sandbox's pid namespace or in one
nested inside it: no process can leave its pid namespace. So the sandbox's processes are
those whose /proc/<pid>/ns/pid is the sandbox's, or a namespace whose ancestors include
it (NS_GET_PARENT), but for pids 1 and 2 of the sandbox's own: bwrap's init and the
holder (`bwrap.holder_argv`). A namespace link costs one readlink: the host's other
processes are never read further.

Where every command was born in the sandbox's memory cgroup (its spawner joined it), only
that cgroup's members are candidates, not every process of the host: none can leave it
(moving a process needs write access to another cgroup's files, which no sandboxed process
has: no cgroup filesystem on an image, a read-only one owned by host root on the host's
root). Scanning the whole of /proc cost ~2 ms per round on a quiet host, three rounds per
rollout, and grew with every other sandbox's processes.

`kill_all` stops and kills them (`local_tree.kill_tree`), waits for them, and does it
again until a round finds none, so what forked meanwhile dies too.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
from dataclasses import dataclass
from pathlib import Path

from service.sandboxes.local.tree import Selection, await_exits, kill_tree

__all__ = ["SandboxProcesses", "kill_all"]

_NS_GET_PARENT = 0xB702
"""ioctl on a namespace descriptor: a descriptor of its parent (linux/nsfs.h)."""
_SPARED = 2
"""The sandbox's init (pid 1 inside) and holder (pid 2) live on."""
_MAX_NESTING = 32
"""The kernel allows 32 levels of pid namespaces."""


@dataclass(frozen=True)
class SandboxProcesses:
    """Every process of a sandbox but its init and holder (a `local_tree.Selection`)."""

    namespace: str
    """The sandbox's pid namespace, as /proc/<init>/ns/pid names it (`pid:[inode]`)."""
    cgroup: Path | None = None
    """The memory cgroup every command of the sandbox was born in, if any: the candidates."""

    def find(self) -> set[int]:
        by_namespace: dict[str, set[int]] = {}
        for pid in self._candidates():
            with contextlib.suppress(OSError):
                link = os.readlink(f"/proc/{pid}/ns/pid")
                by_namespace.setdefault(link, set()).add(int(pid))
        ours: set[int] = set()
        for link, pids in by_namespace.items():
            if link == self.namespace or self._nested(min(pids)):
                ours |= pids
        return {pid for pid in ours if self.owns(pid, ours)}

    def _candidates(self) -> list[str]:
        """The cgroup's members, or every process of the host (no cgroup, or it is gone)."""
        if self.cgroup is not None:
            with contextlib.suppress(OSError):
                return (self.cgroup / "cgroup.procs").read_text().split()
        return [entry.name for entry in os.scandir("/proc") if entry.name.isdigit()]

    def owns(self, pid: int, found: set[int]) -> bool:
        try:
            link = os.readlink(f"/proc/{pid}/ns/pid")
            dying, inner_pid = _state(pid)
        except (OSError, ValueError, KeyError, IndexError):
            return False
        if dying:  # nothing to kill (e.g. the forwarder, killed as the agent's access ended)
            return False
        if link == self.namespace:
            return inner_pid > _SPARED
        return self._nested(pid)

    def _nested(self, pid: int) -> bool:
        """Whether `pid`'s pid namespace lies below the sandbox's."""
        ancestor = int(self.namespace.removeprefix("pid:[").removesuffix("]"))
        try:
            fd = os.open(f"/proc/{pid}/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            for _ in range(_MAX_NESTING):
                parent = fcntl.ioctl(fd, _NS_GET_PARENT)
                os.close(fd)
                fd = parent
                if os.fstat(fd).st_ino == ancestor:
                    return True
        except OSError:  # the host's own namespace has no parent
            return False
        finally:
            os.close(fd)
        return False


_SIGKILL_BIT = 1 << (9 - 1)
"""SIGKILL in /proc/<pid>/status's pending-signal masks."""
_PF_EXITING = 0x4
"""The kernel's flag of a task in exit (/proc/<pid>/stat, field 9)."""


def _state(pid: int) -> tuple[bool, int]:
    """(whether it has exited or is on its way, so that a process killed just before is not
    counted again however long a loaded machine takes to end it; its pid in its own pid
    namespace), from /proc/<pid>/status and stat.

    A pending SIGKILL is the whole process's end. Zombie and in exit describe its leader
    thread alone: one that left by the thread exit (SYS_exit) looks so while the process's
    other threads run on. So past the leader, every thread must be ending, all of them
    listed (as many as its Threads count); anything less counts as alive.
    """
    process = Path(f"/proc/{pid}")
    fields = _status(process)
    dying = _ending(process, fields)
    if dying and not _killed(fields) and int(fields["Threads"]) > 1:
        try:
            tasks = list((process / "task").iterdir())
            dying = len(tasks) == int(fields["Threads"]) and all(
                _ending(task, _status(task)) for task in tasks
            )
        except OSError:  # a thread came or went meanwhile
            dying = False
    return dying, int(fields["NSpid"].split()[-1])


def _status(path: Path) -> dict[str, str]:
    return dict(line.split(":", 1) for line in (path / "status").read_text().splitlines())


def _killed(fields: dict[str, str]) -> bool:
    pending = int(fields["SigPnd"], 16) | int(fields["ShdPnd"], 16)
    return bool(pending & _SIGKILL_BIT)


def _ending(path: Path, fields: dict[str, str]) -> bool:
    """Whether the thread (or process leader) at `path` never runs user code again: SIGKILL
    pending, a zombie, or in exit."""
    flags = int((path / "stat").read_text().rsplit(")", 1)[1].split()[6])
    zombie = fields["State"].split()[0] in {"Z", "X"}
    return _killed(fields) or zombie or bool(flags & _PF_EXITING)


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
