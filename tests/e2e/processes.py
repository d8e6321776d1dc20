"""Looking at host processes from a test: what a sandbox left running."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path

__all__ = ["eventually", "processes_with"]


def processes_with(marker: str) -> list[int]:
    """Host pids whose command line contains `marker` (sandboxed processes included)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


async def eventually(predicate: Callable[[], object], timeout_s: float = 15.0) -> None:
    """Wait until `predicate()` is truthy; fail the test if it never is."""
    for _ in range(int(timeout_s / 0.05)):
        if predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"condition never held within {timeout_s}s")
