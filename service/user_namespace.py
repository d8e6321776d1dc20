"""Become root of a user namespace of one's own, without privilege: the kernel lets any user
map its own uid and gid (only those, as 0 inside) provided setgroups is denied there. An
unprivileged server's image tools (`service/images/rootless.py`) and its image sandboxes'
spawners (`service.sandboxes.local.overlay_start`) start so.

Standard library only: the fork server imports it (it has no site-packages), and
rootless.py runs by path under `python -I`.
"""

from __future__ import annotations

import ctypes
import os

__all__ = ["enter_own_user_namespace"]

_CLONE_NEWUSER, _CLONE_NEWNS = 0x10000000, 0x00020000
_MS_REC, _MS_PRIVATE = 0x4000, 0x40000
_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}")


def enter_own_user_namespace() -> None:
    """Move into a new user namespace where our uid and gid are root (the only ids it
    maps), and a new mount namespace it owns, private."""
    uid, gid = os.getuid(), os.getgid()
    _check(_libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNS), "unsharing the user namespace")
    for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
        with open(f"/proc/self/{name}", "w") as mapping:
            mapping.write(text + "\n")
    _check(_libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None), "making mounts private")
