"""Removing what a local sandbox's agent left on the host, never following a link.

Two callers: teardown and the start-up sweep remove a sandbox's host directory
(`remove_tree`: a filesystem mounted below, the sandbox's disk, is detached first; what
will not go is logged, never raised, for they must go on), and `hostfs_clear` removes
one entry beneath an open directory (`remove_entry`: what will not go is returned, and
the verifier fails with it).

An agent can leave a tree of any depth (`mkdir d && cd d`, 1,500 times, is past
`shutil.rmtree`'s recursion limit), directories without write or search permission,
names that are not UTF-8, and links into the host. So the walk here is a loop, not a
recursion; every step is relative to an open directory (no long paths) and never
follows a link; a directory it cannot enter or empty is given owner permissions first
(an unprivileged server shares the sandbox's uid); at most `_MAX_OPEN` directories are
open at once: a deeper one is moved up to the top directory and emptied from there.
"""

from __future__ import annotations

import collections
import functools
import logging
import os
import stat
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from service.errors import first_of
from service.sandboxes.local.disk import detach_mounts_below

__all__ = ["open_directory", "remove_entry", "remove_tree", "summary"]

_log = logging.getLogger(__name__)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_PATH_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
_MAX_OPEN = 64
_OWNER_ONLY = 0o700
_REPORTED = 5
"""Failures named in a summary (the count says how many more)."""


def remove_tree(path: Path) -> None:
    """Remove `path` and everything beneath it; log (never raise) what would not go."""
    failures = detach_mounts_below(path)  # the sandbox's disk (`disk`)
    try:
        failures += _Removal(None, str(path)).run()
    except FileNotFoundError:
        return
    except OSError as exc:
        failures.append(f"{path}: {exc.strerror or exc}")
    if failures:
        _log.warning("could not remove all of sandbox directory %s: %s", path, summary(failures))


def summary(failures: list[str]) -> str:
    """The first few failures, and how many more there are."""
    return first_of(failures, _REPORTED, "; ")


def remove_entry(parent: int, name: str) -> list[str]:
    """Remove `name` in the directory open at `parent`: a file or link (never its
    target) is unlinked, a directory removed with everything beneath it. Returns what
    would not go, each with why; [] when all went (or nothing was there)."""
    try:
        mode = os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode
        if stat.S_ISDIR(mode):
            return _Removal(parent, name).run()
        _as_owner(parent, functools.partial(os.unlink, name, dir_fd=parent))
    except FileNotFoundError:
        pass
    except OSError as exc:
        return [f"{name}: {exc.strerror or exc}"]
    return []


def open_directory(parent: int | None, name: str) -> int:
    """The directory `name` (relative to `parent`, or a path when None), opened without
    following a link; given owner permissions first if they are what it lacks."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except PermissionError:
        _give_back(parent, name)
        return os.open(name, _DIR_FLAGS, dir_fd=parent)


def _give_back(parent: int | None, name: str) -> None:
    """chmod 0700 the directory `name` itself, reached without following a link."""
    fd = os.open(name, _PATH_FLAGS | os.O_DIRECTORY, dir_fd=parent)
    try:
        os.chmod(f"/proc/self/fd/{fd}", _OWNER_ONLY)
    finally:
        os.close(fd)


def _as_owner(fd: int, action: Callable[[], object]) -> None:
    """`action`, once more after giving the directory at `fd` owner permissions if denied."""
    try:
        action()
    except PermissionError:
        os.fchmod(fd, _OWNER_ONLY)
        action()


@dataclass
class _Frame:
    """An open directory being emptied: its descriptor, its name in its parent, and the
    subdirectories still to empty (its other entries are gone once it is open)."""

    fd: int
    name: str
    subdirectories: collections.deque[str] = field(default_factory=collections.deque)


class _Removal:
    """One removal of the directory `name` in the directory open at `parent` (or at the
    path `name` when None): a stack of open directories, deepest last."""

    def __init__(self, parent: int | None, name: str) -> None:
        self.parent = parent
        self.name = name
        self.failures: list[str] = []
        self.stack: list[_Frame] = []

    def run(self) -> list[str]:
        """Remove it all; what would not go. Raises OSError if the top cannot be opened."""
        self.stack.append(_Frame(open_directory(self.parent, self.name), self.name))
        try:
            self._empty(self.stack[0])
            while self.stack:
                self._step()
        finally:
            for frame in self.stack:
                os.close(frame.fd)
        return self.failures

    def _step(self) -> None:
        """Enter the deepest directory's next subdirectory, or remove it once empty."""
        frame = self.stack[-1]
        if frame.subdirectories:
            self._enter(frame, frame.subdirectories.popleft())
            return
        self.stack.pop()
        os.close(frame.fd)
        parent = self.stack[-1].fd if self.stack else self.parent
        rmdir = functools.partial(os.rmdir, frame.name, dir_fd=parent)
        if parent is not None:  # a path's parent is the service's, never given permissions
            rmdir = functools.partial(_as_owner, parent, rmdir)
        self._try(frame.name, rmdir)

    def _enter(self, parent: _Frame, name: str) -> None:
        if len(self.stack) >= _MAX_OPEN:  # too deep: move it up to the top instead
            top = self.stack[0]
            hoisted = f".removing-{uuid.uuid4().hex}"
            move = functools.partial(
                os.rename, name, hoisted, src_dir_fd=parent.fd, dst_dir_fd=top.fd
            )
            if self._try(name, functools.partial(_as_owner, parent.fd, move)):
                top.subdirectories.append(hoisted)
            return
        fd = self._open(parent.fd, name)
        if fd is not None:
            self.stack.append(_Frame(fd, name))  # closed by `run` whatever happens next
            self._empty(self.stack[-1])

    def _open(self, parent: int, name: str) -> int | None:
        """The subdirectory `name`, opened; None (and the failure noted) if it cannot be."""
        try:
            return open_directory(parent, name)
        except FileNotFoundError:
            return None
        except OSError as exc:
            self.failures.append(f"{name}: {exc.strerror or exc}")
            return None

    def _empty(self, frame: _Frame) -> None:
        """Unlink every entry of the frame's directory but its subdirectories, which it
        lists."""
        with os.scandir(frame.fd) as scan:
            entries = [(entry.name, entry.is_dir(follow_symlinks=False)) for entry in scan]
        for name, is_directory in entries:
            if is_directory:
                frame.subdirectories.append(name)
            else:
                unlink = functools.partial(os.unlink, name, dir_fd=frame.fd)
                self._try(name, functools.partial(_as_owner, frame.fd, unlink))

    def _try(self, what: str, action: Callable[[], object]) -> bool:
        """Run `action`; False (and the failure noted) if it raised."""
        try:
            action()
        except FileNotFoundError:
            return True
        except OSError as exc:
            self.failures.append(f"{what}: {exc.strerror or exc}")
            return False
        return True
