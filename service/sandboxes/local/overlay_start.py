"""The overlays a local sandbox's spawner mounts before bwrap starts (`forkserver`).

An image sandbox's root:

    user namespace   uid and gid 0..ID_SPAN-1 inside -> the sandbox's own host block
                     (`local_image.UidBlocks`): root inside, never root outside
    lower            the image's rootfs (the store's, shared by every sandbox, never
                     written), bound read-only and id-mapped through that namespace, so
                     its root-owned files are the sandbox's root's
    root             overlayfs: the lowers + upper/work on the sandbox's own disk, which
                     bounds what it writes (`disk_mb`); bwrap binds it as /

A group member's (`snapshot`) has one lower more, on top: what its group's template
sandbox wrote, frozen, id-mapped from the template's ids to the member's own. On the
host's root a member's home and /tmp are such overlays, with that one lower each.

An unprivileged server's image sandbox (`enter_own_user_namespace`) has none of that: its
spawner makes a user namespace mapping only its own uid (as root inside) and a mount
namespace it owns, and mounts the overlay there (Linux 5.11+), the lower as it is on disk
(no id-mapped mount: that needs root over the image's filesystem): the server's own copy of
the image (`service.images.owned`), whose files are all the server's, so root's there.
Commands enter a user namespace nested in that one, mapping the same single id: root's
capabilities there cover the sandbox's files, and none of its namespaces (the outer one
owns them all), as on a root server.

Every mount lives in the spawner's private mount namespace only (`leave_other_disks` made
it): the host never sees them, and they vanish with the sandbox's namespaces on every
path, a crash of the server included; nothing is left to unmount.

Standard library only, with `service.user_namespace` (it runs in the fork server's processes).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from service.sandboxes.local.user_counts import limit_user_counts
from service.user_namespace import enter_own_user_namespace

__all__ = [
    "ID_SPAN",
    "UserNamespaces",
    "enter_own_user_namespace",
    "make_user_namespace",
    "mount_overlay",
]

ID_SPAN = 65536
"""Ids mapped inside an image sandbox: 0 (root) up to 65535 (nogroup, apt's `_apt` ...)."""
_CLONE_NEWUSER = 0x10000000
_SYS_OPEN_TREE, _SYS_MOVE_MOUNT, _SYS_MOUNT_SETATTR = 428, 429, 442
_OPEN_TREE_CLONE, _OPEN_TREE_CLOEXEC = 1, 0o2000000
_AT_FDCWD, _AT_EMPTY_PATH, _AT_RECURSIVE = -100, 0x1000, 0x8000
_MOVE_MOUNT_F_EMPTY_PATH = 4
_MOUNT_ATTR_RDONLY, _MOUNT_ATTR_NOSUID, _MOUNT_ATTR_NODEV = 0x1, 0x2, 0x4
_MOUNT_ATTR_IDMAP = 0x100000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV = 0x1, 0x2, 0x4
_OPTION_UNSAFE = frozenset(",:\\\n")
"""What overlay's mount options cannot carry in a path."""
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


def _check(result: int, what: str) -> int:
    if result < 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}")
    return result


