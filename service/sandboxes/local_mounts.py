"""Mount points and lazy unmounts, for the sandboxes' own filesystems (`local_disk`).

Standard library only: the fork server's spawners use it too (`local_holder_start`).
"""

from __future__ import annotations

import ctypes
import os

__all__ = ["detach", "mount_points_below"]

_MNT_DETACH = 2
_libc = ctypes.CDLL(None, use_errno=True)


def _unescape(field: str) -> str:
    """A mountinfo path: space, tab, newline and backslash come octal-escaped."""
    for escaped, raw in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(escaped, raw)
    return field


def mount_points_below(path: str) -> list[str]:
    """Mount points at or below `path` in this process's mount namespace, deepest first."""
    try:
        with open("/proc/self/mountinfo") as mountinfo:
            points = {_unescape(line.split()[4]) for line in mountinfo}
    except OSError:
        return []
    inside = path.rstrip("/") + "/"
    return sorted((p for p in points if p == path or p.startswith(inside)), key=len, reverse=True)


def detach(point: str) -> str | None:
    """Unmount `point` lazily (it is freed once nothing holds it); why not, if it failed."""
    if _libc.umount2(os.fsencode(point), _MNT_DETACH) != 0:
        return os.strerror(ctypes.get_errno())
    return None
