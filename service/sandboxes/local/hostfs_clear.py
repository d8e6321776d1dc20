"""Host-side removal of whatever a sandbox left at a path, never following a link.

Before the service stages files the agent must not touch (tests) or reads a file the
agent must not write (the reward), it clears their paths: the agent may have put a
directory, a link, a read-only file or a file where a directory belongs. Each component
is opened relative to its parent's descriptor with O_NOFOLLOW; a non-directory on the
way is unlinked (a link, never its target) and ends the walk; at the end, a file or link
is unlinked and a directory removed with all it holds, by the walk teardown uses
(`local_removal.remove_entry`): no recursion and a bounded number of descriptors, so no
depth the sandbox can make stops it; a directory it cannot enter or empty (mode 000) is
given back to its owner first (an unprivileged server shares the sandbox's uid). What
will not go is raised (OSError), after the walk has removed all it could.

Callers make sure nothing in the sandbox runs meanwhile (`Sandbox.reclaim`).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Sequence
from pathlib import Path

from service.sandboxes.local.hostfs import ROOT_FLAGS
from service.sandboxes.local.removal import open_directory, remove_entry, summary

__all__ = ["clear_beneath", "make_dirs_beneath"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def clear_beneath(root: Path, parts: Sequence[str]) -> bool:
    """Remove whatever is at root/parts, and any non-directory on the way to it.

    Returns whether anything was removed.
    """
    fd = os.open(root, ROOT_FLAGS)
    try:
        for index, name in enumerate(parts):
            kind = _kind(fd, name)
            if kind is None:
                return False
            if index == len(parts) - 1 or not stat.S_ISDIR(kind):
                _remove(fd, name)
                return True
            child = open_directory(fd, name)
            os.close(fd)
            fd = child
        return False
    finally:
        os.close(fd)


def make_dirs_beneath(root: Path, parts: Sequence[str], owner: int | None) -> None:
    """Create the directory root/parts and those on the way, owned by `owner` (uid and
    gid) when given; they must be absent or directories already."""
    fd = os.open(root, ROOT_FLAGS)
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


def _remove(parent: int, name: str) -> None:
    """Remove `name` and all beneath it (`removal`); raise if any of it stays."""
    failures = remove_entry(parent, name)
    if failures:
        raise OSError(f"{name} would not go: {summary(failures)}")
