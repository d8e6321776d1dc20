"""An image's root filesystem copied to be owned by the running user: an unprivileged server's.

The store's unpacked rootfs belongs to a root (its files to uid 0 and the image's other
ids). A server that is not root maps only its own uid into a sandbox's user namespace, so
there those files would be nobody's and read-only to the sandbox's root. Copied once, every
file is the server's, which the namespace shows as root's: the sandbox's root may change any
of them (through its overlay, never in the copy), as on a root server. What is lost: the
image's other owners (`_apt`, `man`, ...: all root now), device nodes (bwrap makes /dev),
and the content of what the server cannot read (made empty, with its mode: /etc/shadow,
/root, lock files and the like in the Debian base). One file is added where the image has
apt: `APT_CONFIG`, running apt's downloads as root, since its `_apt` cannot be switched
to where only root is mapped (setgroups is denied there too); so `apt-get install` works.

    <directory>/<image id>/rootfs/       the copy
    <directory>/<image id>/image.json    its ImageConfig, written last: present means complete
"""

from __future__ import annotations

import os
import shutil
import stat
import uuid
from pathlib import Path

from service.images.models import Image
from service.images.rootfs import CONFIG_FILE, ROOTFS_DIR, TMP_PREFIX, read_config

__all__ = ["APT_CONFIG", "owned_copy"]

APT_CONFIG = "etc/apt/apt.conf.d/99rollout-unprivileged"


def owned_copy(image: Image, directory: Path) -> Image:
    """`image` with its rootfs copied under `directory` (made now unless complete); copies
    of other images there are removed (the base changed). Blocking."""
    final = directory / image.id
    if read_config(final) is None:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        scratch = directory / f"{TMP_PREFIX}{image.id}-{uuid.uuid4().hex[:8]}"
        scratch.mkdir()
        try:
            _copy_tree(image.rootfs, scratch / ROOTFS_DIR)
            _add_apt_config(scratch / ROOTFS_DIR)
            (scratch / CONFIG_FILE).write_text(image.config.model_dump_json(indent=2))
            shutil.rmtree(final, ignore_errors=True)
            scratch.rename(final)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    for entry in directory.iterdir():
        if entry.name != image.id and not entry.name.startswith(TMP_PREFIX):
            shutil.rmtree(entry, ignore_errors=True)
    return image.model_copy(update={"rootfs": final / ROOTFS_DIR})


def _add_apt_config(rootfs: Path) -> None:
    """Write APT_CONFIG if the image has its directory, through no link of the image's."""
    path = rootfs / APT_CONFIG
    parents = [rootfs / parent for parent in list(Path(APT_CONFIG).parents)[-2::-1]]
    if all(parent.is_dir() and not parent.is_symlink() for parent in parents):
        with open(path, "x") as config:
            config.write('APT::Sandbox::User "root";\n')


def _copy_tree(source: Path, target: Path) -> None:
    """Copy directories (an unreadable one made empty), files (hard links kept), links and
    fifos; directories' modes set last, bottom up, so that a read-only one is filled first
    (each keeps its owner's write and search, so the server can remove the copy)."""
    linked: dict[tuple[int, int], str] = {}
    modes = [(str(target), stat.S_IMODE(os.lstat(source).st_mode))]
    os.mkdir(target, 0o700)
    for top, directories, files in os.walk(source):
        into = os.path.join(target, os.path.relpath(top, source))
        for name in directories:
            found = os.lstat(os.path.join(top, name))
            if stat.S_ISDIR(found.st_mode):  # else a link to one, copied below
                os.mkdir(os.path.join(into, name), 0o700)
                modes.append((os.path.join(into, name), stat.S_IMODE(found.st_mode)))
        for name in [*directories, *files]:
            _copy_entry(os.path.join(top, name), os.path.join(into, name), linked)
    for path, mode in reversed(modes):
        os.chmod(path, mode | stat.S_IWUSR | stat.S_IXUSR)


def _copy_entry(path: str, copy: str, linked: dict[tuple[int, int], str]) -> None:
    """One entry but a directory (made by `_copy_tree`); a device node is left out."""
    found = os.lstat(path)
    mode = stat.S_IMODE(found.st_mode)
    if stat.S_ISLNK(found.st_mode):
        os.symlink(os.readlink(path), copy)
    elif stat.S_ISFIFO(found.st_mode):
        os.mkfifo(copy, mode)
    elif stat.S_ISREG(found.st_mode):
        key = (found.st_dev, found.st_ino)
        if found.st_nlink > 1 and key in linked:
            os.link(linked[key], copy)
            return
        try:
            shutil.copy2(path, copy, follow_symlinks=False)
        except PermissionError:  # unreadable to us: its place and mode, empty
            os.close(os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            os.chmod(copy, mode)
        linked[key] = copy
