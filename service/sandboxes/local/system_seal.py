"""What the agent changed of an image sandbox's system trees, read from its overlay.

Every write to an image sandbox's root lands in its overlay's upper layer on its own
disk (`overlay_start`): a changed file is copied up, a removed one leaves a whiteout (a
0:0 character device), a directory removed and made again is marked opaque. So the
upper layer, read from the host once every command is dead, says exactly what changed:

    seal      at the end of setup: every entry of the upper layer under the system
              trees (`seal.SYSTEM_TREES`), the Python user sites of the sandbox's homes
              and the root's top-level files, by inode and change time (ctime, which no
              command can set back), and /etc/ld.so.cache's bytes
    diff      after the agent: the same read again; an entry added, gone, or with
              another inode or ctime is a change. What was there before is the sealed
              entry, else the lower layers' (the group's snapshot, then the image's)

Nothing here follows a link or reads a file but the loader's cache; the walk stops at
`_MAX_ENTRIES` (the diff then says it is incomplete). Standard library only.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from service.sandboxes.seal import SYSTEM_TREES, EntryKind, PathState, SystemChange, SystemDiff

__all__ = ["SealedSystem", "is_opaque", "read_upper"]

_MAX_ENTRIES = 500_000
_USER_SITES = ("home/user/.local/lib", "root/.local/lib")
"""Python's user site directories (~/.local/lib/pythonX.Y/site-packages) of the homes
a verifier may run with: a start-up hook there runs in every Python it starts."""
_LD_CACHE = "etc/ld.so.cache"
_LD_CACHE_MAX_BYTES = 16 << 20
_OPAQUE = ("trusted.overlay.opaque", "user.overlay.opaque")
"""Where overlay marks an opaque directory: a root server's, an unprivileged one's
(`overlay_start`, userxattr)."""


@dataclass(frozen=True)
class _Entry:
    ino: int
    ctime_ns: int
    mode: int
    rdev: int
    opaque: bool

    @property
    def whiteout(self) -> bool:
        return stat.S_ISCHR(self.mode) and self.rdev == 0

    def state(self) -> PathState | None:
        if self.whiteout:
            return None
        return _state(self.mode, self.opaque)


def _state(mode: int, opaque: bool = False) -> PathState:
    if stat.S_ISREG(mode):
        return PathState(EntryKind.FILE, executable=bool(mode & 0o111))
    if stat.S_ISLNK(mode):
        return PathState(EntryKind.LINK)
    if stat.S_ISDIR(mode):
        return PathState(EntryKind.EMPTIED_DIR if opaque else EntryKind.DIR)
    return PathState(EntryKind.OTHER)


def read_upper(upper: Path, exempt: Sequence[str]) -> tuple[dict[str, _Entry], bool]:
    """The upper layer's entries under what a seal covers, by sandbox path; False when
    the walk stopped at its bound."""
    entries: dict[str, _Entry] = {}
    skip = {path.rstrip("/") for path in exempt if path.rstrip("/")}
    with os.scandir(upper) as top:
        for item in top:
            if not item.is_dir(follow_symlinks=False):
                entries[f"/{item.name}"] = _entry(item.path)
    for tree in (*(t.lstrip("/") for t in SYSTEM_TREES), *_USER_SITES):
        if not _walk(upper, tree, skip, entries):
            return entries, False
    return entries, True


def _walk(upper: Path, relative: str, skip: set[str], entries: dict[str, _Entry]) -> bool:
    pending = [relative]
    while pending:
        current = pending.pop()
        sandbox_path = f"/{current}"
        if sandbox_path in skip:
            continue
        try:
            entry = _entry(str(upper / current))
        except FileNotFoundError:
            continue
        entries[sandbox_path] = entry
        if len(entries) > _MAX_ENTRIES:
            return False
        if stat.S_ISDIR(entry.mode):
            with os.scandir(upper / current) as listing:
                pending.extend(f"{current}/{item.name}" for item in listing)
    return True


def _entry(path: str) -> _Entry:
    found = os.lstat(path)
    opaque = stat.S_ISDIR(found.st_mode) and is_opaque(path)
    return _Entry(found.st_ino, found.st_ctime_ns, found.st_mode, found.st_rdev, opaque)


def is_opaque(path: str | Path) -> bool:
    """Whether the directory at `path` of an upper layer hides the lower layers' (never
    following a link)."""
    for name in _OPAQUE:
        try:
            if os.getxattr(path, name, follow_symlinks=False) == b"y":
                return True
        except OSError as exc:
            if exc.errno not in (errno.ENODATA, errno.ENOTSUP):
                raise
    return False


class SealedSystem:
    """An image sandbox's system trees as setup left them (`seal`), and their diff."""

    def __init__(
        self, upper: Path, lowers: Sequence[Path], exempt: Sequence[str], default_path: str
    ) -> None:
        self._upper = upper
        self._lowers = tuple(lowers)
        """Top first: a group's snapshot layer, then the image's rootfs."""
        self._exempt = tuple(exempt)
        self._default_path = default_path
        self._sealed, _ = read_upper(upper, exempt)
        self._ld_cache = self._read_ld_cache()

    def diff(self, path: str | None) -> SystemDiff:
        now, complete = read_upper(self._upper, self._exempt)
        if not complete:
            return SystemDiff((), complete=False)
        changes = []
        for sandbox_path in sorted(self._sealed.keys() | now.keys()):
            sealed, current = self._sealed.get(sandbox_path), now.get(sandbox_path)
            if sealed == current:
                continue
            before = self._before(sandbox_path)
            after = current.state() if current is not None else self._lower(sandbox_path)
            if _unchanged_directory(before, after):
                continue
            shadows = self._shadowed(sandbox_path, path) if before is None and after else ""
            changes.append(SystemChange(sandbox_path, before, after, shadows))
        cache = self._read_ld_cache()
        ld_cache = None if cache == self._ld_cache else (self._ld_cache, cache)
        return SystemDiff(tuple(changes), ld_cache)

    def _before(self, sandbox_path: str) -> PathState | None:
        sealed = self._sealed.get(sandbox_path)
        return sealed.state() if sealed is not None else self._lower(sandbox_path)

    def _lower(self, sandbox_path: str) -> PathState | None:
        for lower in self._lowers:
            found = _lstat_beneath(lower, sandbox_path)
            if found is not None:
                entry = _Entry(found.st_ino, 0, found.st_mode, found.st_rdev, False)
                return entry.state()
        return None

    def _shadowed(self, sandbox_path: str, path: str | None) -> str:
        directory, name = sandbox_path.rsplit("/", 1)
        dirs = [d.rstrip("/") or "/" for d in (path or self._default_path).split(":") if d]
        if directory not in dirs:
            return ""
        for later in dirs[dirs.index(directory) + 1 :]:
            candidate = f"{later.rstrip('/')}/{name}"
            if self._before(candidate) is not None:
                return candidate
        return ""

    def _read_ld_cache(self) -> bytes:
        for layer in (self._upper, *self._lowers):
            target = layer / _LD_CACHE
            found = _lstat_beneath(layer, f"/{_LD_CACHE}")
            if found is None:
                continue
            if not stat.S_ISREG(found.st_mode):  # a whiteout or a link: no cache
                return b""
            with open(target, "rb") as cache:
                return cache.read(_LD_CACHE_MAX_BYTES)
        return b""


def _unchanged_directory(before: PathState | None, after: PathState | None) -> bool:
    """A directory that is still one: what changed is below it, and listed there."""
    return (
        before is not None
        and after is not None
        and before.kind is EntryKind.DIR
        and after.kind is EntryKind.DIR
    )


def _lstat_beneath(root: Path, sandbox_path: str) -> os.stat_result | None:
    """lstat of `sandbox_path` inside `root`, never through a link: None where a
    component is missing or is not a directory."""
    parts = [part for part in sandbox_path.split("/") if part]
    current = root
    for index, part in enumerate(parts):
        current = current / part
        try:
            found = os.lstat(current)
        except (FileNotFoundError, NotADirectoryError):
            return None
        if index < len(parts) - 1 and not stat.S_ISDIR(found.st_mode):
            return None
    return found if parts else None
