"""The image store: an image name or source in, a ready root filesystem directory out.

    <cache_dir>/images/containers/       container storage (buildah/skopeo layers, overlay)
    <cache_dir>/images/containers-run/   its run-time state (locks, mounts)
    <cache_dir>/images/unpacked/<id>/    each image's root filesystem + image.json (rootfs.py)
    <cache_dir>/images/builds/<key>      the store's cache: request content key -> image id
    <cache_dir>/images/locks/<key>.lock  one build per key across processes
    <cache_dir>/images/base-scratch/     the base's root while it is made (base.py)
    <cache_dir>/images/dockerfiles/      each build's Dockerfile, pinned (dockerfile.py)

Every request is keyed by content (base.py, dockerfile.py): a key the store has recorded, whose
image it still holds, is a hit and runs no tool. `outcomes` records each request's hit or build.

A name is looked up (`resolve`) as `names.qualify` spells it, then through the operator's
aliases (names.py); the base counts as held, since it is made at first use.

A server not running as root has a rootless store of its own (`of_server`): the same layout
under `<state_dir>/rootless/images`, every tool run as root of a user namespace mapping the
server's ids alone (rootless.py), every file the server's. Its base is the one root made
ahead in `<cache_dir>/images` (`made_base`), imported (base.py), so it needs no mmdebstrap.

A build killed with its process (a server killed mid-build) leaves buildah's working
containers in the storage, and half-made directories: the first build or unpack of a store
in each process sweeps them (`sweep`) when no build or unpack of the store is under way in
any process, and tries again at the next one until it could.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import os
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Literal

from service.config import Settings
from service.errors import ImageError
from service.file_lock import file_lock, lock_now
from service.images.base import BASE_NAMES, base_key, build_base, import_base, remove_scratch
from service.images.dockerfile import (
    build_dockerfile,
    build_key,
    context_digest,
    from_images,
    pin_from,
)
from service.images.flight import Flights
from service.images.models import (
    BuildOutcome,
    Image,
    ImageConfig,
    ImageProgress,
    ImageSummary,
    ProgressCallback,
    PruneReport,
)
from service.images.names import ImageAliases, qualify
from service.images.oci import import_oci
from service.images.rootfs import ROOTFS_DIR, TMP_PREFIX, read_config, unpack
from service.images.storage import ContainerStorage

__all__ = ["BASE_NOT_MADE", "ImageStore"]

_BASE = {qualify(name) for name in BASE_NAMES}
_HOW_TO_PROVIDE = (
    "import it with `python -m service.images import SOURCE --name {name}` "
    "(an OCI layout, oci-archive or docker save tarball) or build it from a Dockerfile with "
    "`python -m service.images build CONTEXT --name {name}`, or have the operator alias it to "
    "a local image (ROLLOUT_IMAGE_ALIASES); `rollout/base` and `debian:bookworm` name the "
    "Debian base, made at first use"
)
BASE_NOT_MADE = (
    "the Debian base was not made ahead: a server not running as root cannot make it; run "
    "`python -m service.images base` as root with the same ROLLOUT_CACHE_DIR (readable by the "
    "server's user)"
)
Produce = Callable[[ProgressCallback], Awaitable[str]]


def _ignore(_: ImageProgress) -> None:
    """The default progress callback."""


class ImageStore:
    """Images under `<cache_dir>/images`, made once, shared by every sandbox."""

    def __init__(
        self,
        cache_dir: Path,
        *,
        timeout_s: float = 3600.0,
        aliases: Mapping[str, str] | None = None,
        rootless: Path | None = None,
    ) -> None:
        """`rootless`: the store is there instead, run without root (the module's docstring);
        its base is the one made ahead under `cache_dir`."""
        self.shared = cache_dir / "images"
        """Where root makes the base ahead (`made_base`): `directory` unless rootless."""
        self.directory = self.shared if rootless is None else rootless / "images"
        self.aliases = ImageAliases(aliases or {})
        self.storage = ContainerStorage(
            self.directory / "containers",
            self.directory / "containers-run",
            timeout_s,
            rootless=rootless is not None,
        )
        self.unpacked = self.directory / "unpacked"
        self.outcomes: list[BuildOutcome] = []
        self._flights: Flights[Image] = Flights()
        self._swept = False

    @classmethod
    def of_server(cls, settings: Settings) -> ImageStore:
        """A server's store: the cache's, or its own rootless one if it is not root."""
        rootless = None if os.geteuid() == 0 else settings.state_dir / "rootless"
        return cls(
            settings.cache_dir,
            timeout_s=settings.image_build_timeout_s,
            aliases=settings.image_aliases,
            rootless=rootless,
        )

    async def get(self, name: str, on_progress: ProgressCallback = _ignore) -> Image:
        """The ready image `name` (or its alias): the base is made at first use; any other
        must exist."""
        found = await self.resolve(name)
        if found is None:
            raise ImageError(
                name, "resolve", f"no such image in the store; {self.how_to_provide(name)}"
            )
        stored, image_id = found
        if stored in _BASE or image_id is None:
            return await self.base(on_progress)

        async def work(report: ProgressCallback) -> Image:
            async with self.building():
                return await self._ready(name, image_id, report)

        # Concurrent first uses of an image not unpacked yet unpack it once.
        return await self._flights.run(f"unpack\0{image_id}\0{name}", name, work, on_progress)

    async def base(self, on_progress: ProgressCallback = _ignore) -> Image:
        """The Debian base (mmdebstrap), made once; a rootless store's is imported, once per
        base made ahead."""
        scratch = self._base_scratch
        if not self.storage.rootless:

            async def produce(report: ProgressCallback) -> str:
                return await build_base(self.storage, scratch, report, self.storage.timeout_s)

            return await self._once(base_key(), BASE_NAMES[0], produce, on_progress)
        made = self.made_base()
        if made is None:
            raise ImageError(BASE_NAMES[0], "base", BASE_NOT_MADE)

        async def imported(report: ProgressCallback) -> str:
            assert made is not None
            return await import_base(self.storage, made, scratch, report)

        key = hashlib.sha256(f"{base_key()}\0{made.id}".encode()).hexdigest()
        return await self._once(key, BASE_NAMES[0], imported, on_progress)

    def made_base(self) -> Image | None:
        """The base as made and unpacked ahead (`base`), found from the store's own files
        alone: for an unprivileged server, which can run no tool on a root's container
        storage. None if it was not made, or not unpacked yet."""
        unpacked = self.shared / "unpacked"
        try:
            image_id = (self.shared / "builds" / base_key()).read_text().strip()
            config = read_config(unpacked / image_id)
        except (FileNotFoundError, PermissionError):
            return None
        if config is None:
            return None
        rootfs = unpacked / image_id / ROOTFS_DIR
        return Image(
            id=image_id, names=[qualify(n) for n in BASE_NAMES], rootfs=rootfs, config=config
        )

    async def resolve(self, name: str) -> tuple[str, str | None] | None:
        """(stored name, image id) that `name` stands for: itself if held, else the first
        alias target held; the id is None for the base not made yet. None if neither."""
        for spelling in [name, *(target for _, target in self.aliases.targets(name))]:
            if qualify(spelling) in _BASE:
                image_id = await self.storage.image_id(BASE_NAMES[0])
                return qualify(BASE_NAMES[0]), image_id
            found = await self.storage.find(spelling)
            if found is not None:
                return found[1], found[0]
        return None

    async def config(self, name: str) -> ImageConfig | None:
        """The image config of `name` (aliases followed), without unpacking; None if not held."""
        found = await self.resolve(name)
        if found is None:
            return None
        image_id = found[1]
        return ImageConfig() if image_id is None else await self.storage.config(image_id)

    async def import_oci(
        self,
        source: str,
        name: str,
        on_progress: ProgressCallback = _ignore,
        *,
        select: str = "",
    ) -> Image:
        """Import an OCI layout, oci-archive, docker save tarball or registry image as `name`
        (`select`: which image of an archive that holds several).

        Not keyed by content (a registry tag moves): skopeo runs each time, copying only the
        layers the storage lacks; the unpacked directory is still shared by content id.
        """
        qualify(name)

        async def work(report: ProgressCallback) -> Image:
            async with self.building():
                image_id = await import_oci(self.storage, source, name, report, select=select)
                self._record(name, f"import:{source}", "built", image_id)
                return await self._ready(name, image_id, report)

        flight = f"import\0{source}\0{select}\0{name}"
        return await self._flights.run(flight, name, work, on_progress)

    async def build(
        self,
        context: Path,
        name: str,
        *,
        dockerfile: Path | None = None,
        build_args: dict[str, str] | None = None,
        on_progress: ProgressCallback = _ignore,
    ) -> Image:
        """Build `context`'s Dockerfile as `name`, on images of the store."""
        qualify(name)
        dockerfile = dockerfile or context / "Dockerfile"
        args = dict(build_args or {})
        try:
            text = dockerfile.read_text()
        except OSError as exc:
            raise ImageError(name, "Dockerfile", f"cannot read {dockerfile}: {exc}") from exc
        parents = from_images(text, args, image=name)
        ids = {parent: await self._parent_id(name, parent, on_progress) for parent in parents}
        parent_ids = [ids[parent] for parent in parents]
        key = build_key(text, args, await asyncio.to_thread(context_digest, context), parent_ids)
        pinned = pin_from(text, args, ids, image=name)

        async def produce(report: ProgressCallback) -> str:
            await build_dockerfile(
                self.storage, name=name, context=context, dockerfile=pinned,
                build_args=args, on_progress=report, scratch=self._dockerfiles,
            )  # fmt: skip
            return await self._image_id(name, "build")

        return await self._once(key, name, produce, on_progress)

    async def list(self) -> list[ImageSummary]:
        """Every named image, with whether its root filesystem is unpacked."""
        return [
            ImageSummary(
                id=image["id"],
                names=image.get("names") or [],
                size=str(image.get("size", "")),
                unpacked=read_config(self.unpacked / image["id"]) is not None,
            )
            for image in await self.storage.images()
        ]

    async def remove(self, name: str) -> None:
        """Drop the name `name` (the image goes at the next prune if no other name holds it).

        Under the builds lock, exclusively, as a prune: buildah's `rmi` also deletes the
        image's parents no other image names, and those are the layer caches a build under
        way in another process may be reading ("layer not known").
        """
        async with file_lock(self._builds_lock):
            found = await self.storage.find(name)
            if found is None:
                raise ImageError(name, "remove", "no such image in the store")
            rmi = ["rmi", found[1]]
            await self.storage.run(rmi, image=name, step="remove", on_progress=_ignore)

    async def prune(self, *, everything: bool = False) -> PruneReport:
        """Remove unnamed images and layer caches (`everything`: all images), and the unpacked
        directories, build records and half-made directories of images no longer held."""
        async with file_lock(self._builds_lock):  # no build or unpack is under way
            before = {image["id"] for image in await self.storage.images()}
            await self._remove_leftovers("prune")
            if self.storage.root.exists():
                rmi = ["rmi", "--all", "--force"] if everything else ["rmi", "--prune"]
                await self.storage.run(rmi, image="*", step="prune", on_progress=_ignore)
            kept = {image["id"] for image in await self.storage.images()}
            in_use = {
                image_id for image_id in _unpacked_ids(self.unpacked) if self._in_use(image_id)
            }
            removed = sorted(_remove_unheld(self.unpacked, kept | in_use))
            _remove_unheld_records(self.directory / "builds", kept)
        return PruneReport(images_removed=len(before - kept), unpacked_removed=removed)

    async def sweep(self) -> bool:
        """Remove what builds killed with their process left (`_remove_leftovers`), if no
        build or unpack of this store is under way in any process: each holds the builds
        lock shared, so it is free only then, and none of theirs can be removed. Whether it
        could; `prune` sweeps too."""
        fd = lock_now(self._builds_lock)
        if fd is None:
            return False
        try:
            await self._remove_leftovers("sweep")
        finally:
            os.close(fd)
        return True

    async def _remove_leftovers(self, step: str) -> None:
        """buildah's working containers, half-unpacked directories, the base's scratch and
        the Dockerfiles written for buildah. Only with the builds lock held exclusively."""
        if self.storage.root.exists():
            await self.storage.run(["rm", "--all"], image="*", step=step, on_progress=_ignore)
        await asyncio.to_thread(self._remove_half_made)
        self._swept = True

    def _remove_half_made(self) -> None:
        for half_made in self.unpacked.glob(f"{TMP_PREFIX}*"):
            shutil.rmtree(half_made, ignore_errors=True)
        remove_scratch(self._base_scratch)
        shutil.rmtree(self._dockerfiles, ignore_errors=True)

    @contextlib.asynccontextmanager
    async def building(self) -> AsyncIterator[None]:
        """The builds lock, shared, for a build or unpack; this process's first sweeps."""
        if not self._swept:
            await self.sweep()
        async with file_lock(self._builds_lock, shared=True):
            yield

    def hold(self, image_id: str) -> int:
        """Mark the unpacked image in use (a sandbox's root) until the returned descriptor
        is closed: `prune` leaves it, whichever process prunes."""
        path = self._hold_path(image_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_SH)
        return fd

    def _in_use(self, image_id: str) -> bool:
        path = self._hold_path(image_id)
        if not path.exists():
            return False
        fd = lock_now(path)
        if fd is None:
            return True
        os.close(fd)
        return False

    def _hold_path(self, image_id: str) -> Path:
        return self.directory / "locks" / "in-use" / f"{image_id}.lock"

    @property
    def _base_scratch(self) -> Path:
        return self.directory / "base-scratch"

    @property
    def _dockerfiles(self) -> Path:
        return self.directory / "dockerfiles"

    @property
    def _builds_lock(self) -> Path:
        """Held shared by every build and unpack, exclusively by `prune`."""
        return self.directory / "locks" / "builds.lock"

    async def _once(
        self, key: str, name: str, produce: Produce, on_progress: ProgressCallback
    ) -> Image:
        """The image of `key`: from the record if the storage still holds it, else produced."""

        async def work(report: ProgressCallback) -> Image:
            async with self.building(), file_lock(self.directory / "locks" / f"{key}.lock"):
                image_id = await self._recorded(key, name)
                if image_id is not None:
                    self._record(name, key, "hit", image_id)
                else:
                    image_id = await produce(report)
                    (self.directory / "builds").mkdir(parents=True, exist_ok=True)
                    (self.directory / "builds" / key).write_text(image_id)
                    self._record(name, key, "built", image_id)
                return await self._ready(name, image_id, report)

        # One flight per key and name: a joiner under another name still gets its own tag.
        return await self._flights.run(f"{key}\0{name}", name, work, on_progress)

    async def _recorded(self, key: str, name: str) -> str | None:
        """The recorded image of `key` if still held; tagged `name` if it is not yet."""
        try:
            image_id = (self.directory / "builds" / key).read_text().strip()
        except FileNotFoundError:
            return None
        images = {image["id"]: image.get("names") or [] for image in await self.storage.images()}
        if image_id not in images:
            return None
        if qualify(name) not in images[image_id]:
            await self.storage.run(
                ["tag", image_id, qualify(name)], image=name, step="tag", on_progress=_ignore
            )
        return image_id

    def _record(self, name: str, key: str, result: Literal["hit", "built"], image_id: str) -> None:
        self.outcomes.append(BuildOutcome(image=name, key=key, result=result, image_id=image_id))

    async def _ready(self, name: str, image_id: str, on_progress: ProgressCallback) -> Image:
        config = await unpack(
            self.storage, image_id, self.unpacked, image=name, on_progress=on_progress
        )
        images = {image["id"]: image.get("names") or [] for image in await self.storage.images()}
        return Image(
            id=image_id,
            names=images.get(image_id, []),
            rootfs=self.unpacked / image_id / ROOTFS_DIR,
            config=config,
        )

    async def _parent_id(self, name: str, parent: str, on_progress: ProgressCallback) -> str:
        found = await self.resolve(parent)
        if found is None:
            raise ImageError(
                name, f"FROM {parent}", f"no such image in the store; {self.how_to_provide(parent)}"
            )
        image_id = found[1]
        return image_id if image_id is not None else (await self.base(on_progress)).id

    async def _image_id(self, name: str, step: str) -> str:
        image_id = await self.storage.image_id(name)
        if image_id is None:
            raise ImageError(name, step, "buildah finished but the storage lacks the image")
        return image_id

    def how_to_provide(self, name: str) -> str:
        """What was looked for (the name's spelling, its aliases) and how to provide it."""
        tried = [qualify(name)] + [
            f"{target} (alias {key})" for key, target in self.aliases.targets(name)
        ]
        return f"looked for {', '.join(tried)}; {_HOW_TO_PROVIDE.format(name=name)}"


def _unpacked_ids(unpacked: Path) -> list[str]:
    return [entry.name for entry in unpacked.iterdir()] if unpacked.is_dir() else []


def _remove_unheld(unpacked: Path, kept: set[str]) -> list[str]:
    if not unpacked.is_dir():
        return []
    removed = []
    for directory in unpacked.iterdir():
        if directory.name not in kept:
            shutil.rmtree(directory, ignore_errors=True)
            if not directory.name.startswith(TMP_PREFIX):
                removed.append(directory.name)
    return removed


def _remove_unheld_records(builds: Path, kept: set[str]) -> None:
    if builds.is_dir():
        for record in builds.iterdir():
            if record.read_text().strip() not in kept:
                record.unlink()
