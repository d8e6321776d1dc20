"""Process memory: large buffers freed by the server go back to the operating system, and the
cyclic garbage collector leaves alone what the server made at start.

glibc serves an allocation from its heap unless it is larger than a threshold that starts at
128 KiB and rises to the size of every large block freed (up to 32 MiB). After one 20 MiB
spec, every later spec-sized buffer (the request, its files, their base64 for the store)
comes from the heap, and a heap fragmented by them is rarely returned: RSS stayed ~200 MiB
higher after ten such rollouts with nothing alive to show for it. Fixing the threshold keeps
large buffers in their own mappings, unmapped when freed.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import platform

__all__ = ["freeze_startup_objects", "return_large_frees_to_the_os"]

log = logging.getLogger(__name__)

_M_MMAP_THRESHOLD = -3
"""mallopt's parameter number for the mmap threshold (glibc's malloc.h)."""
_MMAP_THRESHOLD_BYTES = 128 * 1024
"""glibc's own starting value, now kept fixed."""
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
