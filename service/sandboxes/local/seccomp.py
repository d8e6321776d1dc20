"""No user namespaces (nor keyring, nor io_uring) in a local sandbox: a seccomp filter every
command inherits.

A nested user namespace (`unshare -Urm`) makes the agent uid 0 with every capability
over namespaces of its own: mounts, network configuration, and the kernel surface that
comes with them. bwrap's `--disable-userns` cannot cover it: a server running as root
runs each sandbox as a host uid of its own in the host's user namespace, where bwrap
makes none. So the spawner installs this filter on itself once it has entered the
sandbox (after no_new_privs), and every command it forks inherits it, as Docker's
default profile does:

    unshare, clone with CLONE_NEWUSER   EPERM
    clone3                              ENOSYS: its flags sit in memory a filter cannot
                                        read; glibc then falls back to clone
    keyctl, add_key, request_key        EPERM: the kernel keyring, a surface with a record
                                        of privilege escalations (CVE-2016-0728) that no
                                        agent needs; Docker's default profile refuses it
    io_uring_setup, _enter, _register   ENOSYS, so libuv, tokio and liburing fall back to
                                        epoll: its operations are not syscalls, so no
                                        filter sees them (Docker refuses it too)
    any other ABI (i386 via int 0x80,   EPERM: their syscall numbers differ and would
    x32)                                slip past the checks above
    everything else                     allowed

In an image sandbox a command is root in a user namespace of the sandbox's own
(`local.overlay_start`), where it could make namespaces of every other kind (their owner
would be that user namespace; the filter above refuses only user namespaces): each such
command adds a second filter once it is in it,

    setns; unshare, clone with any CLONE_NEW* flag   EPERM

so it stays in the namespaces bwrap made, as every command of a host sandbox does.

Under an unprivileged server every command shares the host uid of the sandbox's holder
(pid 2, `bwrap.holder_argv`) and bwrap's init (pid 1), so the kernel would let it signal
them: a dead holder ends the rollout as a sandbox failure, which is never scored. The
spawner's filter then also answers (`guard_holder`):

    kill, tkill, tgkill, rt_sigqueueinfo,   EPERM when a pid argument is 1, 2, -1 (every
    rt_tgsigqueueinfo, pidfd_open,          process) or -2 (a group 2, should the holder
    prlimit64                               ever lead one); a lowered hard RLIMIT_CPU
                                            would let the kernel SIGKILL init
    pidfd_send_signal                       ENOSYS: a /proc/2 directory is a pidfd too,
                                            and the filter cannot read which; callers (Go's
                                            os package) fall back to kill
    fcntl F_SETOWN                          EPERM for those pids: the kernel signals a
                                            file's owner (SIGIO, F_SETSIG's) on its I/O
    fcntl F_SETOWN_EX, ioctl FIOSETOWN      EPERM: the same, with the pid in memory
    and SIOCSPGRP

In an image sandbox ptrace, process_vm_writev and /proc/2/mem need no rule: root in the
command's nested user namespace lacks the holder's capabilities, which are in the outer
one (EPERM, EACCES). bwrap's init ignores every signal sent from inside its namespace
(it has no handler): refusing pid 1 guards against prlimit64 alone.

Standard library only (it runs in the fork server's processes, `forkserver`).
"""

from __future__ import annotations

import ctypes
import errno
import platform
import struct

__all__ = ["Filter", "forbid_user_namespaces", "namespace_filter"]

