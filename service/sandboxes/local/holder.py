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

    @property
    def pidfd(self) -> int:
        """The pidfd itself (-1 once killed), for a helper that ends with the sandbox
        (`network_attach`, which gets a copy); the Holder still owns and closes it."""
        return self._pidfd

    @property
    def alive(self) -> bool:
        """Whether init still runs (its pidfd is not readable yet)."""
        if self._pidfd < 0:
            return False
        return not readable([self._pidfd], 0)

    def pid_namespace(self) -> str:
        """Init's pid namespace, as /proc/<pid>/ns/pid names it; "" once init is gone.

        Read by pid, then checked alive: had init died and its pid been reused meanwhile,
        the pidfd would say so.
        """
        try:
            with open(f"/proc/self/fdinfo/{self._pidfd}") as info:
                fields = dict(line.split(":", 1) for line in info if ":" in line)
            namespace = os.readlink(f"/proc/{int(fields['Pid'])}/ns/pid")
        except (OSError, KeyError, ValueError):
            return ""
        return namespace if self.alive else ""

    def open_root(self) -> int:
        """A descriptor of the sandbox's root directory as its init sees it (an image
        sandbox's overlay, reachable nowhere else on the host); the caller closes it."""
        try:
            with open(f"/proc/self/fdinfo/{self._pidfd}") as info:
                fields = dict(line.split(":", 1) for line in info if ":" in line)
            root = os.open(f"/proc/{int(fields['Pid'])}/root", os.O_PATH | os.O_DIRECTORY)
        except (OSError, KeyError, ValueError) as exc:
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
