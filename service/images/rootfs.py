"""Unpacking an image of the container storage into its own root filesystem directory.

    <unpacked>/<image id>/rootfs/       the image's files, owners and modes as in the image
    <unpacked>/<image id>/image.json    its ImageConfig, written last: present means complete

The directory is named by the image's content id, so equal content is unpacked once, and is
never written after it is renamed into place (a sandbox mounts it read-only, as the lower
layer of its own overlay). A half-made directory (a crash) has no image.json, lives under a
`.tmp-` name, and is cleared by the next prune.
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

from service.errors import ImageError
from service.images.models import ImageConfig, ProgressCallback
from service.images.process import run_tool
from service.images.storage import ContainerStorage

__all__ = ["CONFIG_FILE", "ROOTFS_DIR", "read_config", "unpack"]

ROOTFS_DIR = "rootfs"
CONFIG_FILE = "image.json"
TMP_PREFIX = ".tmp-"


def read_config(directory: Path) -> ImageConfig | None:
    """The config of a complete unpacked image, or None if there is none."""
    try:
        return ImageConfig.model_validate_json((directory / CONFIG_FILE).read_text())
    except FileNotFoundError:
        return None


async def unpack(
    storage: ContainerStorage,
    image_id: str,
    unpacked: Path,
    *,
    image: str,
    on_progress: ProgressCallback,
) -> ImageConfig:
    """Make `<unpacked>/<image_id>` (no-op when complete); return the image's config."""
    final = unpacked / image_id
    config = read_config(final)
    if config is not None:
        return config
    config = await storage.config(image_id)
    if config is None:
        raise ImageError(image, "unpack", f"image {image_id} was removed while it was read")
    scratch = unpacked / f"{TMP_PREFIX}{image_id}-{uuid.uuid4().hex[:8]}"
    scratch.mkdir(parents=True)
    try:
        await _copy_out(storage, image_id, scratch / ROOTFS_DIR, image, on_progress)
        (scratch / CONFIG_FILE).write_text(config.model_dump_json(indent=2))
        if read_config(final) is None:
            shutil.rmtree(final, ignore_errors=True)
            scratch.rename(final)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return config


async def _copy_out(
    storage: ContainerStorage,
    image_id: str,
    destination: Path,
    image: str,
    on_progress: ProgressCallback,
) -> None:
    async def buildah(*args: str) -> list[str]:
        return await storage.run(args, image=image, step="unpack", on_progress=on_progress)

    container = (await buildah("from", "--quiet", "--pull=never", image_id))[-1].strip()
    try:
        if storage.rootless:
            await _copy_out_rootless(storage, container, destination, image, on_progress)
            return
        mountpoint = (await buildah("mount", container))[-1].strip()
        await run_tool(
            ["cp", "-a", "--reflink=auto", f"{mountpoint}/.", str(destination)],
            image=image,
            step="unpack",
            on_progress=on_progress,
            timeout_s=storage.timeout_s,
        )
    finally:
        await buildah("umount", container)
        await buildah("rm", container)


# buildah's mount lives in the mount namespace of the user namespace it ran in, gone when it
# exits: a rootless storage's mount, copy and unmount run in one namespace.
_MOUNT_COPY = (
    'container=$1 destination=$2; shift 2; mountpoint=$("$@" mount "$container"); '
    'trap \'"$@" umount "$container"\' EXIT; cp -a --reflink=auto "$mountpoint/." "$destination"'
)


async def _copy_out_rootless(
    storage: ContainerStorage,
    container: str,
    destination: Path,
    image: str,
    on_progress: ProgressCallback,
) -> None:
    script = ["sh", "-ec", _MOUNT_COPY, "sh", container, str(destination)]
    await run_tool(
        storage.tool([*script, *storage.plain_buildah()]),
        image=image,
        step="unpack",
        on_progress=on_progress,
        timeout_s=storage.timeout_s,
    )
