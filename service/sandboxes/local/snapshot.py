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

    carried    some paths of a reclaimed sandbox (the agent's workdir), copied the same
               way into a layer of their own (`take_carried`), laid over another
               snapshot (setup's state): a FRESH verifier's sandbox sees the agent's
               workdir and nothing else of the agent's (`service.engine.verification`).
               Where an entry on the way to a path is no plain directory of the
               sandbox's writes (the agent replaced it by a link, a file or nothing),
               the path is carried as removed: nothing is followed on the host.

The copy costs one pass over what setup wrote, once per group; starting a member costs
a mount instead of a copy.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from service.sandboxes.local.bwrap import SandboxLayout
from service.sandboxes.local.overlay_start import ID_SPAN
from service.sandboxes.local.removal import remove_tree
from service.sandboxes.local.system_seal import is_opaque

__all__ = [
    "LocalSnapshot",
    "home_overlays",
    "prepare_home_overlays",
    "take_carried",
    "take_snapshot",
]

_HOME_TREES = ("home", "tmp")
"""A host-root sandbox's writable trees (`SandboxLayout.home`, `.tmp`)."""
_ROOT_TREE = "root"
"""An image sandbox's: its overlay's upper layer."""
_FORK_DIR = "fork"
_TOOL_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
_HOME_MOUNTS = {"home": "/home/user", "tmp": "/tmp"}
"""A host-root sandbox's writable trees by where they are mounted inside."""
_OPAQUE = "trusted.overlay.opaque"
"""How a root server's overlay marks a directory that hides the lower layers'."""


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


def take_carried(
    layout: SandboxLayout,
    image_id: str,
    forked: bool,
    paths: Sequence[str],
    over: LocalSnapshot | None,
    directory: Path,
    on_release: Callable[[LocalSnapshot], None],
) -> LocalSnapshot:
    """Copy `paths` (absolute, inside) of what the sandbox wrote into `directory`, as a
    layer over `over` (a snapshot of its own earlier writes: a lone rollout's setup
    state) and what its writes sit on; its commands must be reclaimed. Raises OSError
    (the directory then removed)."""
    assert layout.uid is not None, "snapshots need a server running as root"
    directory.mkdir(mode=0o700)
    try:
        for tree, source in _writable_trees(layout, image_id, forked).items():
            _mkdir_as(source, directory / tree)  # a lower layer each, even with nothing
        for path in paths:
            found = _source_of(layout, image_id, forked, path)
            if found is not None:
                tree, source, relative, complete = found
                _carry(source, relative, directory / tree, complete=complete)
                if over is not None and not complete:
                    _hide_removed(over.directory / tree, source, relative, directory / tree)
    except BaseException:
        remove_tree(directory)
        raise
    return LocalSnapshot(directory, layout.uid, image_id, on_release)


def _writable_trees(layout: SandboxLayout, image_id: str, forked: bool) -> dict[str, Path]:
    """Where on the host what the sandbox wrote is, by snapshot tree."""
    if image_id:
        return {_ROOT_TREE: layout.disk / "upper"}
    if forked:
        return {tree: layout.disk / f".{_FORK_DIR}" / tree / "upper" for tree in _HOME_TREES}
    return {tree: layout.disk / tree for tree in _HOME_TREES}


def _source_of(
    layout: SandboxLayout, image_id: str, forked: bool, path: str
) -> tuple[str, Path, PurePosixPath, bool] | None:
    """(tree, the host directory holding it, the path below it, whether that directory
    holds the whole tree rather than writes over lower layers); None: not writable."""
    inside = PurePosixPath(path)
    trees = _writable_trees(layout, image_id, forked)
    if image_id:
        return _ROOT_TREE, trees[_ROOT_TREE], inside.relative_to("/"), False
    for tree, mount in _HOME_MOUNTS.items():
        if inside.is_relative_to(mount) and inside != PurePosixPath(mount):
            return tree, trees[tree], inside.relative_to(mount), not forked
    return None


def _carry(source: Path, relative: PurePosixPath, target: Path, *, complete: bool) -> None:
    """Copy source/relative to target/relative, parents made as the source has them.

    `complete`: source holds the whole tree (a plain home), so what is missing there was
    removed; else it holds writes over lower layers, where missing means untouched."""
    here, made, opaque = source, target, complete
    for part in relative.parts[:-1]:
        here, made = here / part, made / part
        found = _lstat(here)
        if found is None and not complete:
            return  # untouched: the lower layers show it as setup left it
        if found is None or not stat.S_ISDIR(found.st_mode):
            _whiteout(target / relative)  # removed or replaced on the way: gone
            return
        opaque = opaque or is_opaque(here)
        if not made.exists():
            _mkdir_as(here, made)
    top = _lstat(source / relative)
    if top is None:
        if complete:
            _whiteout(target / relative)
        return
    _copy(source / relative, target / relative)
    if opaque and stat.S_ISDIR(top.st_mode):
        os.setxattr(target / relative, _OPAQUE, b"y", follow_symlinks=False)


def _hide_removed(earlier: Path, source: Path, relative: PurePosixPath, target: Path) -> None:
    """Whiteouts in target for what `earlier` (a copy of the same writes, taken before)
    holds below `relative` and `source` no longer does: a file setup made that the agent
    removed leaves no whiteout of overlay's own (no lower layer had it)."""
    pending = [relative]
    while pending:
        here = pending.pop()
        before, now = _lstat(earlier / here), _lstat(source / here)
        if before is None:
            continue
        if now is None:
            if _lstat(target / here) is None and _is_plain_dir(target / here.parent):
                _whiteout(target / here)
            continue
        if (
            stat.S_ISDIR(before.st_mode)
            and stat.S_ISDIR(now.st_mode)
            and not is_opaque(source / here)
        ):
            with os.scandir(earlier / here) as entries:
                pending.extend(here / entry.name for entry in entries)


def _is_plain_dir(path: Path) -> bool:
    found = _lstat(path)
    return found is not None and stat.S_ISDIR(found.st_mode)


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def _mkdir_as(model: Path, made: Path) -> None:
    found = os.lstat(model)
    made.mkdir(mode=0o700)
    os.chmod(made, stat.S_IMODE(found.st_mode))
    os.chown(made, found.st_uid, found.st_gid)


def _whiteout(path: Path) -> None:
    path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(0, 0))


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


def prepare_home_overlays(layout: SandboxLayout, layers: int = 1) -> None:
    """The directories a host-root member's overlays need (`home_overlays`): each upper
    as the tree itself is made (owner, mode), its work, and where its lowers are mounted."""
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
        for index in range(layers):
            _lower_point(layout.root / _FORK_DIR / tree, index).mkdir(mode=0o700, parents=True)


def home_overlays(layout: SandboxLayout, layers: Sequence[LocalSnapshot]) -> list[dict[str, Any]]:
    """A host-root member's home and /tmp: the snapshots' (top first), under writes of
    its own."""
    assert layout.uid is not None
    overlays = []
    for tree in _HOME_TREES:
        fork = layout.disk / f".{_FORK_DIR}" / tree
        at = layout.root / _FORK_DIR / tree
        lowers = [
            layer.lower(tree, _lower_point(at, index), layout.uid)
            for index, layer in enumerate(layers)
        ]
        overlays.append(
            {
                "target": str(layout.disk / tree),
                "upper": str(fork / "upper"),
                "work": str(fork / "work"),
                "lowers": lowers,
            }
        )
    return overlays


def image_lower(layout: SandboxLayout, snapshot: LocalSnapshot, index: int = 0) -> dict[str, Any]:
    """An image sandbox's lower layer from a snapshot (what a group's template changed
    on the image; the agent's carried workdir), the `index`th from the top."""
    assert layout.uid is not None
    at = _lower_point(layout.root / "image" / "snapshot", index)
    at.mkdir(mode=0o700, parents=True, exist_ok=True)
    return snapshot.lower(_ROOT_TREE, at, layout.uid)


def _lower_point(first: Path, index: int) -> Path:
    """Where the `index`th snapshot layer is mounted: `first`, then `first-1` ..."""
    return first if index == 0 else first.with_name(f"{first.name}-{index}")
