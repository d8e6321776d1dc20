"""A local sandbox's disk: one size-limited filesystem for everything it can write.

Its home (with the workdir) and its /tmp live on an ext4 filesystem of its own, in a
sparse image file of `disk_mb` beside them, loop-mounted on the host: a sandbox that
writes past its quota gets ENOSPC, and the filesystem holding the database grows by the
image's size at most. Why this and not the others tried here:

    tmpfs with size=       counts against memory (RAM, no swap here), not disk
    project quotas         the host's root filesystem is not mounted with prjquota,
                           and a file's owner may change its project id
    loop-mounted image     chosen: a sparse copy of an empty image made once per size,
                           then a mount: ~30 ms, teardown ~30 ms more (warm sandboxes
                           hide the first); needs root and loop devices

An unprivileged server cannot mount: its sandboxes write to plain directories, bounded
only per file (the server logs this at start). Teardown and the start-up sweep detach the
filesystem (lazily: it is freed once no sandboxed process holds it) before removing
the directory and the image with it (`removal`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

from service.sandboxes.local.bwrap import SandboxLayout
from service.sandboxes.local.mounts import detach, mount_points_below

__all__ = ["detach_mounts_below", "make_disk"]

_MKFS = (
    "mkfs.ext4",
    "-q",
    "-F",
    *("-m", "0"),  # no blocks reserved for root: the sandbox may use them all
    # Thrown away after the rollout and never grown: no journal, no room for growth,
    # the metadata packed at the start (fewer extents to copy and to free).
    *("-O", "^has_journal,^resize_inode"),
    *("-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard,packed_meta_blocks=1"),
)
_TEMPLATE_VERSION = 1
"""Part of a template's name: bump it when `_MKFS` changes."""
_MOUNT_OPTIONS = "loop,nosuid,nodev,noatime"
_TOOL_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


def make_disk(layout: SandboxLayout, size_bytes: int, templates: Path) -> None:
    """Make the sandbox's filesystem (`size_bytes`) and mount it at `layout.disk`.

    The image is a sparse copy of an empty filesystem of that size, made once per size
    in `templates` (a few MiB of metadata: ~1 ms to copy, against ~50 ms for mkfs).
    """
    _copy_sparse(_template(templates, size_bytes), layout.disk_image)
    layout.disk.mkdir(mode=0o755)
    _run(["mount", "-t", "ext4", "-o", _MOUNT_OPTIONS, str(layout.disk_image), str(layout.disk)])


def _template(templates: Path, size_bytes: int) -> Path:
    """The empty filesystem image of this size, made now if it is not there yet."""
    path = templates / f"ext4-v{_TEMPLATE_VERSION}-{size_bytes}.img"
    if path.exists():
        return path
    templates.mkdir(mode=0o700, parents=True, exist_ok=True)
    making = path.with_name(f"{path.name}.{uuid.uuid4().hex}")
    try:
        with open(making, "wb") as image:
            image.truncate(size_bytes)
        _run([*_MKFS, str(making)])
        making.replace(path)  # two threads making one at once: either copy is good
    finally:
        making.unlink(missing_ok=True)
    return path


def _copy_sparse(source: Path, target: Path) -> None:
    """Copy the data of `source` into a new `target` of the same size, holes kept."""
    with open(source, "rb") as src, open(target, "xb") as dst:
        size = os.fstat(src.fileno()).st_size
        dst.truncate(size)
        offset = 0
        while offset < size:
            try:
                start = os.lseek(src.fileno(), offset, os.SEEK_DATA)
            except OSError:  # ENXIO: no data past offset
                return
            end = os.lseek(src.fileno(), start, os.SEEK_HOLE)
            position = start
            while position < end:
                position += os.copy_file_range(
                    src.fileno(), dst.fileno(), end - position, position, position
                )
            offset = end


def _run(argv: list[str]) -> None:
    program = shutil.which(argv[0], path=_TOOL_PATH)
    if program is None:
        raise OSError(f"{argv[0]} is missing (Debian/Ubuntu: apt-get install e2fsprogs mount)")
    done = subprocess.run(
        [program, *argv[1:]], capture_output=True, text=True, check=False, env={"PATH": _TOOL_PATH}
    )
    if done.returncode != 0:
        raise OSError(f"{argv[0]} failed ({done.returncode}): {done.stderr.strip()[-500:]}")


def detach_mounts_below(path: Path) -> list[str]:
    """Lazily unmount every mount at or below `path` (deepest first); returns what could
    not be detached, each with why."""
    failed = []
    for point in mount_points_below(str(path)):
        why = detach(point)
        if why is not None:
            failed.append(f"{point}: cannot unmount: {why}")
    return failed
