"""Set up once, start many: a local sandbox's writes frozen as a layer, and the overlays
that start other sandboxes from it, copy-on-write (a group's set-up-once fork).

    snapshot   once its commands are reclaimed, what the sandbox wrote is copied out of
               its disk, as it is on disk (owners, modes, overlay whiteouts and opaque
               directories): on an image, its overlay's upper layer (everything setup
               changed anywhere on the root); on the host's root, its home and /tmp.
               `<state_dir>/snapshots/<name>/`, root's only, removed on release.
    member     its overlay gets the snapshot as a lower layer, read-only and id-mapped
               from the template's host ids to its own (`overlay_start`): on an
               image, on top of the image's rootfs; on the host's root, under its home
               and its /tmp. Its writes land in its own upper layer, on its own disk:
               no member can reach the snapshot or another member through it.

The copy costs one pass over what setup wrote, once per group; starting a member costs
a mount instead of a copy.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from service.sandboxes.local.bwrap import SandboxLayout
from service.sandboxes.local.overlay_start import ID_SPAN
from service.sandboxes.local.removal import remove_tree

__all__ = ["LocalSnapshot", "home_overlays", "prepare_home_overlays", "take_snapshot"]

_HOME_TREES = ("home", "tmp")
"""A host-root sandbox's writable trees (`SandboxLayout.home`, `.tmp`)."""
_ROOT_TREE = "root"
"""An image sandbox's: its overlay's upper layer."""
_FORK_DIR = "fork"
_TOOL_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True, eq=False)
class LocalSnapshot:
    """A frozen layer of a local sandbox; matches `base.Snapshot`."""

    directory: Path
    first_id: int
    """The template's host id (on an image, the first of its block): the layer's owners."""
    image_id: str
    """The image it was taken on; "" on the host's root."""
    on_release: Callable[[LocalSnapshot], None] = field(repr=False)

    def lower(self, tree: str, at: Path, first_id: int) -> dict[str, Any]:
        """The snapshot's `tree` as an overlay's lower layer, mounted at `at`, its owners
        seen as the sandbox's own ids from `first_id`."""
        span = ID_SPAN if self.image_id else 1
        source = str(self.directory / tree)
        return {"source": source, "at": str(at), "map": [self.first_id, first_id, span]}

    async def release(self) -> None:
        """Remove the layer; every sandbox started from it must be gone."""
        self.on_release(self)
        await asyncio.to_thread(remove_tree, self.directory)


def take_snapshot(
    layout: SandboxLayout,
    image_id: str,
    directory: Path,
    on_release: Callable[[LocalSnapshot], None],
) -> LocalSnapshot:
    """Copy what the sandbox wrote into `directory` (made here); its commands must be
    reclaimed. Raises OSError (the directory then removed)."""
    assert layout.uid is not None, "snapshots need a server running as root"
    trees = (
        {_ROOT_TREE: layout.disk / "upper"}
        if image_id
        else {tree: layout.disk / tree for tree in _HOME_TREES}
    )
    directory.mkdir(mode=0o700)
    try:
        for tree, source in trees.items():
            _copy(source, directory / tree)
    except BaseException:
        remove_tree(directory)
        raise
    return LocalSnapshot(directory, layout.uid, image_id, on_release)


def _copy(source: Path, target: Path) -> None:
    """`cp -a`: owners, modes, times, links, device nodes (whiteouts) and extended
    attributes (overlay's opaque marks) kept; reflinked where the filesystem can."""
    program = shutil.which("cp", path=_TOOL_PATH)
    if program is None:
        raise OSError("cp is missing (Debian/Ubuntu: apt-get install coreutils)")
    argv = [program, "-a", "--reflink=auto", "--", str(source), str(target)]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise OSError(f"copying {source.name} failed: {done.stderr.strip()[-300:]}")


def prepare_home_overlays(layout: SandboxLayout) -> None:
    """The directories a host-root member's overlays need (`home_overlays`): each upper
    as the tree itself is made (owner, mode), its work, and where its lower is mounted."""
    assert layout.uid is not None
    for tree in _HOME_TREES:
        made = layout.disk / tree
        fork = layout.disk / f".{_FORK_DIR}" / tree
        fork.mkdir(mode=0o700, parents=True)
        upper, work = fork / "upper", fork / "work"
        upper.mkdir()
        found = os.stat(made)
        os.chmod(upper, found.st_mode & 0o7777)
        os.chown(upper, found.st_uid, found.st_gid)
        work.mkdir(mode=0o700)
        (layout.root / _FORK_DIR / tree).mkdir(mode=0o700, parents=True)


def home_overlays(layout: SandboxLayout, snapshot: LocalSnapshot) -> list[dict[str, Any]]:
    """A host-root member's home and /tmp: the snapshot's, under writes of its own."""
    assert layout.uid is not None
    overlays = []
    for tree in _HOME_TREES:
        fork = layout.disk / f".{_FORK_DIR}" / tree
        at = layout.root / _FORK_DIR / tree
        overlays.append(
            {
                "target": str(layout.disk / tree),
                "upper": str(fork / "upper"),
                "work": str(fork / "work"),
                "lowers": [snapshot.lower(tree, at, layout.uid)],
            }
        )
    return overlays


def image_lower(layout: SandboxLayout, snapshot: LocalSnapshot) -> dict[str, Any]:
    """An image member's top lower layer: what the template changed on the image."""
    assert layout.uid is not None
    at = layout.root / "image" / "snapshot"
    at.mkdir(mode=0o700, parents=True, exist_ok=True)
    return snapshot.lower(_ROOT_TREE, at, layout.uid)
