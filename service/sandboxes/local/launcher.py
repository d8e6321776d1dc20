"""The spawner's side of the command launcher (`launcher.c`), loaded through ctypes.

Standard library only: the fork server imports it (`forkserver`). `build` compiles the
source once per machine into the server's cache (`launcher_build`); without it, a spawner
forks its own Python for each command.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Sequence

__all__ = ["Launcher"]


class _Launch(ctypes.Structure):
    """`struct launch` of `launcher.c`, field for field."""

    _fields_ = [
        ("program", ctypes.c_char_p),
        ("argv", ctypes.POINTER(ctypes.c_char_p)),
        ("envp", ctypes.POINTER(ctypes.c_char_p)),
        ("cwd", ctypes.c_char_p),
        ("stdio", ctypes.POINTER(ctypes.c_int)),
        ("stdio_count", ctypes.c_int),
        ("limit_resources", ctypes.POINTER(ctypes.c_int)),
        ("limit_values", ctypes.POINTER(ctypes.c_ulonglong)),
        ("limit_count", ctypes.c_int),
        ("uid", ctypes.c_longlong),
        ("groups", ctypes.POINTER(ctypes.c_uint)),
        ("group_count", ctypes.c_int),
        ("user_namespace", ctypes.c_int),
        ("filter", ctypes.c_void_p),
    ]


_STACK_BYTES = 32 * 1024
"""The child's stack until it execs: a few frames of system calls and a message line."""


def _strings(values: Sequence[bytes]) -> ctypes.Array[ctypes.c_char_p]:
    return (ctypes.c_char_p * (len(values) + 1))(*values, None)


class Launcher:
    """`rollout_launch` of the compiled launcher at `path`.

    The launcher does not wait for a command's exec, so what its child reads (the spec, its
    strings, its stack) is kept here until the command has exited (`exited`)."""

    def __init__(self, path: str) -> None:
        self._launch = ctypes.CDLL(path).rollout_launch
        self._launch.argtypes = [ctypes.POINTER(_Launch), ctypes.c_void_p, ctypes.c_size_t]
        self._launch.restype = ctypes.c_long
        self._alive: dict[int, tuple[object, ...]] = {}

    def launch(
        self,
        program: str,
        argv: Sequence[str],
        env: dict[str, str],
        cwd: str,
        stdio: Sequence[int],
        limits: Sequence[tuple[int, int]],
        *,
        uid: int | None,
        groups: Sequence[int],
        user_namespace: int,
        seccomp_program: int | None,
    ) -> int:
        """Start the command; its host pid. A failure before exec is the command's own
        (exit 127, saying why on its stderr); one to create it at all is OSError."""
        strings = [os.fsencode(value) for value in (program, cwd, *argv)]
        variables = [os.fsencode(f"{name}={value}") for name, value in env.items()]
        arguments, environment = _strings(strings[2:]), _strings(variables)
        spec = _Launch(
            strings[0],
            arguments,
            environment,
            strings[1],
            (ctypes.c_int * len(stdio))(*stdio),
            len(stdio),
            (ctypes.c_int * len(limits))(*(limit for limit, _ in limits)),
            (ctypes.c_ulonglong * len(limits))(*(value for _, value in limits)),
            len(limits),
            -1 if uid is None else uid,
            (ctypes.c_uint * len(groups))(*groups),
            len(groups),
            user_namespace,
            seccomp_program,
        )
        stack = ctypes.create_string_buffer(_STACK_BYTES)
        pid = int(self._launch(ctypes.byref(spec), stack, _STACK_BYTES))
        if pid < 0:
            raise OSError(-pid, f"starting {argv[0]}: {os.strerror(-pid)}")
        self._alive[pid] = (spec, stack, strings, variables, arguments, environment)
        return pid

    def exited(self, pid: int) -> None:
        """Command `pid` has exited: what its child read may go."""
        self._alive.pop(pid, None)
