"""The default image: Debian bookworm made by mmdebstrap from Debian's own packages.

No registry is needed, only the Debian mirror: mmdebstrap builds a minbase root filesystem
(plus the packages a coding task expects) into a scratch directory, which is committed into the
store's container storage as one layer, named both `rollout/base` and `debian:bookworm`, so a
Dockerfile's `FROM debian:bookworm` builds on it. `debian:bookworm` here is this base, never the
Docker Hub image.

A rootless store (an unprivileged server's) cannot run mmdebstrap (its `unshare` mode needs
/etc/subuid ranges and the setuid newuidmap): it imports the base root made ahead instead
(`import_base`), copied first so that every file is the server's (owned.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
from pathlib import Path

from service.errors import ImageError
from service.images.models import Image, ProgressCallback
from service.images.names import qualify
from service.images.owned import owned_copy
from service.images.process import run_tool
from service.images.storage import ContainerStorage

__all__ = [
    "BASE_NAMES",
    "BASE_PACKAGES",
    "BASE_SUITE",
    "base_key",
    "build_base",
    "import_base",
    "remove_scratch",
]

BASE_SUITE = "bookworm"
BASE_PACKAGES = ("python3", "bash", "coreutils", "ca-certificates", "git")
"""Installed on top of minbase."""
BASE_NAMES = ("rollout/base", f"debian:{BASE_SUITE}")
_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


_HOOKS = (
    # mmdebstrap copies the build host's hostname and resolvers in: no sandbox sees them.
    'echo sandbox > "$1/etc/hostname"',
    'printf "127.0.0.1 localhost sandbox\\n::1 localhost\\n" > "$1/etc/hosts"',
    ': > "$1/etc/resolv.conf"',
)


def base_key() -> str:
    """Content key of the base recipe: a new suite, package list or hook is a new base."""
    recipe = f"mmdebstrap minbase {BASE_SUITE} {','.join(BASE_PACKAGES)} {'|'.join(_HOOKS)}"
    return hashlib.sha256(recipe.encode()).hexdigest()


async def build_base(
    storage: ContainerStorage, scratch: Path, on_progress: ProgressCallback, timeout_s: float
) -> str:
    """mmdebstrap the base into `scratch`, commit it under BASE_NAMES; return its image id."""
    image = BASE_NAMES[0]
    _fresh(scratch)
    try:
        await run_tool(
            [
                # Its mounts in the target (/proc, /sys, the host's /dev/shm) in a mount
                # namespace of its own: they go with it, even killed mid-run.
                "unshare", "--mount", "--propagation", "private",
                "mmdebstrap", "--mode=root", "--variant=minbase",
                f"--include={','.join(BASE_PACKAGES)}",
                *(f"--customize-hook={hook}" for hook in _HOOKS),
                BASE_SUITE, str(scratch / "rootfs"),
            ],
            image=image, step="base", on_progress=on_progress, timeout_s=timeout_s,
        )  # fmt: skip
        return await _commit(storage, scratch / "rootfs", on_progress)
    finally:
        remove_scratch(scratch)


async def import_base(
    storage: ContainerStorage, made: Image, scratch: Path, on_progress: ProgressCallback
) -> str:
    """Commit the base `made` by root (copied into `scratch`, every file ours) under
    BASE_NAMES; return its image id."""
    _fresh(scratch)
    try:
        copy = await asyncio.to_thread(owned_copy, made, scratch)
        return await _commit(storage, copy.rootfs, on_progress)
    finally:
        remove_scratch(scratch)


async def _commit(storage: ContainerStorage, rootfs: Path, on_progress: ProgressCallback) -> str:
    image = BASE_NAMES[0]

    async def buildah(*args: str) -> list[str]:
        return await storage.run(args, image=image, step="base", on_progress=on_progress)

    container = (await buildah("from", "--quiet", "scratch"))[-1].strip()
    try:
        await buildah("copy", "--quiet", container, str(rootfs), "/")
        await buildah(
            "config", "--env", f"PATH={_PATH}", "--cmd", "/bin/bash", "--workingdir", "/",
            "--label", f"rollout.base.key={base_key()}", container,
        )  # fmt: skip
        await buildah("commit", "--quiet", "--format", "oci", container, qualify(image))
    finally:
        await buildah("rm", container)
    for alias in BASE_NAMES[1:]:
        await buildah("tag", qualify(image), qualify(alias))
    image_id = await storage.image_id(image)
    if image_id is None:
        raise ImageError(image, "base", "buildah committed the base but does not list it")
    return image_id


def _fresh(directory: Path) -> None:
    """An empty `directory` (a crashed build's leftovers removed)."""
    remove_scratch(directory)
    directory.mkdir(parents=True, exist_ok=True)


def remove_scratch(directory: Path) -> None:
    """Remove `directory` with what it holds on its own filesystem, never entering another
    one mounted inside: mmdebstrap, killed mid-run when it ran in the host's mount namespace
    (before `build_base` gave it its own), left the host's /dev/shm bind-mounted in its
    target, and /proc and /sys mounted there. Such mounts stay, with the directories holding
    them (so `_fresh` keeps a non-empty one)."""
    with contextlib.suppress(FileNotFoundError):
        _remove_within(str(directory), directory.lstat().st_dev)
        with contextlib.suppress(OSError):
            os.rmdir(directory)


def _remove_within(path: str, device: int) -> None:
    with os.scandir(path) as entries:
        for entry in entries:
            with contextlib.suppress(OSError):  # a mount point is busy: left
                if not entry.is_dir(follow_symlinks=False):
                    os.unlink(entry.path)
                elif entry.stat(follow_symlinks=False).st_dev == device:
                    _remove_within(entry.path, device)
                    os.rmdir(entry.path)
