"""Process memory: large buffers freed by the server go back to the operating system, and the
cyclic garbage collector leaves alone what the server made at start.

glibc serves an allocation from its heap unless it is larger than a threshold that starts at
128 KiB and rises to the size of every large block freed (up to 32 MiB). After one 20 MiB
spec, every later spec-sized buffer (the request, its files, their base64 for the store)
comes from the heap, and a heap fragmented by them is rarely returned: RSS stayed ~200 MiB
higher after ten such rollouts with nothing alive to show for it. Fixing the threshold keeps
large buffers in their own mappings, unmapped when freed.

What stays is smaller blocks (below the threshold) that handling a big request goes
through: freed, but kept by a thread's malloc arena, whose heap can shrink only from its
top. Ten concurrent 20 MiB-spec rollouts left RSS at 78 -> 237 MiB, one arena
holding 64 MiB of which 13 KiB was in use; a full collection freed nothing of it,
`malloc_trim(0)` gave back 100 MiB. `HeapTrimmer` calls it once the rollouts that ended
since the last call carried TRIM_AFTER_BYTES of spec between them.

A finished rollout's objects are not all freed when it ends: some sit in reference cycles
(tasks, their cancelled futures and tracebacks, a sandbox and its callbacks) that keep its
spec's files until a full collection, which the raised thresholds make rare: ten 20 MiB-spec
rollouts verified in fresh sandboxes kept +201 MiB, all of it freed by one `gc.collect()`.
So the same trim first collects, on the event loop, where finalizers may run.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import logging
import platform
from collections.abc import Callable
from typing import cast

__all__ = [
    "TRIM_AFTER_BYTES",
    "HeapTrimmer",
    "freeze_startup_objects",
    "return_large_frees_to_the_os",
]

log = logging.getLogger(__name__)

_M_MMAP_THRESHOLD = -3
"""mallopt's parameter number for the mmap threshold (glibc's malloc.h)."""
_MMAP_THRESHOLD_BYTES = 128 * 1024
"""glibc's own starting value, now kept fixed."""
TRIM_AFTER_BYTES = 16 * 1024 * 1024
"""Spec bytes of ended rollouts between two trims: a heap trim walks every arena, so
rollouts with small specs (the many) never cost one each."""
_YOUNG_THRESHOLD = 10_000
"""Allocations between collections of the youngest generation (CPython's default: 700)."""


def return_large_frees_to_the_os() -> None:
    """Fix glibc's mmap threshold for this process (nothing to do on another libc)."""
    if platform.libc_ver()[0] != "glibc":
        return
    mallopt = ctypes.CDLL(None).mallopt
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    if mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_BYTES) != 1:
        log.warning("could not fix malloc's mmap threshold; freed specs may stay resident")


def freeze_startup_objects() -> None:
    """Once the server has started: collect, then move what survives (modules, classes, the
    wiring) out of every later collection (`gc.freeze`), and collect the youngest generation
    every _YOUNG_THRESHOLD allocations, with the middle and oldest after 10 of the one below.
    Each full collection walked the whole heap, startup included, and blocked the event loop:
    at 600 live rollouts a replica spent 11% of its CPU collecting, 8% in 8 full collections
    of up to 0.39 s each, the model calls and events of every rollout waiting meanwhile
    (bench/bench_scale.py)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(_YOUNG_THRESHOLD, 10, 10)


class HeapTrimmer:
    """Gives malloc's free pages back to the operating system after big rollouts (see the
    module docstring): one trim at a time, in a thread, since it holds each arena's lock in
    turn; never on the event loop."""

    def __init__(self, after_bytes: int = TRIM_AFTER_BYTES) -> None:
        self._after_bytes = after_bytes
        self._owed_bytes = 0
        self._trim: asyncio.Future[int] | None = None
        self._malloc_trim = _malloc_trim()

    async def ended(self, spec_bytes: int) -> None:
        """A rollout whose spec carried `spec_bytes` has ended and let go of them; returns
        once a trim that is due has run. A trim already under way is waited for, and what
        it may have missed stays owed to the next."""
        self._owed_bytes += spec_bytes
        if self._malloc_trim is None or self._owed_bytes < self._after_bytes:
            return
        if self._trim is None or self._trim.done():
            self._owed_bytes = 0
            gc.collect()
            self._trim = asyncio.get_running_loop().run_in_executor(None, self._malloc_trim, 0)
        await asyncio.shield(self._trim)


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim; None on another libc."""
    if platform.libc_ver()[0] != "glibc":
        return None
    malloc_trim = ctypes.CDLL(None).malloc_trim
    malloc_trim.argtypes = (ctypes.c_size_t,)
    malloc_trim.restype = ctypes.c_int
    return cast("Callable[[int], int]", malloc_trim)