def make_user_namespace(inside: int, outside: int, span: int, shares: Mapping[str, int]) -> int:
    """A user namespace mapping ids inside..inside+span-1 to outside.. on the host; its
    descriptor.

    A child makes it, sets its limits to `shares` (`user_counts`) and waits; we (root)
    write its maps and keep a descriptor, then let the child go. Nothing runs in it until
    a command enters it (or a mount is id-mapped through it).
    """
    ready_read, ready_write = os.pipe()
    go_read, go_write = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            os.close(ready_read)
            os.close(go_write)
            code = 0 if _libc.unshare(_CLONE_NEWUSER) == 0 else 1
            if code == 0:
                limit_user_counts(shares)
            os.write(ready_write, bytes([code]))
            os.read(go_read, 1)
        finally:
            os._exit(0)
    os.close(ready_write)
    os.close(go_read)
    try:
        if os.read(ready_read, 1) != b"\0":
            raise OSError("could not make the sandbox's user namespace")
        for kind in ("uid_map", "gid_map"):
            with open(f"/proc/{child}/{kind}", "w") as mapping:
                mapping.write(f"{inside} {outside} {span}\n")
        return os.open(f"/proc/{child}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        os.close(ready_read)
        os.close(go_write)
        os.waitpid(child, 0)


class UserNamespaces:
    """One user namespace per id map, made at first use with the sandbox's `shares` of
    the per-user counts (`user_counts`); `close` drops those not kept."""

    def __init__(self, shares: Mapping[str, int]) -> None:
        self._shares = shares
        self._made: dict[tuple[int, int, int], int] = {}

    def get(self, mapping: Sequence[int]) -> int:
        inside, outside, span = mapping
        key = (inside, outside, span)
        if key not in self._made:
            self._made[key] = make_user_namespace(inside, outside, span, self._shares)
        return self._made[key]

    def close(self, keep: int = -1) -> None:
        for fd in self._made.values():
            if fd != keep:
                os.close(fd)
        self._made.clear()


def mount_overlay(overlay: dict[str, Any], user_namespace: Callable[[Sequence[int]], int]) -> None:
    """Mount each lower id-mapped (read-only) at its own place, then the overlay of them
    (the first on top) with its upper and work at overlay["target"].

    `overlay`: {"target", "upper", "work": paths, "lowers": [{"source", "at": paths,
    "map": [inside, outside, span]}]}: a lower's on-disk id `inside + k` is seen as the
    host's `outside + k`. A lower whose map is None is used as it is (`source`). Without
    "upper" (and "work") the overlay is read-only (a host-root sandbox's /etc).
    overlay["userxattr"] (an unprivileged server's, in its own user namespace): overlay
    keeps its marks in user.overlay.* attributes, as it must there (no trusted.*), so
    that opaque directories and renamed ones work and `system_seal` reads them.
    """
    at = [lower["at"] if lower["map"] else lower["source"] for lower in overlay["lowers"]]
    writable = "upper" in overlay
    named = [overlay["upper"], overlay["work"], *at] if writable else at
    unsafe = [path for path in named if _OPTION_UNSAFE & set(path)]
    if unsafe:
        raise OSError(f"an overlay cannot name {unsafe[0]!r} (',', ':' or '\\')")
    for lower in overlay["lowers"]:
        if lower["map"]:
            _mount_id_mapped(lower["source"], lower["at"], user_namespace(lower["map"]))
    lowers = ":".join(at)
    options = f"lowerdir={lowers}"
    if writable:
        options += f",upperdir={overlay['upper']},workdir={overlay['work']}"
    if overlay.get("userxattr"):
        options += ",userxattr"
    _check(
        _libc.mount(
            b"overlay",
            os.fsencode(overlay["target"]),
            b"overlay",
            _MS_NOSUID | _MS_NODEV | (0 if writable else _MS_RDONLY),
            options.encode(),
        ),
        f"mounting the overlay at {overlay['target']}",
    )


def _mount_id_mapped(source: str, at: str, user_namespace: int) -> None:
    tree = _check(
        _libc.syscall(
            _SYS_OPEN_TREE,
            _AT_FDCWD,
            os.fsencode(source),
            _OPEN_TREE_CLONE | _OPEN_TREE_CLOEXEC | _AT_RECURSIVE,
        ),
        f"cloning {source}",
    )
    try:
        attributes = _MountAttr(
            _MOUNT_ATTR_IDMAP | _MOUNT_ATTR_RDONLY | _MOUNT_ATTR_NOSUID | _MOUNT_ATTR_NODEV,
            0,
            0,
            user_namespace,
        )
        _check(
            _libc.syscall(
                _SYS_MOUNT_SETATTR,
                tree,
                b"",
                _AT_EMPTY_PATH | _AT_RECURSIVE,
                ctypes.byref(attributes),
                ctypes.sizeof(attributes),
            ),
            f"id-mapping {source}",
        )
        _check(
            _libc.syscall(
                _SYS_MOVE_MOUNT, tree, b"", _AT_FDCWD, os.fsencode(at), _MOVE_MOUNT_F_EMPTY_PATH
            ),
            f"mounting {source}",
        )
    finally:
        os.close(tree)
