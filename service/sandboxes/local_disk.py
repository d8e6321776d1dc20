"""A local sandbox's disk: one size-limited filesystem for everything it can write.

Its home (with the workdir) and its /tmp live on an ext4 filesystem of its own, in a
sparse image file of `disk_mb` beside them, loop-mounted on the host: a sandbox that
writes past its quota gets ENOSPC, and the filesystem holding the database grows by the
image's size at most. Why this and not the others tried here:

    tmpfs with size=       counts against memory (RAM, no swap here), not disk
    project quotas         the host's root filesystem is not mounted with prjquota,
                           and a file's owner may change its project id
    loop-mounted image     mkfs + mount cost ~50 ms (warm sandboxes hide it); needs
                           root (mount) and loop devices (e2fsprogs, util-linux)

An unprivileged server cannot mount: its sandboxes write to plain directories, bounded
only per file (the server logs this at start). Teardown and the start-up sweep detach the
filesystem (lazily: it is freed once no sandboxed process holds it) before removing
the directory and the image with it (`local_removal`).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from service.sandboxes.bwrap import SandboxLayout
from service.sandboxes.local_mounts import detach, mount_points_below

__all__ = ["detach_mounts_below", "make_disk"]

_MKFS = (
    "mkfs.ext4",
    "-q",
    "-F",
    *("-m", "0"),  # no blocks reserved for root: the sandbox may use them all
    *("-O", "^has_journal"),  # thrown away after the rollout: no crash recovery needed
    *("-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard"),
)
_MOUNT_OPTIONS = "loop,nosuid,nodev,noatime"
_TOOL_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


def make_disk(layout: SandboxLayout, size_bytes: int) -> None:
    """Make the sandbox's filesystem (`size_bytes`) and mount it at `layout.disk`."""
    with open(layout.disk_image, "wb") as image:
        image.truncate(size_bytes)  # sparse: blocks are taken as the sandbox writes
    layout.disk.mkdir(mode=0o755)
    _run([*_MKFS, str(layout.disk_image)])
    _run(["mount", "-t", "ext4", "-o", _MOUNT_OPTIONS, str(layout.disk_image), str(layout.disk)])


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
