"""Connecting a sandbox's network namespace under network FULL: the spawner's second job.

Starts pasta for the namespace and routes it, as `network` lays out. Standard
library only (it runs in the fork server's processes, `forkserver`).
"""

from __future__ import annotations

import ctypes
import os
import select
import signal

from service.sandboxes.local.holder_start import NAMESPACE_TYPES, SetupError

__all__ = ["connect_network"]

_NETWORK_WAIT_S = 10.0
_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)


def connect_network(init: int, network: dict[str, list[str]], user_namespace: bool) -> int:
    """Connect the sandbox's network namespace to the internet (network FULL,
    `network`): start pasta, wait until its interface exists, then route the
    namespace. Returns pasta's pid; it dies with this process."""
    target = ["--netns", f"/proc/{init}/ns/net"]
    if user_namespace:
        target += ["--userns", f"/proc/{init}/ns/user"]
    fifo = network["pasta"][-1]
    ready = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        pasta = _start_child([*network["pasta"], *target])
        pidfd = os.pidfd_open(pasta)
        try:
            readable, _, _ = select.select([ready, pidfd], [], [], _NETWORK_WAIT_S)
        finally:
            os.close(pidfd)
        if ready not in readable:
            os.kill(pasta, signal.SIGKILL)
            log = network["pasta"][network["pasta"].index("--log-file") + 1]
            raise SetupError(f"pasta did not connect the sandbox: {_tail(log)}")
    finally:
        os.close(ready)
    _route(init, network, user_namespace)
    return pasta


def _start_child(argv: list[str]) -> int:
    """Fork and exec `argv` with nothing of ours; it gets SIGKILL when we die."""
    pid = os.fork()
    if pid == 0:
        try:
            _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            null = os.open(os.devnull, os.O_RDWR)
            for target in (0, 1, 2):
                os.dup2(null, target)
            os.execve(argv[0], argv, {})
        finally:
            os._exit(127)
    return pid


def _route(init: int, network: dict[str, list[str]], user_namespace: bool) -> None:
    """Run `ip -batch` inside the sandbox's network namespace with the routes; its
    stderr (our pipe) says why, should it fail."""
    names = (["user"] if user_namespace else []) + ["net"]
    fds = [(os.open(f"/proc/{init}/ns/{n}", os.O_RDONLY | os.O_CLOEXEC), n) for n in names]
    script_read, script_write = os.pipe()
    errors_read, errors_write = os.pipe()
    os.write(script_write, "".join(f"{line}\n" for line in network["routes"]).encode())
    os.close(script_write)
    pid = os.fork()
    if pid == 0:
        try:
            for fd, name in fds:
                if _libc.setns(fd, NAMESPACE_TYPES[name]) != 0:
                    os.write(errors_write, f"cannot enter the {name} namespace\n".encode())
                    os._exit(126)
            os.dup2(errors_write, 2)
            os.dup2(script_read, 0)
            os.execve(network["ip"][0], network["ip"], {})
        finally:
            os._exit(127)
    for fd in (script_read, errors_write, *(fd for fd, _ in fds)):
        os.close(fd)
    try:
        errors = os.read(errors_read, 65536).decode(errors="replace").strip()
    finally:
        os.close(errors_read)
    status = os.waitpid(pid, 0)[1]
    if status != 0:
        raise SetupError(f"could not route the sandbox's network: {errors or status}")


def _tail(path: str) -> str:
    try:
        with open(path, "rb") as log:
            return log.read()[-2000:].decode(errors="replace").strip() or "no error logged"
    except OSError as exc:
        return f"no log ({exc.strerror})"