_CLONE_NEWUSER = 0x10000000
_CLONE_NEW_ANY = 0x7E020000
"""CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET (clone's NEWTIME bit is
the exit signal's: a time namespace needs unshare, or clone3, refused already)."""
_CLONE_NEWTIME = 0x80
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_X32_BIT = 0x40000000
# BPF opcodes: load word at absolute offset, jump if equal / greater-or-equal, and, return.
_LD_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_NR, _ARCH, _ARG0 = 0, 4, 16
"""Offsets in `struct seccomp_data` (arg0's low word, on these little-endian machines)."""
_SYSCALLS = {
    # machine: (AUDIT_ARCH_*, unshare, clone, clone3)
    "x86_64": (0xC000003E, 272, 56, 435),
    "aarch64": (0xC00000B7, 97, 220, 435),
}
_SETNS = {"x86_64": 308, "aarch64": 268}
_KEYRING = {"x86_64": (248, 249, 250), "aarch64": (217, 218, 219)}
"""add_key, request_key, keyctl."""
_IO_URING = (425, 426, 427)
"""io_uring_setup, io_uring_enter, io_uring_register (the same on both machines)."""
_ARG1 = _ARG0 + 8
_PID_CALLS = {
    # kill, tkill, tgkill, rt_sigqueueinfo, rt_tgsigqueueinfo, pidfd_open, prlimit64
    "x86_64": {
        62: (_ARG0,),
        200: (_ARG0,),
        234: (_ARG0, _ARG1),
        129: (_ARG0,),
        297: (_ARG0, _ARG1),
        434: (_ARG0,),
        302: (_ARG0,),
    },
    "aarch64": {
        129: (_ARG0,),
        130: (_ARG0,),
        131: (_ARG0, _ARG1),
        138: (_ARG0,),
        240: (_ARG0, _ARG1),
        434: (_ARG0,),
        261: (_ARG0,),
    },
}
"""Syscall number -> offsets of its pid arguments (their low word: the kernel's pid_t)."""
_PIDFD_SEND_SIGNAL = 424
_ARG2 = _ARG0 + 16
_OWNER_CALLS = {"x86_64": (72, 16), "aarch64": (25, 29)}
"""fcntl, ioctl."""
_F_SETOWN, _F_SETOWN_EX = 8, 15
_SOCKET_OWNER = (0x8901, 0x8902)
"""FIOSETOWN, SIOCSPGRP: a socket's owner, by pointer."""
_GUARDED_PIDS = (1, 2, -1, -2)
"""bwrap's init, the holder, every process, the process group 2."""


def _program(
    arch: int,
    unshare: int,
    clone: int,
    clone3: int,
    keyring: tuple[int, ...],
    guard: list[tuple[int, int, int, int]],
) -> list[tuple[int, int, int, int]]:
    """(code, jump-if-true, jump-if-false, k) instructions; jumps count from the next one.

    `guard`: the holder's (`_holder_guard`), or nothing.
    """
    eperm, enosys = _RET_ERRNO | errno.EPERM, _RET_ERRNO | errno.ENOSYS
    refused = [(number, eperm) for number in keyring] + [(n, enosys) for n in _IO_URING]
    if guard:
        refused.append((_PIDFD_SEND_SIGNAL, enosys))
    return [
        (_LD_ABS, 0, 0, _ARCH),
        (_JEQ, 1, 0, arch),
        (_RET, 0, 0, eperm),  # another ABI
        (_LD_ABS, 0, 0, _NR),
        (_JGE, 0, 1, _X32_BIT),
        (_RET, 0, 0, eperm),  # x32
        (_JEQ, 0, 1, clone3),
        (_RET, 0, 0, enosys),
        *[step for number, answer in refused for step in _refuse(number, answer)],
        *guard,
        (_JEQ, 1, 0, unshare),
        (_JEQ, 0, 3, clone),
        (_LD_ABS, 0, 0, _ARG0),
        (_JSET, 0, 1, _CLONE_NEWUSER),
        (_RET, 0, 0, eperm),
        (_RET, 0, 0, _RET_ALLOW),
    ]


def _refuse(number: int, answer: int) -> list[tuple[int, int, int, int]]:
    """Syscall `number` (already loaded) returns `answer`; any other goes on."""
    return [(_JEQ, 0, 1, number), (_RET, 0, 0, answer)]


_Step = tuple[int, int | str, int | str, int]
"""An instruction whose jumps may name a label (`_block`)."""


def _guarded(offset: int) -> list[_Step]:
    """Load the argument at `offset`; on to "deny" if it is one of _GUARDED_PIDS."""
    return [
        (_LD_ABS, 0, 0, offset),
        *((_JEQ, "deny", 0, pid & 0xFFFF_FFFF) for pid in _GUARDED_PIDS),
    ]


def _block(number: int, steps: list[_Step]) -> list[tuple[int, int, int, int]]:
    """Syscall `number` (already loaded) runs `steps`, whose jumps may name "allow" or
    "deny" (EPERM); falling off their end allows it. Any other syscall goes on."""
    body = [*steps, (_RET, 0, 0, _RET_ALLOW), (_RET, 0, 0, _RET_ERRNO | errno.EPERM)]
    where = {"allow": len(body) - 2, "deny": len(body) - 1}

    def resolve(index: int, jump: int | str) -> int:
        return where[jump] - index - 1 if isinstance(jump, str) else jump

    code = [
        (op, resolve(i, true), resolve(i, false), k) for i, (op, true, false, k) in enumerate(body)
    ]
    return [(_JEQ, 0, len(code), number), *code]


