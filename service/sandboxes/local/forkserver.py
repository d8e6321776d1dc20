"""The fork server of the local backend, and the spawner it forks for each sandbox.

Run as its own small process, so forking never copies the server. Starting a command
from the server costs a fork of a large multithreaded process plus a chain of execs
(nsenter, prlimit, setpriv, bash: about 8 ms here, in a VM where every exec and
copy-on-write fault is dear).
Instead, per sandbox:

1. The server asks the fork server (one per backend) for a spawner, handing it one end
   of a socket pair and the sandbox's bwrap command line. The fork server forks; the
   child is the sandbox's spawner.
2. The spawner leaves the other sandboxes' disks behind (`holder_start`) and
   starts bwrap, whose sleeping holder keeps the sandbox's namespaces alive
   (the sandbox dies with its spawner: bwrap's parent-death signals, and the spawner
   kills the sandbox's init on its way out, `holder_start.await_holder`). While bwrap
   builds them it
   joins the sandbox's memory cgroup (a migration costs a slow RCU grace period), so the
   holder stays out of it and every command is born in it. Under network FULL it
   starts pasta for the sandbox (in the cgroup too) and routes the sandbox's network
   namespace (`network`, `network_start`). It then enters the namespaces
   and gives up what no command may have: no_new_privs, an empty capability bounding
   set, no inheritable capability, no user namespace (`seccomp`); under an unprivileged
   server, whose commands share the holder's host uid, no signal to the holder or init
   (`seccomp`) and no write to their OOM scores (`holder_start.pin_oom_scores`). It stays
   root, outside the sandbox's pid namespace: no sandboxed process can name it.
3. Each command is one child of the spawner, started by the compiled launcher
   (`launcher.c`: no copy of the spawner's Python) or, on a host without a C compiler,
   by a fork of the spawner: the child leads a session of its own, sets
   the sandbox's rlimits, takes the command's supplementary group (`bwrap.command_tag`)
   and the sandbox uid (or root of the sandbox's user namespace, without CAP_SYS_RESOURCE:
   `user_counts`), and execs bash in WORKDIR. The spawner reports the host pid
   and, later, how the command ended; it keeps the exited command unreaped (a zombie
   pins its pid) until the server is done with it, so a tree kill never hits a reused pid.
   The server says so with its next command (reaped before that one is forked), or on its
   own half a second later (`spawner.Spawner.release`).

It runs as `python -S -E -s -m service.sandboxes.local.forkserver FD [LAUNCHER]` from the
project root, importing the standard library and its siblings `wire` (the messages),
`launcher`,
`holder_start`, `network_start`, `overlay_start`, `mounts`, `seccomp` and `user_counts`, and
`service.user_namespace` (standard library only too), nothing else.
The spawner exits when the server closes its socket, even while bwrap builds the
sandbox (`holder_start.await_holder`); the fork server likewise.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import selectors
import signal
import socket
import sys
from typing import Any, NamedTuple, NoReturn

from service.sandboxes.local.holder_start import (
    NAMESPACE_TYPES,
    SetupError,
    attach,
    await_holder,
    default_dispositions,
    join_cgroup,
    kill_init,
    leave_other_disks,
    pin_oom_scores,
    start_holder,
)
from service.sandboxes.local.launcher import Launcher
from service.sandboxes.local.network_start import connect_network
from service.sandboxes.local.overlay_start import (
    ID_SPAN,
    UserNamespaces,
    enter_own_user_namespace,
    mount_overlay,
)
from service.sandboxes.local.seccomp import Filter, forbid_user_namespaces, namespace_filter
from service.sandboxes.local.user_counts import limit_user_counts
from service.sandboxes.local.wire import receive, send

__all__: list[str] = []  # a program, run by `local_spawner.ForkServer`

_CLONE_NEWUSER = 0x10000000
_PR_CAPBSET_DROP = 24
_CAP_SYS_RESOURCE = 24
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_CHILD_SUBREAPER = 36
_CAP_VERSION_3 = 0x20080522
_RLIMITS = {
    "data": resource.RLIMIT_DATA,
    "cpu": resource.RLIMIT_CPU,
    "nproc": resource.RLIMIT_NPROC,
    "fsize": resource.RLIMIT_FSIZE,
    "sigpending": resource.RLIMIT_SIGPENDING,
    "msgqueue": resource.RLIMIT_MSGQUEUE,
}


class _Capabilities(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _last_capability() -> int:
    with open("/proc/sys/kernel/cap_last_cap") as file:
        return int(file.read())


def _subreaper(flag: int) -> None:
    _check(_libc.prctl(_PR_SET_CHILD_SUBREAPER, flag, 0, 0, 0), "setting the child subreaper")


def _give_up_privileges(last_cap: int) -> None:
    """What no command may have, dropped once for all of them (the spawner never execs)."""
    _check(_libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    for cap in range(last_cap + 1):
        _check(_libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0), "dropping the bounding set")
    header = _CapHeader(_CAP_VERSION_3, 0)
    caps = (_Capabilities * 2)()
    _check(_libc.capget(ctypes.byref(header), caps), "capget")
    for half in caps:
        half.inheritable = 0
    _check(_libc.capset(ctypes.byref(header), caps), "capset")


class _Spawner:
    """One sandbox's spawner: starts its holder, enters it, then forks its commands."""

    def __init__(self, sock: socket.socket, last_cap: int, launcher: Launcher | None) -> None:
        self._sock = sock
        self._last_cap = last_cap
        self._launcher = launcher
        self._selector = selectors.DefaultSelector()
        self._selector.register(sock, selectors.EVENT_READ)
        self._uid: int | None = None
        self._user_namespace = -1
        """An image sandbox's (`overlay_start`): each command enters it as root."""
        self._namespace_filter: Filter | None = None
        """What each command entering that user namespace installs (`seccomp`)."""
        self._stdin = -1
        self._init = -1
        """A pidfd of the sandbox's init, killed on the way out (`_exit`)."""

    def set_up(self, setup: dict[str, Any]) -> None:
        """Make the sandbox, then reply with pidfds of this spawner and the sandbox's init."""
        own = os.pidfd_open(os.getpid())
        bwrap: int | None = None
        try:
            if setup["disk"] is not None:
                leave_other_disks(setup["disk"])
            if setup["own_user_namespace"]:
                enter_own_user_namespace()
                limit_user_counts(setup["user_counts"])
            self._mount_overlays(setup)
            _subreaper(1)  # an init orphaned while bwrap starts is ours (`await_holder`)
            bwrap, pipes = start_holder(setup["holder"])
            try:
                unjoined = join_cgroup(setup["cgroup"])
                init, self._init = await_holder(bwrap, pipes, self._sock.fileno())
            finally:
                for fd in pipes:
                    os.close(fd)
            _subreaper(0)  # past this, nothing here would reap one
            if setup["network"] is not None:
                pasta = connect_network(init, setup["network"])
                self._selector.register(os.pidfd_open(pasta), selectors.EVENT_READ, (0, pasta))
            self._enter(attach(init, self._init), setup)
        except (OSError, SetupError, ValueError, KeyError) as exc:
            kill_init(self._init)
            if bwrap is not None:
                os.kill(bwrap, signal.SIGKILL)
            send(self._sock, {"id": 0, "error": str(exc)}, [own])
            os._exit(1)
        self._selector.register(os.pidfd_open(bwrap), selectors.EVENT_READ, (0, bwrap))
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # a server gone meanwhile: exit below
        try:
            send(self._sock, {"id": 0, "unjoined": unjoined}, [own, self._init])
        except OSError:
            self._exit(1)
        finally:
            signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        os.close(own)

    def _exit(self, code: int) -> NoReturn:
        """Exit, killing the sandbox: bwrap's parent-death signals follow, but the init's
        may not be armed yet (`holder_start.await_holder`), the server gone right after
        it learnt the sandbox was up."""
        kill_init(self._init)
        os._exit(code)

    def _mount_overlays(self, setup: dict[str, Any]) -> None:
        """An image sandbox's root, a group member's layers (`overlay_start`), and the
        user namespace its commands enter as root: mapping its id block, or (unprivileged)
        nested in the spawner's own and mapping only its root, so that root's capabilities
        cover the sandbox's files but none of its namespaces (the spawner's own own them)."""
        namespaces = UserNamespaces(setup["user_counts"])
        try:
            for overlay in setup["overlays"]:
                mount_overlay(overlay, namespaces.get)
            if setup["image"]:
                self._user_namespace = namespaces.get((0, setup["uid"], ID_SPAN))
            elif setup["own_user_namespace"]:
                self._user_namespace = namespaces.get((0, 0, 1))
        finally:
            namespaces.close(keep=self._user_namespace)
        if self._user_namespace >= 0:
            self._namespace_filter = namespace_filter()

    def _enter(self, namespaces: list[tuple[str, int]], setup: dict[str, Any]) -> None:
        try:
            for name, fd in namespaces:
                _check(_libc.setns(fd, NAMESPACE_TYPES[name]), f"entering the {name} namespace")
        finally:
            for _, fd in namespaces:
                os.close(fd)
        self._uid = setup["uid"]
        if self._uid is None:  # commands share the holder's uid (an unprivileged server)
            pin_oom_scores()
        _give_up_privileges(self._last_cap)
        forbid_user_namespaces(guard_holder=self._uid is None)  # commands share its uid
        self._stdin = os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)

    def serve(self) -> None:
        while True:
            for key, _ in self._selector.select():
                if key.fileobj is self._sock:
                    message, fds = receive(self._sock)
                    if message is None:
                        self._exit(0)
                    self._handle(message, fds)
                else:
                    self._reap(key)

    def _handle(self, message: dict[str, Any], fds: list[int]) -> None:
        """A command to run (`op` run), after reaping the ended ones the server released,
        which come with any message (`op` release alone when no command followed soon)."""
        for pid in message["release"]:
            with contextlib.suppress(ChildProcessError):  # nothing left to reap
                os.waitpid(pid, 0)
        try:
            if message["op"] == "run":
                pid = self._run(message, fds)
                send(self._sock, {"id": message["id"], "pid": pid})
        except OSError as exc:
            send(self._sock, {"id": message["id"], "error": str(exc), "errno": exc.errno})
        finally:
            for fd in fds:
                os.close(fd)

    def _run(self, message: dict[str, Any], fds: list[int]) -> int:
        argv, env, cwd = message["argv"], message["env"], message["cwd"]
        program = _find_program(argv[0], env.get("PATH", os.defpath))
        groups = message["groups"]
        limits = [(_RLIMITS[name], value) for name, value in message["rlimits"].items()]
        stdio = (self._stdin, *fds)
        identity = _Identity(self._uid, groups, self._user_namespace, self._namespace_filter)
        if self._launcher is not None:
            installed = identity.namespace_filter
            pid = self._launcher.launch(
                program,
                argv,
                env,
                cwd,
                stdio,
                limits,
                uid=identity.uid,
                groups=groups,
                user_namespace=identity.user_namespace,
                seccomp_program=None if installed is None else installed.address,
            )
        else:
            pid = os.fork()
            if pid == 0:
                _become_command(program, argv, env, cwd, stdio, limits, identity)
        self._selector.register(os.pidfd_open(pid), selectors.EVENT_READ, (message["id"], pid))
        return pid

    def _reap(self, key: selectors.SelectorKey) -> None:
        """A child exited. A command's exit is reported, and it stays unreaped until the
        server releases it; bwrap (id 0), whose sandbox is gone, is reaped at once."""
        run_id, pid = key.data
        self._selector.unregister(key.fileobj)
        os.close(key.fd)
        if run_id == 0:
            os.waitpid(pid, 0)
            return
        if self._launcher is not None:
            self._launcher.exited(pid)
        status = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
        if status is None:
            raise ChildProcessError(pid)
        code = status.si_status if status.si_code == os.CLD_EXITED else -status.si_status
        send(self._sock, {"id": run_id, "exit": code})


