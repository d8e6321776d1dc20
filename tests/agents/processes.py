"""Watching a real agent's processes from the host while it runs in its sandbox."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from pathlib import Path

__all__ = ["TIMEOUT_S", "running", "until"]

TIMEOUT_S = 15.0
"""A timeout test's agent deadline, which the test waits out: time for any agent to reach its
tool call on a loaded machine (1-5 s seen), and no more."""


async def until(condition: Callable[[], bool], *, limit_s: float = 60.0) -> None:
    """Poll `condition()` until true (bounded so a broken run fails instead of hanging)."""
    async with asyncio.timeout(limit_s):
        while True:
            if condition():
                return
            await asyncio.sleep(0.1)


def running(marker: str) -> bool:
    """Whether a host process runs exactly `marker` (e.g. "sleep 3456") as its command line."""
    wanted = marker.replace(" ", "\0").encode() + b"\0"
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if entry.name.isdigit() and (entry / "cmdline").read_bytes() == wanted:
                return True
    return False
