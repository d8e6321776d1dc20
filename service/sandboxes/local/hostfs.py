"""Host-side file access beneath a sandbox's directories that never follows a symlink.

A sandboxed command owns everything under its home and /tmp: it can plant
`workdir/x -> /etc/shadow`, or swap a directory for a link into the state dir. So each
path component is opened relative to its parent's descriptor with O_NOFOLLOW, and a
link is never followed: reading through one reads as absent; writing replaces the link
itself (never its target), so files staged after the agent still land inside; a listing
neither names nor enters one.
"""

from __future__ import annotations

import contextlib
import errno
import os
import posixpath
import stat
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

from service.sandboxes.base import LIST_MAX_DEPTH, FileEntry

__all__ = [
    "LIST_SCAN_SLACK",
    "ROOT_FLAGS",
    "list_beneath",
    "read_beneath",
    "split_sandbox_path",
    "write_beneath",
]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
ROOT_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
"""For the root a walk starts from: the service's own path, which may be a link it made
(an image sandbox's root is /proc/self/fd/N); only what lies beneath is the agent's."""
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_ABSENT = frozenset({errno.ENOENT, errno.ENOTDIR, errno.ELOOP})
_UNLISTED = _ABSENT | {errno.EACCES, errno.EPERM}
"""A listing skips what vanished, was swapped for a link or a file, or cannot be read."""
_REPLACE_ATTEMPTS = 3
_CHUNK = 1024 * 1024


def split_sandbox_path(path: str, roots: Mapping[str, Path]) -> tuple[Path, tuple[str, ...]]:
    """Map an absolute sandbox path to (host directory, components beneath it).

    `roots` maps sandbox directories (e.g. "/tmp", or "" for the whole of an image
    sandbox) to the host directories behind them; any other path raises ValueError.
    """
    if not path.startswith("/") or "\0" in path:
        raise ValueError(f"sandbox path {path!r} must be absolute")
    normal = posixpath.normpath(path)
    for prefix, host in roots.items():
        if normal.startswith(prefix + "/"):
            return host, tuple(normal[len(prefix) + 1 :].split("/"))
    raise ValueError(f"sandbox path {path!r} is not under {' or '.join(roots)}")


def _enter(parent: int, name: str, *, create: bool, owner: int | None) -> int:
    """Open directory `name` in `parent`; when creating, make it or replace a link there."""
    for _ in range(_REPLACE_ATTEMPTS):
        try:
            return os.open(name, _DIR_FLAGS, dir_fd=parent)
        except OSError as exc:
            if not create or exc.errno not in _ABSENT:
                raise
            if exc.errno != errno.ENOENT and not _is_link(parent, name):
                raise  # a file of the sandbox's own where a directory should be
            _unlink(parent, name)
        try:
            os.mkdir(name, 0o755, dir_fd=parent)
        except FileExistsError:
            continue  # raced with the sandbox: look again
        child = os.open(name, _DIR_FLAGS, dir_fd=parent)
        if owner is not None:
            os.fchown(child, owner, owner)
        return child
    raise OSError(errno.ELOOP, f"{name!r} keeps changing under us")


def _is_link(parent: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return False


def _unlink(parent: int, name: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name, dir_fd=parent)


def _walk(root: Path, parts: Sequence[str], *, create: bool, owner: int | None) -> int:
    """Descriptor of the directory holding parts[-1]; the caller closes it."""
    fd = os.open(root, ROOT_FLAGS)
    try:
        for name in parts[:-1]:
            child = _enter(fd, name, create=create, owner=owner)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_for_write(parent: int, name: str) -> int:
    for _ in range(_REPLACE_ATTEMPTS):
        try:
            return os.open(name, _WRITE_FLAGS, 0o644, dir_fd=parent)
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            _unlink(parent, name)
    raise OSError(errno.ELOOP, f"{name!r} keeps changing under us")


def write_beneath(root: Path, parts: Sequence[str], data: bytes, owner: int | None) -> None:
    """Write `data` at root/parts, creating directories (owned by `owner`) on the way."""
    parent = _walk(root, parts, create=True, owner=owner)
    try:
        fd = _open_for_write(parent, parts[-1])
    finally:
        os.close(parent)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, f"{parts[-1]!r} is not a regular file")
        os.ftruncate(fd, 0)
        if owner is not None:
            os.fchown(fd, owner, owner)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def read_beneath(root: Path, parts: Sequence[str], max_bytes: int) -> bytes | None:
    """Up to max_bytes of the regular file at root/parts; None if absent or not a file."""
    try:
        parent = _walk(root, parts, create=False, owner=None)
        try:
            fd = os.open(parts[-1], _READ_FLAGS, dir_fd=parent)
        finally:
            os.close(parent)
    except OSError as exc:
        if exc.errno in _ABSENT:
            return None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks: list[bytes] = []
        remaining = max_bytes
        while remaining > 0 and (chunk := os.read(fd, min(remaining, _CHUNK))):
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


