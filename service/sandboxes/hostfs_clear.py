"""Host-side removal of whatever a sandbox left at a path, never following a link.

Before the service stages files the agent must not touch (tests) or reads a file the
agent must not write (the reward), it clears their paths: the agent may have put a
directory, a link, a read-only file or a file where a directory belongs. Each component
is opened relative to its parent's descriptor with O_NOFOLLOW; a non-directory on the
way is unlinked (a link, never its target) and ends the walk; at the end, a file or link
is unlinked and a directory removed with all it holds. The tree is removed without
recursion and with one descriptor open at a time, so no depth the sandbox can make
stops it; a directory it cannot enter or empty (mode 000) is given back to its owner
first (an unprivileged server shares the sandbox's uid).

Callers make sure nothing in the sandbox runs meanwhile (`Sandbox.reclaim`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Sequence
from pathlib import Path

__all__ = ["clear_beneath", "make_dirs_beneath"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_PATH_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
_DENIED = frozenset({errno.EACCES, errno.EPERM})


def clear_beneath(root: Path, parts: Sequence[str]) -> bool:
    """Remove whatever is at root/parts, and any non-directory on the way to it.

    Returns whether anything was removed.
    """
    fd = os.open(root, _DIR_FLAGS)
    try:
        for index, name in enumerate(parts):
            kind = _kind(fd, name)
            if kind is None:
                return False
            if index == len(parts) - 1 or not stat.S_ISDIR(kind):
                _remove(fd, name, kind)
                return True
            child = _open_dir(fd, name)
            os.close(fd)
            fd = child
        return False
    finally:
        os.close(fd)


def make_dirs_beneath(root: Path, parts: Sequence[str], owner: int | None) -> None:
    """Create the directory root/parts and those on the way, owned by `owner` (uid and
    gid) when given; they must be absent or directories already."""
    fd = os.open(root, _DIR_FLAGS)
    try:
        for name in parts:
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o755, dir_fd=fd)
                if owner is not None:
                    os.chown(name, owner, owner, dir_fd=fd, follow_symlinks=False)
            child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
    finally:
        os.close(fd)


def _kind(parent: int, name: str) -> int | None:
    """The file type bits of `name` (a link's own), or None when it is absent."""
    try:
        return os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return None


def _remove(parent: int, name: str, kind: int) -> None:
    if not stat.S_ISDIR(kind):
        _unlink(parent, name)
        return
    _remove_tree(parent, name)


def _unlink(parent: int, name: str, *, directory: bool = False) -> None:
    try:
        os.unlink(name, dir_fd=parent) if not directory else os.rmdir(name, dir_fd=parent)
    except OSError as exc:
        if exc.errno not in _DENIED:
            raise
        _give_back(parent, ".")  # `parent` may not be writable: it is going anyway
        os.unlink(name, dir_fd=parent) if not directory else os.rmdir(name, dir_fd=parent)


def _remove_tree(parent: int, name: str) -> None:
    """Empty and remove the directory `name`, depth first, holding one descriptor."""
    fd = _open_dir(parent, name)
    path: list[str] = []
    try:
        while True:
            subdirectory = _empty_but_subdirectories(fd)
            if subdirectory is not None:
                child = _open_dir(fd, subdirectory)
                path.append(subdirectory)
                os.close(fd)
                fd = child
            elif path:
                up = os.open("..", _DIR_FLAGS, dir_fd=fd)  # nothing runs: ".." is the parent
                os.close(fd)
                fd = up
                _unlink(fd, path.pop(), directory=True)
            else:
                break
    finally:
        os.close(fd)
    _unlink(parent, name, directory=True)


def _empty_but_subdirectories(fd: int) -> str | None:
    """Unlink every non-directory in the directory open at `fd`; one subdirectory's name,
    or None when none is left."""
    subdirectory = None
    with os.scandir(fd) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                subdirectory = subdirectory or entry.name
            else:
                _unlink(fd, entry.name)
    return subdirectory


def _open_dir(parent: int, name: str) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except OSError as exc:
        if exc.errno not in _DENIED:
            raise
    _give_back(parent, name)
    return os.open(name, _DIR_FLAGS, dir_fd=parent)


def _give_back(parent: int, name: str) -> None:
    """chmod 0700 the directory `name` itself, reached without following a link."""
    fd = os.open(name, _PATH_FLAGS | os.O_DIRECTORY, dir_fd=parent)
    try:
        os.chmod(f"/proc/self/fd/{fd}", 0o700)
    finally:
        os.close(fd)
