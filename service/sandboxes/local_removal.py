"""Removing a local sandbox's host directory, whatever its agent left there.

An agent can leave a tree of any depth (`mkdir d && cd d`, 1,500 times, is past
`shutil.rmtree`'s recursion limit), directories without write or search permission,
names that are not UTF-8, and links into the host. So the walk here is a loop, not a
recursion; every step is relative to an open directory (no long paths) and never
follows a link; a directory it cannot enter or empty is given owner permissions first;
at most `_MAX_OPEN` directories are open at once: a deeper one is moved up to the top
directory and emptied from there. A filesystem mounted below (the sandbox's disk) is
detached first. What still will not go is logged, never raised: teardown and the
start-up sweep must go on.
"""

from __future__ import annotations

import collections
import functools
import logging
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from service.sandboxes.local_disk import detach_mounts_below

__all__ = ["remove_tree"]

_log = logging.getLogger(__name__)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_MAX_OPEN = 64
_OWNER_ONLY = 0o700
_REPORTED = 5
"""Failures named in the log line (the count says how many more)."""


def remove_tree(path: Path) -> None:
    """Remove `path` and everything beneath it; log (never raise) what would not go."""
    removal = _Removal(path)
    removal.failures += detach_mounts_below(path)  # the sandbox's disk (`local_disk`)
    try:
        removal.run()
    except FileNotFoundError:
        return
    except OSError as exc:
        removal.failures.append(f"{path}: {exc.strerror or exc}")
    if removal.failures:
        shown = "; ".join(removal.failures[:_REPORTED])
        more = len(removal.failures) - _REPORTED
        _log.warning(
            "could not remove all of sandbox directory %s: %s%s",
            path,
            shown,
            f" (and {more} more)" if more > 0 else "",
        )


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
    """One removal: a stack of open directories, deepest last."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.failures: list[str] = []
        self.stack: list[_Frame] = []

    def run(self) -> None:
        top = os.open(self.path, _DIR_FLAGS)
        self.stack.append(self._emptied(_Frame(top, str(self.path))))
        try:
            while self.stack:
                self._step()
        finally:
            for frame in self.stack:
                os.close(frame.fd)

    def _step(self) -> None:
        """Enter the deepest directory's next subdirectory, or remove it once empty."""
        frame = self.stack[-1]
        if frame.subdirectories:
            self._enter(frame, frame.subdirectories.popleft())
            return
        self.stack.pop()
        os.close(frame.fd)
        if not self.stack:
            self._try(frame.name, functools.partial(os.rmdir, self.path))
            return
        parent = self.stack[-1].fd
        rmdir = functools.partial(os.rmdir, frame.name, dir_fd=parent)
        self._try(frame.name, functools.partial(_as_owner, parent, rmdir))

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
            self.stack.append(self._emptied(_Frame(fd, name)))

    def _open(self, parent: int, name: str) -> int | None:
        """The subdirectory `name`, opened without following a link; None if it cannot be."""
        try:
            try:
                return os.open(name, _DIR_FLAGS, dir_fd=parent)
            except PermissionError:
                os.chmod(name, _OWNER_ONLY, dir_fd=parent)
                return os.open(name, _DIR_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            return None
        except OSError as exc:
            self.failures.append(f"{name}: {exc.strerror or exc}")
            return None

    def _emptied(self, frame: _Frame) -> _Frame:
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
        return frame

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
