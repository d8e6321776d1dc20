"""The first process of a local sandbox's namespaces, seen from the server (the docker-exec model).

At create, the sandbox's spawner (`forkserver`) runs one bwrap that makes the
sandbox's namespaces (mount with every bind, pid, ipc, uts, and net under network NONE)
and leaves a holder sleeping in them; the spawner enters them once and forks every
command there, instead of building and tearing down namespaces per command.

The server holds a pidfd of the namespace's init (bwrap's pid 1): it cannot be fooled
by a reused pid, it says whether the sandbox still lives, and killing init kills every
process of the sandbox. `--die-with-parent` does the same when the spawner dies.
"""

from __future__ import annotations

import contextlib
import os
import signal

from service.errors import SandboxError
from service.sandboxes.local.descriptors import readable
from service.sandboxes.local.tree import await_exits

__all__ = ["Holder"]


class Holder:
    """A sandbox's init, by pidfd; the Holder owns and closes it."""

    def __init__(self, init_pidfd: int) -> None:
        self._pidfd = init_pidfd
        self._pid = _pid_of(init_pidfd)

    @property
    def pidfd(self) -> int:
        """The pidfd itself (-1 once killed), for a helper that ends with the sandbox
        (`network_attach`, which gets a copy); the Holder still owns and closes it."""
        return self._pidfd

    @property
    def alive(self) -> bool:
        """Whether init still runs: its pidfd is not readable yet, and it has not begun to
        exit. A dying init first kills every other process of its namespace and waits for
        them, and only then is its pidfd readable: in between, a command has ended killed
        while init still looks alive."""
        if self._pidfd < 0:
            return False
        exiting = _exiting(self._pid)
        return not readable([self._pidfd], 0) and not exiting

    def pid_namespace(self) -> str:
        """Init's pid namespace, as /proc/<pid>/ns/pid names it; "" once init is gone.

        Read by pid, then checked alive: had init died and its pid been reused meanwhile,
        the pidfd would say so.
        """
        try:
            namespace = os.readlink(f"/proc/{self._pid}/ns/pid")
        except OSError:
            return ""
        return namespace if self.alive else ""

    def open_root(self) -> int:
        """A descriptor of the sandbox's root directory as its init sees it (an image
        sandbox's overlay, reachable nowhere else on the host); the caller closes it."""
        try:
            root = os.open(f"/proc/{self._pid}/root", os.O_PATH | os.O_DIRECTORY)
        except OSError as exc:
            raise SandboxError(f"the sandbox's root cannot be reached: {exc}") from exc
        if not self.alive:  # its pid may have been reused meanwhile
            os.close(root)
            raise SandboxError("the sandbox's init exited while its root was being opened")
        return root

    async def kill(self) -> None:
        """Kill every process of the sandbox and wait (a while at most) until init is gone.

        Idempotent. Init's exit completes once every process of the namespace is gone.
        """
        if self._pidfd < 0:
            return
        pidfd, self._pidfd = self._pidfd, -1
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        await await_exits([pidfd])


_PF_EXITING = 0x4
"""include/linux/sched.h: set on a task from the first step of its exit."""


def _pid_of(pidfd: int) -> int:
    """The pid a pidfd refers to (-1 if it cannot be read: then never alive)."""
    try:
        with open(f"/proc/self/fdinfo/{pidfd}") as info:
            fields = dict(line.split(":", 1) for line in info if ":" in line)
        return int(fields["Pid"])
    except (OSError, KeyError, ValueError):
        return -1


def _exiting(pid: int) -> bool:
    """Whether the process `pid` has begun to exit (or is gone). Read before the pidfd is
    checked: had the pid been reused since, the pidfd is readable by then."""
    if pid <= 0:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
        return bool(int(fields[6]) & _PF_EXITING)
    except (OSError, IndexError, ValueError):
        return True