def _holder_guard(machine: str) -> list[tuple[int, int, int, int]]:
    """The unprivileged server's rules (see the module's docstring)."""
    fcntl, ioctl = _OWNER_CALLS[machine]
    owner: list[_Step] = [
        (_LD_ABS, 0, 0, _ARG1),
        (_JEQ, "deny", 0, _F_SETOWN_EX),
        (_JEQ, 0, "allow", _F_SETOWN),
        *_guarded(_ARG2),
    ]
    steps = [
        *(
            _block(number, [step for offset in args for step in _guarded(offset)])
            for number, args in _PID_CALLS[machine].items()
        ),
        _block(fcntl, owner),
        _block(ioctl, [(_LD_ABS, 0, 0, _ARG1), *((_JEQ, "deny", 0, k) for k in _SOCKET_OWNER)]),
    ]
    return [step for block in steps for step in block]


def _namespace_program(
    arch: int, setns: int, unshare: int, clone: int
) -> list[tuple[int, int, int, int]]:
    """The image sandbox's second filter (see the module's docstring)."""
    eperm = _RET_ERRNO | errno.EPERM
    return [
        (_LD_ABS, 0, 0, _ARCH),
        (_JEQ, 1, 0, arch),
        (_RET, 0, 0, eperm),
        (_LD_ABS, 0, 0, _NR),
        (_JEQ, 0, 1, setns),
        (_RET, 0, 0, eperm),
        (_JEQ, 0, 3, unshare),
        (_LD_ABS, 0, 0, _ARG0),
        (_JSET, 0, 5, _CLONE_NEW_ANY | _CLONE_NEWTIME),
        (_RET, 0, 0, eperm),
        (_JEQ, 0, 3, clone),
        (_LD_ABS, 0, 0, _ARG0),
        (_JSET, 0, 1, _CLONE_NEW_ANY),
        (_RET, 0, 0, eperm),
        (_RET, 0, 0, _RET_ALLOW),
    ]


class _Program(ctypes.Structure):
    _fields_ = [("length", ctypes.c_ushort), ("filter", ctypes.c_char_p)]


def forbid_user_namespaces(*, guard_holder: bool = False) -> None:
    """Install the filter on the calling process (no_new_privs must be set already);
    `guard_holder` when commands share the holder's host uid (an unprivileged server)."""
    arch, unshare, clone, clone3 = _arch_numbers()
    machine = platform.machine()
    guard = _holder_guard(machine) if guard_holder else []
    _install(_program(arch, unshare, clone, clone3, _KEYRING[machine], guard))


def namespace_filter() -> Filter:
    """The image sandbox's second filter, built for `Filter.install` in each command."""
    arch, unshare, clone, _ = _arch_numbers()
    return Filter(_namespace_program(arch, _SETNS[platform.machine()], unshare, clone))


def _arch_numbers() -> tuple[int, int, int, int]:
    machine = platform.machine()
    if machine not in _SYSCALLS:
        raise OSError(errno.ENOSYS, f"no seccomp filter for {machine} machines")
    return _SYSCALLS[machine]


def _install(code: list[tuple[int, int, int, int]]) -> None:
    Filter(code).install()


class Filter:
    """A filter built ahead of its installation. A spawner installs one in every command it
    forks, where each page of the Python heap the child writes is copied: building it there
    (and loading libc through ctypes) cost ~0.4 ms of CPU per command; `install` is one call."""

    def __init__(self, code: list[tuple[int, int, int, int]]) -> None:
        raw = b"".join(struct.pack("=HBBI", *instruction) for instruction in code)
        self._program = _Program(len(code), raw)
        self._pointer = ctypes.byref(self._program)
        self._prctl = ctypes.CDLL(None, use_errno=True).prctl

    @property
    def address(self) -> int:
        """Of its `struct sock_fprog`, for a launcher that installs it (`launcher`)."""
        return ctypes.addressof(self._program)

    def install(self) -> None:
        """On the calling thread (no_new_privs must be set already, or CAP_SYS_ADMIN held)."""
        if self._prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, self._pointer, 0, 0) != 0:
            number = ctypes.get_errno()
            raise OSError(number, f"installing the seccomp filter: {errno.errorcode.get(number)}")
