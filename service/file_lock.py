"""One exclusive lock file shared by every process on a machine: two servers (or a server and
`python -m service.images`) on one cache install opencode or build an image once.

The locks live in the cache, which local sandboxes see read-only; flock needs no write access,
so each lock file is the server's alone (0600): no sandbox user can open it and hold the lock
to stall an install or a build."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
from collections.abc import AsyncIterator
from pathlib import Path

__all__ = ["file_lock", "lock_now"]

_POLL_S = 0.1


@contextlib.asynccontextmanager
async def file_lock(path: Path, *, shared: bool = False) -> AsyncIterator[None]:
    """A flock on `path` (made if missing), exclusive unless `shared`, polled so that
    waiting stays cancellable; released when the block ends."""
    fd = _open(path)
    try:
        while True:
            if _take(fd, shared):
                break
            await asyncio.sleep(_POLL_S)
        yield
    finally:
        os.close(fd)


def lock_now(path: Path) -> int | None:
    """A descriptor holding the flock on `path` (made if missing) exclusively, released when
    it is closed; None, without waiting, if another holds it."""
    fd = _open(path)
    if _take(fd, shared=False):
        return fd
    os.close(fd)
    return None


def _open(path: Path) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.fchmod(fd, 0o600)  # one made before this rule kept 0644
    except BaseException:
        os.close(fd)
        raise
    return fd


def _take(fd: int, shared: bool) -> bool:
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True
