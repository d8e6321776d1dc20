"""Which image a local sandbox runs on, the host ids it owns, and its overlay's directories.

`SandboxSpec.image` names an image of the store (`service.images`); "" means the server's
default (`Settings.sandbox_image`, the Debian base unless set), made at first use with its
progress reported; `host` keeps the host's root, read-only, as before images. Resolving
the default costs nothing after the first time (`ImageRoots`); another name costs one
query of the store.

Each image sandbox owns a block of ID_SPAN host ids (`UidBlocks`): root and every other
id inside map into it (`overlay_start`), so no sandbox shares an id with another or
with the host. A block is held by a lock file for as long as its sandbox lives, across
every server on the host; a crashed server's locks go with its process.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import os
import stat
from collections.abc import Callable, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from service.errors import FieldViolation, ImageError, SandboxError, SpecError
from service.images import (
    BASE_NAMES,
    BASE_NOT_MADE,
    Image,
    ImageProgress,
    ImageStore,
    owned_copy,
    qualify,
)
from service.sandboxes.local.bwrap import SandboxLayout
from service.sandboxes.local.overlay_start import ID_SPAN

__all__ = [
    "BASE_NOT_MADE",
    "HOST_IMAGE",
    "ImageRoots",
    "UidBlocks",
    "image_dirs",
    "image_overlay",
    "prepare_upper",
]

HOST_IMAGE = "host"
"""The name that keeps the host's root, read-only (no image)."""
_FIELD = "spec.sandbox.image"
_BASE = {qualify(name) for name in BASE_NAMES}
_BLOCKS_FIRST = 0x2000_0000
_BLOCKS = 8192
"""Blocks of ID_SPAN ids from _BLOCKS_FIRST: below the host sandboxes' uids (`bwrap`)."""


class ImageRoots:
    """Resolves image names to the store's ready images for one backend."""

    def __init__(self, store: ImageStore, default: str, *, owned: Path | None = None) -> None:
        self.store = store
        self.default = default
        self.owned = owned
        """An unprivileged server's: where it copies the base made ahead (`owned_copy`);
        its other images are its rootless store's (`ImageStore.of_server`). None for root."""
        self._base: Image | None = None
        self._by_id: dict[str, Image] = {}
        self._copying = asyncio.Lock()

    def name(self, requested: str) -> str:
        return requested or self.default

    async def check(self, requested: str) -> None:
        """Raise SpecError (spec.sandbox.image) if the image is neither `host`, the base
        (made at first use) nor in the store, by its name or an operator's alias, or if it
        sets a USER (`ImageConfig.user_refusal`)."""
        name = self.name(requested)
        if name == HOST_IMAGE:
            return
        if self.owned is not None and qualify(name) in _BASE:
            if self.store.made_base() is None:
                raise SpecError([FieldViolation(_FIELD, f"{name!r}: {BASE_NOT_MADE}")])
            return
        if qualify(name) in _BASE:
            return  # the base is the service's own (no USER), made at first use: no query
        try:
            config = await self.store.config(name)
        except ImageError as exc:
            raise SpecError([FieldViolation(_FIELD, exc.detail)]) from exc
        if config is not None:
            if refusal := config.user_refusal(f"image {name!r}"):
                raise SpecError([FieldViolation(_FIELD, refusal)])
            return
        how = self.store.how_to_provide(name)
        raise SpecError([FieldViolation(_FIELD, f"no image {name!r} in the store; {how}")])

    async def resolve(self, requested: str, report: Callable[[str], None]) -> Image | None:
        """The ready image (built or unpacked now if needed), or None for `host`."""
        name = self.name(requested)
        if name == HOST_IMAGE:
            return None
        if qualify(name) in _BASE and self._base is not None and self._base.rootfs.is_dir():
            return self._base
        if self.owned is not None and qualify(name) in _BASE:
            return await self._owned_base(name, report)

        def progress(event: ImageProgress) -> None:
            report(f"image {event.image}: {event.step}: {event.message}"[:500])

        try:
            image = await self.store.get(name, progress)
        except ImageError as exc:
            raise SandboxError(str(exc)) from exc
        if qualify(name) in _BASE:
            self._base = image
        self._by_id[image.id] = image
        return image

    async def _owned_base(self, name: str, report: Callable[[str], None]) -> Image:
        made = self.store.made_base() if qualify(name) in _BASE else None
        if made is None:
            raise SandboxError(f"image {name!r}: {BASE_NOT_MADE}")
        assert self.owned is not None
        async with self._copying:  # concurrent first uses copy once
            if self._base is None or self._base.id != made.id:
                report(f"image {name}: copying it for a server not running as root")
                try:
                    self._base = await asyncio.to_thread(owned_copy, made, self.owned)
                except OSError as exc:
                    raise SandboxError(f"image {name!r}: could not copy it: {exc}") from exc
                self._by_id[made.id] = self._base
        return self._base

    def by_id(self, image_id: str) -> Image:
        """An image resolved before (a warm sandbox's kind names it by id)."""
        return self._by_id[image_id]


