"""Sandbox disks kept formatted and mounted, so the disk quota costs no mount on a rollout's path.

Making a sandbox's disk (`disk.make_disk`: a sparse copy of an empty filesystem, then a loop
mount) costs ~45 ms, and removing it (lazy unmount, loop detach, unlink) as much again; with
16 rollouts in flight both compete with the rollouts for the same cores. So disks of the
default size (`sandbox_disk_mb`) are kept ready, up to `local_disk_pool` of them, each in a
directory of its own that a sandbox takes by renaming it to its own (`provide`):

    <state_dir>/disk-pool/<random>/disk.img   the image
                                  /disk       its filesystem, mounted, holding nothing but
                                              an empty lost+found, as a new one does

The first sandbox of that size starts making a few disks in the background (`warm_up`: the
whole pool); the pool grows to its size, and stays there, with the disks of torn-down
sandboxes (`recycle`, in the reaper's thread once every process of the sandbox is dead,
after the rollout has its result), so it makes no more disks than there would be without it.

Wiping a disk: everything on the filesystem is removed without following a link
(`removal`), its lost+found must be empty and its root as made, and its freed blocks go
back to the host (FITRIM: the loop device punches them out of the image), so a ready disk
holds its metadata only. Anything unexpected (another mount below the directory, an entry
that would not go, no FITRIM) and the disk is removed instead. What one rollout leaves for
the next is nothing in the filesystem's tree; its counters (inode numbers, where free
blocks lie) are not reset. A disk of another size is made on the rollout's path and
removed after, as without the pool.

Shutdown removes the ready disks (`close`); a server killed leaves them mounted, and the
start-up sweep removes every directory of the pool it does not hold (`sweep`).
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import stat
import struct
import threading
import uuid
from pathlib import Path

from service.sandboxes.local.bwrap import SandboxLayout
from service.sandboxes.local.disk import make_disk
from service.sandboxes.local.mounts import DISK_POOL, SANDBOX_DISK, mount_points_below
from service.sandboxes.local.removal import open_directory, remove_entry, remove_tree, summary

__all__ = ["DiskPool"]

_log = logging.getLogger(__name__)
_FITRIM = 0xC0185879
"""ioctl on a mounted filesystem: discard its free blocks (linux/fs.h, struct fstrim_range)."""
_LOST_FOUND = "lost+found"
_ROOT_MODE = 0o755
"""The filesystem's root as mkfs made it (root's, 0755): no sandbox can change it."""
_AHEAD = 2
"""Disks made ahead at a size's first use; the pool's others are torn-down sandboxes'."""