LIST_SCAN_SLACK = 100_000
"""Directory entries `list_beneath` may read beyond the ones it lists."""


def list_beneath(
    root: Path, parts: Sequence[str], max_entries: int, exclude: Collection[str] = ()
) -> list[FileEntry]:
    """Regular files beneath the directory root/parts, as `Sandbox.list_files` lists them
    (`exclude`: its subdirectories never entered, relative paths).

    Each directory is read whole and sorted with a subdirectory's name taken as "name/",
    so a depth-first walk meets files in byte order of their paths and may stop after
    `max_entries`. It reads at most max_entries + LIST_SCAN_SLACK directory entries: the
    directory that would take it past them ends the walk, none of its files listed, so a
    workdir of a million files costs bounded time and memory and the listing is still a
    prefix of the sorted whole. Every directory is opened with O_NOFOLLOW below its
    parent's descriptor and every type taken without following, so a link swapped in
    mid-walk is skipped; so is what vanishes or cannot be read.
    """
    if max_entries <= 0:
        return []
    try:
        top = _walk(root, (*parts, "."), create=False, owner=None)  # root/parts itself
    except OSError as exc:
        if exc.errno in _ABSENT:
            return []
        raise
    walk = _Listing(max_entries, frozenset(path.strip("/") for path in exclude))
    try:
        walk.directory(top, "", depth=1)
    finally:
        os.close(top)
    return walk.found


class _Listing:
    """One walk of `list_beneath`: the files found, the entries it may still read."""

    def __init__(self, max_entries: int, exclude: frozenset[str]) -> None:
        self.found: list[FileEntry] = []
        self._max_entries = max_entries
        self._budget = max_entries + LIST_SCAN_SLACK
        self._exclude = exclude

    def directory(self, fd: int, prefix: str, *, depth: int) -> bool:
        """List the directory open at `fd`, whose files' paths have `depth` components;
        False once the walk is over."""
        names = self._read(fd)
        if names is None:
            return False
        for name, is_dir in names:
            if len(self.found) >= self._max_entries:
                return False
            if not is_dir:
                self._add(fd, name, prefix)
            elif depth >= LIST_MAX_DEPTH or f"{prefix}{name}" in self._exclude:
                continue  # never entered: what it holds spends no budget
            elif not self._descend(fd, name, prefix, depth):
                return False
        return True

    def _read(self, fd: int) -> list[tuple[str, bool]] | None:
        """(name, is a directory) of its files and subdirectories in walk order; None when
        reading them all would spend more than the budget."""
        names: list[tuple[str, bool]] = []
        with os.scandir(fd) as entries:
            for entry in entries:
                self._budget -= 1
                if self._budget < 0:
                    return None
                if not _is_utf8(entry.name):
                    continue
                if entry.is_dir(follow_symlinks=False):
                    names.append((entry.name, True))
                elif entry.is_file(follow_symlinks=False):
                    names.append((entry.name, False))
        names.sort(key=_walk_order)
        return names

    def _descend(self, parent: int, name: str, prefix: str, depth: int) -> bool:
        try:
            child = os.open(name, _DIR_FLAGS, dir_fd=parent)
        except OSError as exc:
            if exc.errno in _UNLISTED:
                return True
            raise
        try:
            return self.directory(child, f"{prefix}{name}/", depth=depth + 1)
        finally:
            os.close(child)

    def _add(self, parent: int, name: str, prefix: str) -> None:
        try:
            info = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except OSError as exc:
            if exc.errno in _UNLISTED:
                return
            raise
        if stat.S_ISREG(info.st_mode):
            self.found.append(FileEntry(prefix + name, info.st_size))


def _walk_order(item: tuple[str, bool]) -> str:
    # Code point order is UTF-8 byte order; "name/" places a directory's files where a
    # sort of whole paths puts them (after "name.txt", before "name0").
    name, is_dir = item
    return f"{name}/" if is_dir else name


def _is_utf8(name: str) -> bool:
    """False for a name os.fsdecode had to escape (bytes that are not UTF-8)."""
    try:
        name.encode()
    except UnicodeEncodeError:
        return False
    return True
