"""Process memory: large buffers freed by the server go back to the operating system.

glibc serves an allocation from its heap unless it is larger than a threshold that starts at
128 KiB and rises to the size of every large block freed (up to 32 MiB). After one 20 MiB
spec, every later spec-sized buffer (the request, its files, their base64 for the store)
comes from the heap, and a heap fragmented by them is rarely returned: RSS stayed ~200 MiB
higher after ten such rollouts with nothing alive to show for it. Fixing the threshold keeps
large buffers in their own mappings, unmapped when freed.
"""

from __future__ import annotations

import ctypes
import logging
import platform

__all__ = ["return_large_frees_to_the_os"]

log = logging.getLogger(__name__)

_M_MMAP_THRESHOLD = -3
"""mallopt's parameter number for the mmap threshold (glibc's malloc.h)."""
_MMAP_THRESHOLD_BYTES = 128 * 1024
"""glibc's own starting value, now kept fixed."""


def return_large_frees_to_the_os() -> None:
    """Fix glibc's mmap threshold for this process (nothing to do on another libc)."""
    if platform.libc_ver()[0] != "glibc":
        return
    mallopt = ctypes.CDLL(None).mallopt
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    if mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_BYTES) != 1:
        log.warning("could not fix malloc's mmap threshold; freed specs may stay resident")