class DiskPool:
    """Ready disks of one size (`disk_bytes`) for the sandboxes of the server whose state
    directory is `state_dir`; `size` 0 turns the pool off."""

    def __init__(self, state_dir: Path, size: int, disk_bytes: int) -> None:
        self._directory = state_dir / DISK_POOL
        self._templates = state_dir / "disk-images"
        """Where `make_disk` keeps its empty filesystems."""
        self._size = size if disk_bytes > 0 else 0
        self._disk_bytes = disk_bytes
        self._ready: list[Path] = []
        self._lock = threading.Lock()
        """Guards `_ready` and `_closed`: sandboxes take disks in threads (`provide`)."""
        self._closed = False
        self._filling: asyncio.Task[None] | None = None
        self._filled = False

    def provide(self, layout: SandboxLayout, size_bytes: int) -> None:
        """Make `layout.root` with a mounted disk of `size_bytes` at `layout.disk`: a ready
        one renamed to it, else one made now. In a thread."""
        ready = self._take() if size_bytes == self._disk_bytes else None
        if ready is not None:
            try:
                ready.rename(layout.root)
                return
            except OSError as exc:
                _log.warning("could not take pooled disk %s: %s", ready, exc)
                remove_tree(ready)
        layout.root.mkdir(mode=0o700)
        make_disk(layout, size_bytes, self._templates)

    def first_use(self, size_bytes: int) -> None:
        """The first time a sandbox asks for the pool's size, start making a few disks; after
        that, torn-down sandboxes' disks fill the pool (making more whenever it ran short
        would make disks that are removed when the ones lent come back)."""
        if not self._filled:
            self.fill(size_bytes, min(_AHEAD, self._size))

    def fill(self, size_bytes: int, count: int | None = None) -> None:
        """Start making disks until `count` (the pool's size if None) are ready, if
        `size_bytes` is its size."""
        if self._size == 0 or size_bytes != self._disk_bytes:
            return
        if self._filling is not None and not self._filling.done():
            return
        self._filled = True
        making = asyncio.to_thread(self._fill, self._size if count is None else count)
        self._filling = asyncio.get_running_loop().create_task(making)
        self._filling.add_done_callback(_log_failure)

    async def filled(self) -> None:
        """Until the disks being made (`fill`), if any, are made."""
        if self._filling is not None:
            await asyncio.wait([self._filling])

    def recycle(self, root: Path) -> bool:
        """Wipe the disk of the torn-down sandbox directory `root` and keep it, if its size
        is the pool's and the pool has room; False leaves `root` to the caller. In a thread."""
        if not self._has_room():
            return False
        layout = SandboxLayout(root, None)
        try:
            image = os.stat(layout.disk_image, follow_symlinks=False)
            if not stat.S_ISREG(image.st_mode) or image.st_size != self._disk_bytes:
                return False
            if mount_points_below(str(root)) != [str(layout.disk)]:
                return False
            failures = _wipe(layout)
        except OSError as exc:
            failures = [f"{root}: {exc.strerror or exc}"]
        if failures:
            _log.info("not reusing the disk of %s: %s", root.name, summary(failures))
            return False
        ready = self._directory / uuid.uuid4().hex
        try:
            self._directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.rename(root, ready)
        except OSError:
            return False
        if not self._keep(ready):
            remove_tree(ready)
        return True

    def held(self) -> set[Path]:
        """The ready disks' directories."""
        with self._lock:
            return set(self._ready)

    def sweep(self) -> None:
        """Remove every directory of the pool this one does not hold (a crashed server's).
        In a thread."""
        if not self._directory.is_dir():
            return
        held = self.held()
        for entry in self._directory.iterdir():
            if entry not in held:
                remove_tree(entry)

    async def close(self) -> None:
        """Stop keeping disks and remove the ready ones (a disk being made is removed once
        made)."""
        with self._lock:
            self._closed = True
            ready, self._ready = self._ready, []
        await self.filled()
        await asyncio.gather(*(asyncio.to_thread(remove_tree, path) for path in ready))

    def _fill(self, count: int) -> None:
        self._directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        while self._has_room() and len(self.held()) < count:
            path = self._directory / uuid.uuid4().hex
            path.mkdir(mode=0o700)
            try:
                make_disk(SandboxLayout(path, None), self._disk_bytes, self._templates)
            except BaseException:
                remove_tree(path)
                raise
            if not self._keep(path):
                remove_tree(path)

    def _take(self) -> Path | None:
        with self._lock:
            return self._ready.pop() if self._ready else None

    def _has_room(self) -> bool:
        with self._lock:
            return not self._closed and len(self._ready) < self._size

    def _keep(self, path: Path) -> bool:
        with self._lock:
            if self._closed or len(self._ready) >= self._size:
                return False
            self._ready.append(path)
            return True


def _wipe(layout: SandboxLayout) -> list[str]:
    """Remove everything of the sandbox but its disk's image and filesystem, and everything
    on that filesystem but its lost+found; give the freed blocks back. What is amiss."""
    failures = []
    top = open_directory(None, str(layout.root))
    try:
        for name in os.listdir(top):
            if name not in {SANDBOX_DISK, layout.disk_image.name}:
                failures += remove_entry(top, name)
    finally:
        os.close(top)
    disk = open_directory(None, str(layout.disk))
    try:
        for name in os.listdir(disk):
            if name != _LOST_FOUND:
                failures += remove_entry(disk, name)
        root = os.fstat(disk)
        if root.st_uid != 0 or stat.S_IMODE(root.st_mode) != _ROOT_MODE:
            failures.append(f"{layout.disk}: its root is not as made")
        lost_found = os.open(_LOST_FOUND, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=disk)
        try:
            if os.listdir(lost_found):
                failures.append(f"{layout.disk}: {_LOST_FOUND} is not empty")
        finally:
            os.close(lost_found)
        fcntl.ioctl(disk, _FITRIM, bytearray(struct.pack("QQQ", 0, 2**64 - 1, 0)))
    finally:
        os.close(disk)
    return failures


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        _log.warning("could not make the disk pool's disks: %s", task.exception())
