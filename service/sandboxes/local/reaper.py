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
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from collections.abc import Callable
from pathlib import Path

from service.sandboxes.local.removal import remove_tree

__all__ = ["Reaper"]

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
