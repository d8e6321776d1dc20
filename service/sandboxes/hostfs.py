"""Host-side file access beneath a sandbox's directories that never follows a symlink.

A sandboxed command owns everything under its home and /tmp: it can plant
`workdir/x -> /etc/shadow`, or swap a directory for a link into the state dir. So each
path component is opened relative to its parent's descriptor with O_NOFOLLOW, and a
link is never followed: reading through one reads as absent; writing replaces the link
itself (never its target), so files staged after the agent still land inside.
"""

from __future__ import annotations

import contextlib
import errno
import os
import posixpath
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["read_beneath", "split_sandbox_path", "write_beneath"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_ABSENT = frozenset({errno.ENOENT, errno.ENOTDIR, errno.ELOOP})
_REPLACE_ATTEMPTS = 3
_CHUNK = 1024 * 1024


def split_sandbox_path(path: str, roots: Mapping[str, Path]) -> tuple[Path, tuple[str, ...]]:
    """Map an absolute sandbox path to (host directory, components beneath it).

    `roots` maps sandbox directories (e.g. "/tmp") to the host directories behind them;
    any other path raises ValueError.
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
    fd = os.open(root, _DIR_FLAGS)
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