class UidBlocks:
    """Host id blocks of image sandboxes, each held by a lock file while its sandbox lives."""

    def __init__(self, directory: Path) -> None:
        self._directory = directory
        self._held: dict[int, int] = {}

    def claim(self, seed: str) -> int:
        """The first host id of a free block (probing from one `seed` picks)."""
        self._directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        start = int.from_bytes(hashlib.sha256(seed.encode()).digest()[:4], "big") % _BLOCKS
        for step in range(_BLOCKS):
            first = _BLOCKS_FIRST + (start + step) % _BLOCKS * ID_SPAN
            if first in self._held:
                continue
            fd = os.open(self._directory / f"{first}.lock", os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            self._held[first] = fd
            return first
        raise SandboxError("every host id block for image sandboxes is in use")

    def release(self, first: int | None) -> None:
        fd = self._held.pop(first, None) if first is not None else None
        if fd is not None:
            os.close(fd)


def image_dirs(layout: SandboxLayout) -> dict[str, str]:
    """Where the spawner mounts an image sandbox's root (`overlay_start`)."""
    dirs = {
        "lower": layout.root / "image" / "lower",
        "root": layout.root / "image" / "root",
        "upper": layout.disk / "upper",
        "work": layout.disk / "work",
    }
    return {key: str(path) for key, path in dirs.items()}


def prepare_upper(
    layout: SandboxLayout, image: Image, made: Sequence[str], mount_points: Sequence[str]
) -> None:
    """Make the overlay's directories.

    `made` are directories the sandbox gets whether the image has them or not (its
    home), owned by its root; `mount_points` are where bwrap binds what the host shares,
    made with their parents in the upper layer, as the image has them or else owned by
    the sandbox's root, so bwrap never makes one its root cannot enter.
    Without an id block (`layout.uid` None: an unprivileged server, whose uid is the
    sandbox's root) they keep the server's owner, as does its copy of the image.
    """
    dirs = image_dirs(layout)
    for key in ("lower", "root"):
        os.makedirs(dirs[key], mode=0o700, exist_ok=True)
    os.mkdir(dirs["work"], 0o700)
    upper = Path(dirs["upper"])
    _mirror(image.rootfs, upper, layout.uid, ".")
    for path in (*made, *mount_points):
        relative = PurePosixPath(path).relative_to("/")
        for depth in range(1, len(relative.parts) + 1):
            _mirror(image.rootfs, upper, layout.uid, str(PurePosixPath(*relative.parts[:depth])))


def image_overlay(
    layout: SandboxLayout, image: Image, tops: Sequence[dict[str, Any]] = ()
) -> dict[str, Any]:
    """The sandbox's root for its spawner (`local_overlay_start.mount_overlay`): the
    image's rootfs under `tops` (snapshot layers, top first: a group member's, a FRESH
    verifier's), then its own writes; the rootfs is id-mapped into the sandbox's block,
    or as it is without one."""
    dirs = image_dirs(layout)
    mapping = None if layout.uid is None else [0, layout.uid, ID_SPAN]
    rootfs = {"source": str(image.rootfs), "at": dirs["lower"], "map": mapping}
    lowers = [*tops, rootfs]
    return {
        "target": dirs["root"],
        "upper": dirs["upper"],
        "work": dirs["work"],
        "lowers": lowers,
        "userxattr": layout.uid is None,
    }


def _mirror(rootfs: Path, upper: Path, first_id: int | None, relative: str) -> None:
    """Make upper/relative a directory as rootfs has it (ids shifted into the sandbox's
    block; the server's own without one), or 0755 owned by the sandbox's root if the
    image lacks it."""
    target = upper / relative
    if target.is_dir():
        return
    try:
        found = os.stat(rootfs / relative, follow_symlinks=False)
    except FileNotFoundError:
        found = None
    if found is not None and not stat.S_ISDIR(found.st_mode):
        raise OSError(f"the image has a non-directory at /{relative}, where a mount goes")
    mode, uid, gid = (0o755, 0, 0) if found is None else (found.st_mode, found.st_uid, found.st_gid)
    target.mkdir()
    if first_id is None:  # no root's override here: its owner (the server) must write in it
        os.chmod(target, stat.S_IMODE(mode) | stat.S_IWUSR)
    else:
        os.chmod(target, stat.S_IMODE(mode))
        os.chown(target, first_id + uid, first_id + gid)
