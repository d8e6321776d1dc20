"""cgroup v1 memory groups for local sandboxes, where the host lets us make them.

Each sandbox gets `<the server's own memory cgroup>/rollout-<key>/<rollout_id>`, nested
under the server's group, so whatever limit the host puts on the server still covers
its sandboxes, and `key` (one per state dir) keeps two services on a host apart. Where
/sys/fs/cgroup/memory is missing or read-only, every method is a cheap no-op.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import signal
from pathlib import Path

__all__ = ["MemoryCgroups"]

_log = logging.getLogger(__name__)
_MOUNT = Path("/sys/fs/cgroup/memory")
_REMOVE_ATTEMPTS = 100
_REMOVE_PAUSE_S = 0.02


def _own_group() -> Path | None:
    """The memory cgroup this process is in, if that hierarchy is mounted and writable."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            group = _MOUNT / path.lstrip("/")
            group = group if group.is_dir() else _MOUNT
            writable = os.access(group, os.W_OK)
            return group if writable and (group / "memory.limit_in_bytes").exists() else None
    return None


def _read_pids(group: Path) -> list[int]:
    try:
        return [int(pid) for pid in (group / "cgroup.procs").read_text().split()]
    except FileNotFoundError:
        return []


class MemoryCgroups:
    """The per-sandbox memory cgroups of one backend."""

    def __init__(self, key: str) -> None:
        own = _own_group()
        self._base = own / f"rollout-{key}" if own is not None else None

    @property
    def enabled(self) -> bool:
        return self._base is not None

    def create(self, name: str, limit_bytes: int) -> Path | None:
        """Make (or reuse) the group `name` with this memory limit; None when unavailable."""
        if self._base is None:
            return None
        group = self._base / name
        try:
            group.mkdir(parents=True, exist_ok=True)
            self.limit(group, limit_bytes)
        except OSError as exc:
            _log.warning("memory cgroups disabled: cannot create %s: %s", group, exc)
            self._base = None
            return None
        return group

    @staticmethod
    def limit(group: Path, limit_bytes: int) -> None:
        """Set the group's memory limit (and memory+swap, where swap is accounted).

        memory+swap may never be below memory: raised first, lowered after.
        """
        swap = group / "memory.memsw.limit_in_bytes"
        with contextlib.suppress(OSError):  # lowering it fails here, and succeeds below
            swap.write_text(str(limit_bytes))
        (group / "memory.limit_in_bytes").write_text(str(limit_bytes))
        with contextlib.suppress(OSError):  # no swap accounting: the memory limit still holds
            swap.write_text(str(limit_bytes))

    def rename(self, group: Path, name: str) -> Path:
        """Give the group another name (cgroup v1 renames in place; processes stay in it)."""
        renamed = group.with_name(name)
        group.rename(renamed)
        return renamed

    def names(self) -> list[str]:
        """Names of every group this backend's key holds (live or left by a crash)."""
        if self._base is None or not self._base.is_dir():
            return []
        return [entry.name for entry in self._base.iterdir() if entry.is_dir()]

    def path(self, name: str) -> Path | None:
        return None if self._base is None else self._base / name

    def prune(self) -> None:
        """Remove this backend's (empty) parent group; one left busy stays for later."""
        if self._base is not None:
            with contextlib.suppress(OSError):  # still in use, or gone already
                self._base.rmdir()

    async def remove(self, group: Path) -> bool:
        """Kill every process in `group`, then remove it; False if it would not go."""
        for _ in range(_REMOVE_ATTEMPTS):
            removed = _kill_and_remove(group)
            if removed is not None:
                return removed
            await asyncio.sleep(_REMOVE_PAUSE_S)  # killed processes take a moment to exit
        _log.warning("cgroup %s still busy; left for the next sweep", group)
        return False


def _kill_and_remove(group: Path) -> bool | None:
    """One attempt: True when gone, False on a lasting error, None while still busy."""
    for pid in _read_pids(group):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    try:
        group.rmdir()
    except FileNotFoundError:
        return True
    except OSError as exc:
        if exc.errno == errno.EBUSY:
            return None
        _log.warning("cannot remove cgroup %s: %s", group, exc)
        return False
    return True