def _find_program(name: str, search_path: str) -> str:
    for directory in search_path.split(":"):
        candidate = os.path.join(directory, name)
        if directory.startswith("/") and os.access(candidate, os.X_OK):
            return candidate
    return name  # exec fails in the child, which says so on its stderr


class _Identity(NamedTuple):
    """Who a command runs as: a host uid with its tag group, root in an image sandbox's
    user namespace (entered when `user_namespace` >= 0), or the server's own (uid None).
    Root in an unprivileged server's image sandbox has uid None too: its namespaces deny
    setgroups (`overlay_start.enter_own_user_namespace`), so the groups stay the server's."""

    uid: int | None
    groups: list[int]
    user_namespace: int
    namespace_filter: Filter | None
    """Installed once in the user namespace (`seccomp.namespace_filter`)."""


def _become_command(
    program: str,
    argv: list[str],
    env: dict[str, str],
    cwd: str,
    stdio: tuple[int, ...],
    limits: list[tuple[int, int]],
    identity: _Identity,
) -> None:
    """In the forked child: become the command, or exit 127 saying why on its stderr."""
    try:
        os.setsid()
        for target, fd in enumerate(stdio):
            os.dup2(fd, target)
        for limit, value in limits:  # before privileges drop: raising a hard limit is root's
            resource.setrlimit(limit, (value, value))
        if identity.user_namespace >= 0:
            _check(_libc.setns(identity.user_namespace, _CLONE_NEWUSER), "entering the userns")
            (identity.namespace_filter or namespace_filter()).install()
            if identity.uid is not None:
                os.setgroups([])
            os.setresgid(0, 0, 0)
            os.setresuid(0, 0, 0)
            # Root there may not raise the namespace's share of the per-user counts
            # (`user_counts`): out of the bounding set, exec leaves it out.
            _check(_libc.prctl(_PR_CAPBSET_DROP, _CAP_SYS_RESOURCE, 0, 0, 0), "CAP_SYS_RESOURCE")
        elif identity.uid is not None:
            os.setgroups(identity.groups)
            os.setresgid(identity.uid, identity.uid, identity.uid)
            os.setresuid(identity.uid, identity.uid, identity.uid)
        os.chdir(cwd)
        os.execve(program, argv, env)
    except BaseException as exc:  # noqa: BLE001 - nothing may escape a forked child
        os.write(2, f"rollout sandbox: cannot start {argv[0]}: {exc}\n".encode(errors="replace"))
    finally:
        os._exit(127)


def _serve_forks(sock: socket.socket, launcher: Launcher | None) -> None:
    """The fork server: a spawner per request, until the server closes the socket."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # spawners reap themselves
    last_cap = _last_capability()
    while True:
        setup, fds = receive(sock)
        if setup is None:
            return
        if os.fork() == 0:
            try:
                sock.close()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # a spawner waits for children
                spawner = _Spawner(socket.socket(fileno=fds[0]), last_cap, launcher)
                spawner.set_up(setup)
                spawner.serve()
            finally:
                os._exit(1)  # never back into the fork server's loop
        for fd in fds:
            os.close(fd)


def _load_launcher(path: str | None) -> Launcher | None:
    """The compiled launcher, or None (commands fork this Python) if it cannot be loaded."""
    if path is None:
        return None
    try:
        return Launcher(path)
    except OSError as exc:
        print(f"rollout fork server: commands fork instead of {path}: {exc}", file=sys.stderr)
        return None


if __name__ == "__main__":
    default_dispositions()
    _serve_forks(
        socket.socket(fileno=int(sys.argv[1])),
        _load_launcher(sys.argv[2] if len(sys.argv) > 2 else None),
    )
