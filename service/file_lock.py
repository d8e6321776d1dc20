"""One exclusive lock file shared by every process on a machine: two servers (or a server and
`python -m service.images`) on one cache install opencode or build an image once."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
from collections.abc import AsyncIterator
from pathlib import Path

__all__ = ["file_lock"]

_POLL_S = 0.1


@contextlib.asynccontextmanager
async def file_lock(path: Path) -> AsyncIterator[None]:
    """An exclusive flock on `path` (made if missing), polled so that waiting stays
    cancellable; released when the block ends."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                await asyncio.sleep(_POLL_S)
        yield
    finally:
        os.close(fd)
