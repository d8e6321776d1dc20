"""Mount points and lazy unmounts, for the sandboxes' own filesystems (`disk`).

Standard library only: the fork server's spawners use it too (`holder_start`).
"""

from __future__ import annotations

import ctypes
import os

__all__ = ["DISK_POOL", "SANDBOX_DISK", "detach", "mount_points_below", "sandbox_disks"]

SANDBOX_DISK = "disk"
"""A sandbox's disk is mounted at `<state_dir>/sandboxes/<name>/disk` (`bwrap.SandboxLayout`)."""
DISK_POOL = "disk-pool"
"""A ready disk waits at `<state_dir>/disk-pool/<random>/disk` (`disk_pool`)."""

_MNT_DETACH = 2
_libc = ctypes.CDLL(None, use_errno=True)


def _unescape(field: str) -> str:
    """A mountinfo path: space, tab, newline and backslash come octal-escaped."""
    for escaped, raw in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(escaped, raw)
    return field


def _mount_points() -> set[str]:
    try:
        with open("/proc/self/mountinfo") as mountinfo:
            return {_unescape(line.split()[4]) for line in mountinfo}
    except OSError:
        return set()


def mount_points_below(path: str) -> list[str]:
    """Mount points at or below `path` in this process's mount namespace, deepest first."""
    inside = path.rstrip("/") + "/"
    points = (p for p in _mount_points() if p == path or p.startswith(inside))
    return sorted(points, key=len, reverse=True)


def sandbox_disks() -> list[str]:
    """The mount points of every local sandbox's disk on this host, whichever server's,
    pooled ones too."""
    found = []
    for point in _mount_points():
        parts = point.split("/")
        if len(parts) > 3 and parts[-1] == SANDBOX_DISK and parts[-3] in {"sandboxes", DISK_POOL}:
            found.append(point)
    return found


def detach(point: str) -> str | None:
    """Unmount `point` lazily (it is freed once nothing holds it); why not, if it failed."""
    if _libc.umount2(os.fsencode(point), _MNT_DETACH) != 0:
        return os.strerror(ctypes.get_errno())
    return None
