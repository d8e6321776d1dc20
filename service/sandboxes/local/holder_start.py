"""Starting a sandbox's holder (bwrap) and attaching to its namespaces: the spawner's first job.

Standard library only (it runs in the fork server's processes, `forkserver`).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal

from service.sandboxes.local.descriptors import readable
from service.sandboxes.local.mounts import detach, sandbox_disks

__all__ = [
    "NAMESPACE_TYPES",
    "SetupError",
    "attach",
    "await_holder",
    "default_dispositions",
    "join_cgroup",
    "leave_other_disks",
    "pin_oom_scores",
    "start_holder",
]

NAMESPACE_TYPES = {
    "user": 0x10000000,
    "mnt": 0x00020000,
    "net": 0x40000000,
    "ipc": 0x08000000,
    "uts": 0x04000000,
    "pid": 0x20000000,
}
"""/proc/<pid>/ns names -> CLONE_NEW* flags, in the order a process must enter them."""
_READY = b"ready\n"
"""What the holder prints once bwrap has put every mount in place (`bwrap.holder_argv`)."""
_CLONE_NEWNS = 0x00020000
_MS_REC = 0x4000
_MS_PRIVATE = 0x40000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
_MS_REMOUNT, _MS_BIND = 0x20, 0x1000
_libc = ctypes.CDLL(None, use_errno=True)


class SetupError(Exception):
    """The sandbox could not be made; the message says why, for the server to pass on."""


def start_holder(argv: list[str]) -> tuple[int, tuple[int, int, int]]:
    """Fork and exec bwrap; returns its pid and the read ends of its status, stdout and
    stderr pipes."""
    ends = [os.pipe() for _ in range(3)]
    status, stdout, stderr = (write for _, write in ends)
    full = [argv[0], "--json-status-fd", str(status), *argv[1:]]
    pid = os.fork()
    if pid == 0:
        try:
            os.dup2(stdout, 1)
            os.dup2(stderr, 2)
            os.set_inheritable(status, True)
            os.setsid()  # a Ctrl-C at the server's terminal is not the sandbox's
            os.execve(argv[0], full, {})  # the holder keeps nothing of ours
        finally:
            os._exit(127)
    for _, write in ends:
        os.close(write)
    read_ends = tuple(read for read, _ in ends)
    return pid, (read_ends[0], read_ends[1], read_ends[2])


def default_dispositions() -> None:
    """Commands start with no signal ignored: an exec keeps what is ignored, and Python
    ignores SIGPIPE and SIGXFSZ (so would whatever started the server). glibc's own two
    (32 and 33) are out of Python's reach, and glibc handles them itself. pasta, for one,
    will not start with them ignored. Called first by each program that starts others
    (`forkserver`, `network_attach`)."""
    for number in signal.valid_signals():
        if signal.getsignal(number) == signal.SIG_IGN:
            signal.signal(number, signal.SIG_DFL)


def leave_other_disks(own: str) -> None:
    """Move to a mount namespace of our own without any other sandbox's disk in it.

    bwrap binds the host's root recursively, then remounts every mount below it
    read-only: a sibling's disk torn down meanwhile made that fail, and a copy in this
    sandbox's namespace would pin the sibling's filesystem for as long as this sandbox
    lives. So the spawner starts bwrap from a private copy of the host's mounts holding
    only its own disk (`disk`), whichever server on this host the others belong to.
    """
    if _libc.unshare(_CLONE_NEWNS) != 0:
        raise OSError(ctypes.get_errno(), "unsharing the mount namespace")
    if _libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
        raise OSError(ctypes.get_errno(), "making the mount namespace private")
    for point in sandbox_disks():
        if point != own:
            detach(point)  # one that is gone meanwhile is as good as detached


def pin_oom_scores() -> None:
    """Make the OOM scores of the sandbox's init and holder read-only to its commands.

    Under an unprivileged server a command shares their host uid, so owns their /proc
    files: it could raise their oom_score_adj to 1000, then run the host (or the pod) out
    of memory, and the OOM killer would end the sandbox before the agent. Called in the
    sandbox's mount namespace by the spawner, which may still mount there; no command can
    unmount (it has no capability over that namespace).
    """
    flags = _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC
    for pid in (1, 2):
        for name in ("oom_score_adj", "oom_adj"):
            path = f"/proc/{pid}/{name}".encode()
            if _libc.mount(path, path, None, _MS_BIND, None) != 0:
                raise OSError(ctypes.get_errno(), f"binding {path.decode()}")
            if _libc.mount(None, path, None, flags, None) != 0:
                raise OSError(ctypes.get_errno(), f"making {path.decode()} read-only")


def join_cgroup(cgroup: str | None) -> str | None:
    """Join the sandbox's memory cgroup; why not, if it failed."""
    if cgroup is None:
        return None
    try:
        with open(os.path.join(cgroup, "cgroup.procs"), "w") as procs:
            procs.write(str(os.getpid()))
    except OSError as exc:
        return str(exc)
    return None


def _read_line(fd: int) -> bytes:
    """One line from a blocking pipe, read byte by byte so nothing after it is consumed."""
    line = bytearray()
    while not line.endswith(b"\n") and (byte := os.read(fd, 1)):
        line += byte
    return bytes(line)


def await_holder(bwrap: int, pipes: tuple[int, int, int]) -> int:
    """Wait until the holder says its mounts are in place; returns the sandbox's init pid."""
    status, stdout, stderr = pipes
    started = _read_line(status)
    if _read_line(stdout) != _READY:
        detail = os.read(stderr, 65536).decode(errors="replace").strip()
        if not detail:
            detail = f"bwrap exited with status {os.waitpid(bwrap, 0)[1]}"
        raise SetupError(f"the sandbox failed to start: {detail}")
    return int(json.loads(started)["child-pid"])


def attach(bwrap: int, init: int) -> tuple[int, list[tuple[str, int]]]:
    """A pidfd of the sandbox's init and descriptors of its namespaces, in entering order:
    all but its user namespace, which is the spawner's own (or, on a root server, the host's).

    Everything is read while the pidfd's process is alive and known to be bwrap's child:
    had init died and its pid been reused, nothing here could be another process's.
    """
    init_fd = os.pidfd_open(init)
    names = [name for name in NAMESPACE_TYPES if name != "user"]
    flags = os.O_RDONLY | os.O_CLOEXEC
    namespaces = [(name, os.open(f"/proc/{init}/ns/{name}", flags)) for name in names]
    with open(f"/proc/{init}/stat") as stat:
        parent = int(stat.read().rsplit(")", 1)[1].split()[1])
    if parent != bwrap or readable([init_fd], 0):
        for _, fd in namespaces:
            os.close(fd)
        raise SetupError("the sandbox's init exited while it was being entered")
    return init_fd, namespaces
