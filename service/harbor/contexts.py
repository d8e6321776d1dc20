"""Harbor tasks' build contexts on disk (`<state_dir>/harbor/<digest>/environment`), kept
within a time and a byte budget.

A context is written at admission and read at sandbox creation (its build key, an E2B
template's rebuild). Its directory's mtime is its last use, set at both. A context is in use
while the task that admitted it runs (from its digest to the end of the admitting call) or
while a live rollout or group of this server names its digest (`add_users`); a sweep never
removes one in use. A sweep removes the unused contexts last used over `ttl_s` ago, then, while
the total is over `max_bytes`, the least recently used unused ones. It runs when an admission
writes a new context, and at an admission at most every _SWEEP_EVERY_S otherwise.

A context is chosen and renamed aside in one step of the event loop (no await between), the
same loop where admission takes its hold before it looks for the context, so a removal never
races a reader: an admission after the rename finds no context and writes it again (the
digest names the same content).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from service.harbor.source import TaskTree

__all__ = ["BuildContexts"]

log = logging.getLogger(__name__)

_SWEEP_EVERY_S = 60.0
"""Least time between two sweeps that no new context asks for."""

_SET_ASIDE = ".removed"
"""The suffix of a context set aside to be removed (left behind only by a crash)."""

Users = Callable[[], Iterable[str]]
"""The digests live rollouts or groups name."""


@dataclass(frozen=True)
class _Found:
    digest: str
    last_use: float
    size: int


class BuildContexts:
    """The build contexts of one server's Harbor tasks, under `root`."""

    def __init__(self, root: Path, *, ttl_s: float, max_bytes: int) -> None:
        self._root, self._ttl_s, self._max_bytes = root, ttl_s, max_bytes
        self._holds: Counter[str] = Counter()
        self._users: list[Users] = []
        self._sizes: dict[str, int] = {}
        """Bytes on disk of each context seen (a digest's content never changes)."""
        self._last_sweep = float("-inf")
        self._sweeping = asyncio.Lock()

    def path(self, digest: str) -> Path:
        return self._root / digest / "environment"

    def add_users(self, users: Users) -> None:
        """Count the digests `users` returns as in use at every sweep."""
        self._users.append(users)

    @contextlib.contextmanager
    def hold(self, digest: str) -> Iterator[None]:
        """The context is in use until the block ends."""
        self._holds[digest] += 1
        try:
            yield
        finally:
            self._holds[digest] -= 1
            if not self._holds[digest]:
                del self._holds[digest]

    def hold_for_task(self, digest: str) -> None:
        """The context is in use until the current task (the admitting call) ends: by then
        the rollout or group it admitted is live, and counted by `add_users`."""
        task = asyncio.current_task()
        assert task is not None
        hold = self.hold(digest)
        hold.__enter__()
        task.add_done_callback(lambda _: hold.__exit__(None, None, None))

    def in_use(self) -> set[str]:
        digests = set(self._holds)
        for users in self._users:
            digests.update(users())
        return digests

    def touch(self, digest: str) -> bool:
        """Mark the context used now; whether it exists."""
        try:
            os.utime(self._root / digest)
        except FileNotFoundError:
            return False
        return self.path(digest).is_dir()

    def write(self, tree: TaskTree, digest: str) -> bool:
        """environment/ on disk once per digest (made aside, then renamed into place, so
        concurrent admissions of one task never see half of it); whether it wrote it."""
        target = self.path(digest)
        if self.touch(digest):
            return False
        scratch = target.parent.with_name(f".{digest}.{uuid.uuid4().hex}.tmp")
        try:
            for path, file in tree.items():
                if path.startswith("environment/"):
                    out = scratch / path
                    out.parent.mkdir(parents=True, exist_ok=True)
                    out.write_bytes(file.data)
                    out.chmod(file.mode)
            scratch.mkdir(parents=True, exist_ok=True)
            try:
                scratch.rename(target.parent)
            except OSError:  # another admission put it there first
                return False
            return True
        finally:  # nothing left behind, whatever failed (the rename took it if it worked)
            shutil.rmtree(scratch, ignore_errors=True)

    async def maybe_sweep(self, *, wrote: bool) -> None:
        """Sweep if a context was just written, or none swept for _SWEEP_EVERY_S."""
        if wrote or time.monotonic() - self._last_sweep >= _SWEEP_EVERY_S:
            await self.sweep()

    async def sweep(self) -> list[str]:
        """Remove what the budgets leave no room for (see the module docstring); the
        digests removed."""
        async with self._sweeping:
            self._last_sweep = time.monotonic()
            found, trash = await asyncio.to_thread(self._scan)
            victims = self._choose(found, self.in_use(), time.time())
            trash += [self._set_aside(digest) for digest in victims]  # no await in between
            await asyncio.to_thread(_remove, [path for path in trash if path is not None])
        if victims:
            log.info("removed %d unused Harbor build contexts: %s", len(victims), victims)
        return victims

    def _scan(self) -> tuple[list[_Found], list[Path | None]]:
        """The contexts, and what a sweep set aside but did not remove (a crash)."""
        found: list[_Found] = []
        trash: list[Path | None] = []
        with contextlib.suppress(FileNotFoundError):
            for entry in os.scandir(self._root):
                if entry.name.endswith(_SET_ASIDE):
                    trash.append(Path(entry.path))
                if entry.name.startswith("."):  # a context being written, or set aside
                    continue
                with contextlib.suppress(FileNotFoundError):
                    last_use = entry.stat(follow_symlinks=False).st_mtime
                    if entry.name not in self._sizes:
                        self._sizes[entry.name] = _disk_bytes(Path(entry.path))
                    found.append(_Found(entry.name, last_use, self._sizes[entry.name]))
        return found, trash

    def _choose(self, found: list[_Found], in_use: set[str], now: float) -> list[str]:
        total = sum(context.size for context in found)
        victims = []
        for context in sorted(found, key=lambda context: context.last_use):
            if context.digest in in_use:
                continue
            if now - context.last_use > self._ttl_s or total > self._max_bytes:
                victims.append(context.digest)
                total -= context.size
        return victims

    def _set_aside(self, digest: str) -> Path | None:
        trash = self._root / f".{digest}.{uuid.uuid4().hex}{_SET_ASIDE}"
        self._sizes.pop(digest, None)
        try:
            (self._root / digest).rename(trash)
        except FileNotFoundError:
            return None
        return trash


def _disk_bytes(directory: Path) -> int:
    """Bytes the directory takes on disk (blocks, as du counts: a tiny file takes one)."""
    total = directory.lstat().st_blocks * 512
    for parent, dirnames, filenames in os.walk(directory):
        for name in dirnames + filenames:
            with contextlib.suppress(FileNotFoundError):
                total += os.lstat(os.path.join(parent, name)).st_blocks * 512
    return total


def _remove(paths: list[Path]) -> None:
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)
