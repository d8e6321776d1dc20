"""Connecting a sandbox's network namespace under network FULL: the spawner's second job.

Starts pasta for the namespace and routes it, as `network` lays out: at creation
(`connect_network`, in the spawner), or later for a sandbox made under NONE whose
verifier runs under FULL (`attach_network`, in the `network_attach` program). Standard
library only (it runs in the fork server's processes, `forkserver`, and in
`network_attach`).
"""

from __future__ import annotations

import ctypes
import os
import signal

from service.sandboxes.local.descriptors import readable
from service.sandboxes.local.holder_start import NAMESPACE_TYPES, SetupError

__all__ = ["attach_network", "connect_network"]

_NETWORK_WAIT_S = 10.0
_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)


def connect_network(init: int, network: dict[str, list[str]]) -> int:
    """Connect the sandbox's network namespace to the internet (network FULL,
    `network`): start pasta, wait until its interface exists, then route the
    namespace. Returns pasta's pid; it dies with this process. Called by the spawner,
    in the user namespace that owns the sandbox's network namespace."""
    pasta = _start_pasta(network, ["--netns", f"/proc/{init}/ns/net"])
    fds = _open_namespaces(init, False)
    try:
        _route(fds, network)
    finally:
        for fd in fds.values():
            os.close(fd)
    return pasta


def attach_network(
    init_pidfd: int, network: dict[str, list[str]], user_namespace: bool
) -> tuple[int, dict[str, int]]:
    """Connect the namespaces of a live sandbox, named by a pidfd of its init, as
    `connect_network` does at creation. Returns pasta's pid (it dies with this process)
    and the namespaces' descriptors, which pasta inherits and names by path.

    The namespaces are opened by pid, then init is checked alive: had it died and its
    pid been reused, pasta would otherwise join (and route) another process's network.
    pasta, which keeps few capabilities, could not open /proc/<init>/ns of a live
    sandbox's init anyway (init holds capabilities pasta lacks: ptrace's rule).
    """
    with open(f"/proc/self/fdinfo/{init_pidfd}") as info:
        fields = dict(line.split(":", 1) for line in info if ":" in line)
    fds = _open_namespaces(int(fields["Pid"]), user_namespace)
    try:
        if readable([init_pidfd], 0):
            raise SetupError("the sandbox is gone")
        paths = {name: f"/proc/self/fd/{fd}" for name, fd in fds.items()}
        target = ["--netns", paths["net"]]
        if user_namespace:
            target += ["--userns", paths["user"]]
        pasta = _start_pasta(network, target, inherit=list(fds.values()))
        _route(fds, network)
    except BaseException:
        for fd in fds.values():
            os.close(fd)
        raise
    return pasta, fds


def _open_namespaces(init: int, user_namespace: bool) -> dict[str, int]:
    names = (["user"] if user_namespace else []) + ["net"]
    return {n: os.open(f"/proc/{init}/ns/{n}", os.O_RDONLY | os.O_CLOEXEC) for n in names}


def _start_pasta(
    network: dict[str, list[str]], target: list[str], inherit: list[int] | None = None
) -> int:
    """Start pasta for `target` (with the descriptors `inherit`) and wait until it says
    the interface exists."""
    fifo = network["pasta"][-1]
    ready = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        pasta = _start_child([*network["pasta"], *target], inherit or [])
        pidfd = os.pidfd_open(pasta)
        try:
            ready_now = readable([ready, pidfd], _NETWORK_WAIT_S)
        finally:
            os.close(pidfd)
        if ready not in ready_now:
            os.kill(pasta, signal.SIGKILL)
            log = network["pasta"][network["pasta"].index("--log-file") + 1]
            raise SetupError(f"pasta did not connect the sandbox: {_tail(log)}")
    finally:
        os.close(ready)
    return pasta


def _start_child(argv: list[str], inherit: list[int]) -> int:
    """Fork and exec `argv` with nothing of ours but `inherit`; it gets SIGKILL when we
    die."""
    pid = os.fork()
    if pid == 0:
        try:
            _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            null = os.open(os.devnull, os.O_RDWR)
            for target in (0, 1, 2):
                os.dup2(null, target)
            for fd in inherit:
                os.set_inheritable(fd, True)
            os.execve(argv[0], argv, {})
        finally:
            os._exit(127)
    return pid


def _route(namespaces: dict[str, int], network: dict[str, list[str]]) -> None:
    """Run `ip -batch` inside the sandbox's network namespace with the routes; its
    stderr (our pipe) says why, should it fail."""
    script_read, script_write = os.pipe()
    errors_read, errors_write = os.pipe()
    os.write(script_write, "".join(f"{line}\n" for line in network["routes"]).encode())
    os.close(script_write)
    pid = os.fork()
    if pid == 0:
        try:
            for name, fd in namespaces.items():  # user first, when there is one
                if _libc.setns(fd, NAMESPACE_TYPES[name]) != 0:
                    os.write(errors_write, f"cannot enter the {name} namespace\n".encode())
                    os._exit(126)
            os.dup2(errors_write, 2)
            os.dup2(script_read, 0)
            os.execve(network["ip"][0], network["ip"], {})
        finally:
            os._exit(127)
    for fd in (script_read, errors_write):
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
