"""Run an image tool (buildah, skopeo, cp) as root of a user namespace of its own: an
unprivileged server's image store.

    python -I rootless.py RUNTIME_DIR TOOL ARG...

The process moves into a new user namespace mapping only the caller's uid and gid (as root:
0 -> uid, 0 -> gid) and a new, private mount namespace, then execs the tool. Nothing setuid
is used (no newuidmap, no /etc/subuid range): the kernel lets any user map its own ids,
provided setgroups is denied in that namespace. buildah's chroot isolation (Debian's 1.28)
calls setgroups before every RUN step and fails there ("error setting supplemental groups
list", fixed upstream in 1.45), so a seccomp filter answers setgroups with success without
running it: the call could not have changed anything there (one group is mapped, and the
kernel denies it), and no other call is touched. `_CONTAINERS_USERNS_CONFIGURED` tells
buildah and skopeo that they run in a user namespace already, so they make no other;
XDG_RUNTIME_DIR (RUNTIME_DIR) is where they keep their run-time state as such (else under
$HOME, which a server's user may not have).

Every file the tool writes is the caller's on the host; an id other than root inside
(a `chown 42`, apt's `_apt`) has no mapping and is refused (EINVAL), which the tools
report. Standard library only (with `service.user_namespace`) and run by path, so the
interpreter has no thread when it unshares (the kernel refuses a user namespace to a
threaded process).
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
import sys

if __name__ == "__main__":  # run by path: -I leaves the project root off sys.path
    sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from service.user_namespace import enter_own_user_namespace

__all__ = ["enter", "main"]

_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 38, 22, 2
_RET_ALLOW, _RET_ERRNO = 0x7FFF0000, 0x00050000
_LD_ABS, _JEQ, _RET = 0x20, 0x15, 0x06
_NR, _ARCH = 0, 4
_SETGROUPS = {"x86_64": (0xC000003E, 116), "aarch64": (0xC00000B7, 159)}
"""machine: (AUDIT_ARCH_*, setgroups)."""

_libc = ctypes.CDLL(None, use_errno=True)


class _Program(ctypes.Structure):
    _fields_ = [("length", ctypes.c_ushort), ("filter", ctypes.c_char_p)]


def _check(result: int, what: str) -> None:
    if result != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}")


def _setgroups_succeeds() -> None:
    """setgroups of this ABI returns 0 without running; everything else runs."""
    machine = platform.machine()
    if machine not in _SETGROUPS:
        raise OSError(errno.ENOSYS, f"no seccomp filter for {machine} machines")
    arch, setgroups = _SETGROUPS[machine]
    code = [
        (_LD_ABS, 0, 0, _ARCH),
        (_JEQ, 0, 3, arch),
        (_LD_ABS, 0, 0, _NR),
        (_JEQ, 0, 1, setgroups),
        (_RET, 0, 0, _RET_ERRNO),  # errno 0: the call "succeeds"
        (_RET, 0, 0, _RET_ALLOW),
    ]
    raw = b"".join(struct.pack("=HBBI", *instruction) for instruction in code)
    program = _Program(len(code), raw)
    _check(_libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "setting no_new_privs")
    _check(
        _libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(program), 0, 0),
        "installing the seccomp filter",
    )


def enter() -> None:
    """Become root of a new user namespace (our ids only) with a private mount namespace."""
    enter_own_user_namespace()
    _setgroups_succeeds()


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: rootless.py RUNTIME_DIR TOOL ARG...", file=sys.stderr)
        return 2
    runtime_dir, argv = argv[0], argv[1:]
    try:
        enter()
    except OSError as exc:
        print(f"rootless: {exc}", file=sys.stderr)
        return 125
    os.environ["_CONTAINERS_USERNS_CONFIGURED"] = "1"
    os.environ["XDG_RUNTIME_DIR"] = runtime_dir
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        print(f"rootless: {argv[0]}: {exc}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
