"""Starting a sandbox's holder (bwrap) and attaching to its namespaces: the spawner's first job.

Standard library only (it runs in the fork server's processes, `forkserver`).
"""

from __future__ import annotations

import ctypes
import errno
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
    "kill_init",
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
_PR_SET_PDEATHSIG = 1
_MS_REC = 0x4000
_MS_PRIVATE = 0x40000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
_MS_REMOUNT, _MS_BIND = 0x20, 0x1000
_libc = ctypes.CDLL(None, use_errno=True)


class SetupError(Exception):
    """The sandbox could not be made; the message says why, for the server to pass on."""


def start_holder(argv: list[str]) -> tuple[int, tuple[int, int, int]]:
    """Fork and exec bwrap; returns its pid and the read ends of its status, stdout and
    stderr pipes. bwrap gets SIGKILL when we die, from its first instruction on (its own
    `--die-with-parent` comes later)."""
    ends = [os.pipe() for _ in range(3)]
    status, stdout, stderr = (write for _, write in ends)
    full = [argv[0], "--json-status-fd", str(status), *argv[1:]]
    spawner = os.getpid()
    pid = os.fork()
    if pid == 0:
        try:
            _die_with(spawner)
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


def _die_with(parent: int) -> None:
    """Get SIGKILL when `parent` dies; exit now if it died before that was armed."""
    if _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0 or os.getppid() != parent:
        os._exit(126)


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

    Once private, the namespace gets no new mount, but a sibling's teardown still moves
    its directory aside (`reaper`: a rename, which mounts follow) and later removes the
    disk's mount point, which detaches every copy of it. A disk listed before its move is
    not at the listed path by the time it is detached: it stays, and vanishes under
    bwrap when its mount point goes. So the disks are listed again until none is left.
    """
    if _libc.unshare(_CLONE_NEWNS) != 0:
        raise OSError(ctypes.get_errno(), "unsharing the mount namespace")
    if _libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
        raise OSError(ctypes.get_errno(), "making the mount namespace private")
    others = _other_disks(own)
    while others:
        failed = {point: why for point in others if (why := detach(point)) is not None}
        left = _other_disks(own)
        stuck = left & failed.keys()  # still there, at the path a detach failed on
        if stuck:
            point = min(stuck)
            raise OSError(errno.EBUSY, f"detaching another sandbox's disk {point}: {failed[point]}")
        others = left


def _other_disks(own: str) -> set[str]:
    return {point for point in sandbox_disks() if point != own}


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


def _read_line(fd: int, server: int | None = None) -> bytes:
    """The first line of a pipe, the rest of what came with it dropped (nothing more is
    read from it). Raises SetupError should the server's socket `server` hang up
    meanwhile: the server sends nothing before the sandbox is up."""
    line = b""
    while b"\n" not in line:
        if server is not None and server in readable([fd, server], None):
            raise SetupError("the server hung up")
        chunk = os.read(fd, 4096)
        if not chunk:
            return line
        line += chunk
    return line[: line.index(b"\n") + 1]


def await_holder(bwrap: int, pipes: tuple[int, int, int], server: int) -> tuple[int, int]:
    """Wait until the holder says its mounts are in place; returns the sandbox's init pid
    and a pidfd of it (the caller's to close).

    bwrap arms the init's parent-death signal last, once its mounts are in place: until
    then, a bwrap that dies leaves the init behind for good (blocked, or holding the
    sandbox, and the spawner's mounts, in its namespaces). So the init is held by pidfd as
    soon as bwrap names it, and killed here if the sandbox fails or the server (its socket
    `server`) hangs up first; past this, the spawner kills it on its way out (`forkserver`).
    """
    status, stdout, stderr = pipes
    init = _hold_init(_read_line(status), bwrap)
    try:
        if init is None or _read_line(stdout, server) != _READY:
            detail = os.read(stderr, 65536).decode(errors="replace").strip()
            if not detail:
                detail = f"bwrap exited with status {os.waitpid(bwrap, 0)[1]}"
            raise SetupError(f"the sandbox failed to start: {detail}")
    except SetupError:
        if init is not None:
            kill_init(init[1])
            os.close(init[1])
        raise
    return init


def _hold_init(started: bytes, bwrap: int) -> tuple[int, int] | None:
    """The init bwrap reports on its status line: its pid and a pidfd, read while it is
    alive and bwrap's child or, bwrap dead, ours (the spawner is a child subreaper while
    bwrap starts), so that a reused pid is never taken for it. None without a status line
    or a live init: bwrap failed, and says why on its stderr."""
    if not started:
        return None
    init = int(json.loads(started)["child-pid"])
    try:
        init_fd = os.pidfd_open(init)
    except ProcessLookupError:
        return None
    if _parent(init) not in (bwrap, os.getpid()) or readable([init_fd], 0):
        os.close(init_fd)
        return None
    return init, init_fd


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[1])
    except OSError:
        return 0


def kill_init(init_fd: int) -> None:
    """SIGKILL the sandbox's init (if `init_fd` is a pidfd), whose end kills every process
    of its pid namespace. Under an unprivileged server the spawner's own seccomp filter
    refuses pidfd_send_signal (ENOSYS, `seccomp`): then by pid, which the pidfd says is
    still the init's."""
    if init_fd < 0:
        return
    try:
        signal.pidfd_send_signal(init_fd, signal.SIGKILL)
    except OSError as exc:
        if exc.errno != errno.ENOSYS:
            return
        with open(f"/proc/self/fdinfo/{init_fd}") as info:
            fields = dict(line.split(":", 1) for line in info if ":" in line)
        if not readable([init_fd], 0):
            os.kill(int(fields["Pid"]), signal.SIGKILL)


def attach(init: int, init_fd: int) -> list[tuple[str, int]]:
    """Descriptors of the sandbox's namespaces, in entering order: all but its user
    namespace, which is the spawner's own (or, on a root server, the host's).

    Read by pid, then the pidfd checked alive: had init died and its pid been reused,
    nothing here could be another process's.
    """
    names = [name for name in NAMESPACE_TYPES if name != "user"]
    flags = os.O_RDONLY | os.O_CLOEXEC
    namespaces = [(name, os.open(f"/proc/{init}/ns/{name}", flags)) for name in names]
    if readable([init_fd], 0):
        for _, fd in namespaces:
            os.close(fd)
        raise SetupError("the sandbox's init exited while it was being entered")
    return namespaces
