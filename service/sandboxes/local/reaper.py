"""Removing a torn-down sandbox's directory after its rollout has its result.

A sandbox's directory holds its disk, a loop-mounted filesystem: detaching it and
removing what the agent left (`removal.remove_tree`) costs tens of milliseconds, and
more for a big tree, none of which the rollout needs to wait for once every process
of the sandbox is dead. So teardown moves the directory aside, a rename in the same
directory (mounts follow it), and it is removed in the background:

    <sandboxes>/<name>                 the sandbox, until its processes are dead
    <sandboxes>/.gone-<name>-<random>  moved aside: no rollout id can take this name,
                                       and a server that crashed before removing it
                                       sweeps it at start, as any unknown directory

A disk pool may keep the directory's disk instead (`recycle`, `disk_pool`). Shutdown
waits for the removals under way (`drain`).

A sandbox dies with its spawner, which dies with the server's socket, but a spawner
killed (SIGKILL) while bwrap built its sandbox leaves the sandbox's init, whose
parent-death signal bwrap arms last (`holder_start.await_holder`), alive for good,
holding the sandbox's mounts. The start-up sweep kills it first (`kill_leftover_holders`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import uuid
from collections.abc import Callable
from pathlib import Path

from service.sandboxes.local.descriptors import readable
from service.sandboxes.local.removal import remove_tree

__all__ = ["Reaper", "kill_leftover_holders"]

_log = logging.getLogger(__name__)
_GONE = ".gone-"


class Reaper:
    """Removes the directories of torn-down sandboxes in the background."""

    def __init__(self, recycle: Callable[[Path], bool] | None = None) -> None:
        self._removing: set[asyncio.Task[None]] = set()
        self._recycle = recycle
        """Keeps a moved-aside directory's disk, in a thread: True if it took the directory."""

    async def remove(self, root: Path) -> None:
        """Move `root` aside and remove it in the background; in place if it cannot be
        moved. Every process of its sandbox must be dead."""
        gone = root.with_name(f"{_GONE}{root.name}-{uuid.uuid4().hex[:12]}")
        try:
            await asyncio.to_thread(os.rename, root, gone)
        except FileNotFoundError:
            return
        except OSError as exc:
            _log.warning(
                "could not move sandbox directory %s aside (%s): removing it now", root, exc
            )
            await asyncio.to_thread(remove_tree, root)
            return
        task = asyncio.get_running_loop().create_task(asyncio.to_thread(self._dispose, gone))
        self._removing.add(task)
        task.add_done_callback(self._removing.discard)

    def _dispose(self, gone: Path) -> None:
        if self._recycle is None or not self._recycle(gone):
            remove_tree(gone)

    async def drain(self) -> None:
        """Wait until every removal under way has finished."""
        while self._removing:
            await asyncio.wait(set(self._removing))


def kill_leftover_holders(bwrap: str, root: Path, names: set[str]) -> list[int]:
    """SIGKILL what is left of the holders of the sandboxes `names` under `root` (an earlier
    run's): bwrap processes whose command line names a path in one of their directories,
    bwrap itself and the sandbox's init, which keeps bwrap's command line and whose end
    kills every process of the sandbox. Returns pidfds of those signalled.

    A command line is a process's own to set: a sandboxed process can make one that
    matches, which only gets itself killed. No other server's sandbox matches (its
    directories are under another state dir), and a process is signalled through a pidfd
    opened before its command line is read again, so a reused pid is never hit.
    """
    program = bwrap.encode()
    prefixes = tuple(f"{root}/{name}/".encode() for name in names)

    def matches(pid: str) -> bool:
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            argv = file.read().split(b"\0")
        return argv[0] == program and any(arg.startswith(prefixes) for arg in argv[1:])

    signalled = []
    for entry in os.scandir("/proc") if prefixes else ():
        with contextlib.suppress(OSError):
            if entry.name.isdigit() and matches(entry.name):
                pidfd = os.pidfd_open(int(entry.name))
                killed = False
                try:  # the same process: still matching, and alive since the pidfd
                    if matches(entry.name) and not readable([pidfd], 0):
                        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                        killed = True
                finally:
                    if killed:
                        signalled.append(pidfd)
                    else:
                        os.close(pidfd)
    return signalled
