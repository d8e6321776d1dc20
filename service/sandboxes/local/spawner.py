"""The server's side of the local backend's fork server (`forkserver`).

`ForkServer` is the one small process a backend forks spawners from; `Spawner` speaks
to one sandbox's spawner from the event loop: it learns when the sandbox is up, asks
for commands and learns their host pids and exit codes. Nothing here blocks the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import socket
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from service.errors import SandboxError
from service.host_python import host_python
from service.sandboxes.local.launcher_build import build_launcher
from service.sandboxes.local.tree import await_exits
from service.sandboxes.local.wire import MAX_MESSAGE_BYTES, receive, send

__all__ = ["Command", "ForkServer", "Spawner", "SpawnerSetup", "fork_server_argv"]

_FORK_SERVER_ARGS = ("-S", "-E", "-s", "-m", "service.sandboxes.local.forkserver")
"""Like `-I`, but with the project root (its working directory) on sys.path: it imports
its siblings (`wire`, `holder_start`, `network_start`, `mounts`,
`seccomp`, `overlay_start`), `service.user_namespace` and the standard library, nothing
from site-packages."""
_PROJECT_ROOT = Path(__file__).resolve().parents[3]
_EXIT_WAIT_S = 1.0
_SETUP_WAIT_S = 10.0
_SNDBUF_FORCE = 32
"""SO_SNDBUFFORCE: past the host's cap on SO_SNDBUF, for root."""
_RELEASE_DELAY_S = 0.5
"""How long a release may wait to go with the spawner's next message (`Spawner.release`)."""


def fork_server_argv() -> list[str]:
    """The fork server's command line, on the host's Python (`service.host_python`)."""
    return [host_python().executable, *_FORK_SERVER_ARGS]


def _socket_pair() -> tuple[socket.socket, socket.socket]:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    for option in (_SNDBUF_FORCE, socket.SO_SNDBUF):  # one datagram must hold a message
        with contextlib.suppress(OSError):
            ours.setsockopt(socket.SOL_SOCKET, option, 2 * MAX_MESSAGE_BYTES)
            break
    return ours, theirs


class ForkServer:
    """One backend's fork server, started on first use and again if it died. Its
    spawners start commands through the launcher compiled into `cache_dir`
    (`launcher_build`), or by forking themselves when there is none."""

    def __init__(self, cache_dir: Path) -> None:
        self._cache_dir = cache_dir
        self._launcher: list[str] | None = None
        """The launcher's path as the fork server's last argument, once looked for."""
        self._process: subprocess.Popen[bytes] | None = None
        self._socket: socket.socket | None = None
        self._lock = asyncio.Lock()

    async def spawner(self, setup: SpawnerSetup) -> Spawner:
        """A new spawner, making the sandbox `setup` describes (`Spawner.ready` says when)."""
        async with self._lock:
            if self._process is None or self._process.poll() is not None:
                await asyncio.to_thread(self._start)
            assert self._socket is not None
            ours, theirs = _socket_pair()
            try:
                send(self._socket, vars(setup), [theirs.fileno()])
            except (OSError, ValueError) as exc:
                ours.close()
                raise SandboxError(f"the local sandbox fork server is gone: {exc}") from exc
            finally:
                theirs.close()
        return Spawner(ours)

    def _start(self) -> None:
        self.close()
        if self._launcher is None:
            launcher = build_launcher(self._cache_dir)
            self._launcher = [] if launcher is None else [launcher]
        ours, theirs = _socket_pair()
        try:
            self._process = subprocess.Popen(
                [*fork_server_argv(), str(theirs.fileno()), *self._launcher],
                cwd=_PROJECT_ROOT,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
                env={},  # it, its spawners and their commands start from nothing of ours
                start_new_session=True,  # a Ctrl-C at the server's terminal is not theirs
            )
        except OSError as exc:
            ours.close()
            raise SandboxError(f"could not start the local sandbox fork server: {exc}") from exc
        finally:
            theirs.close()
        self._socket = ours

    def close(self) -> None:
        """Stop the fork server (live spawners are not its: they end with their sockets)."""
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        if self._process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(5)
            if self._process.poll() is None:
                self._process.kill()
                self._process.wait()
            self._process = None


@dataclass(frozen=True)
class SpawnerSetup:
    """What a spawner needs to make its sandbox (`forkserver`)."""

    holder: list[str]
    """bwrap's command line (`bwrap.holder_argv`)."""
    cgroup: str | None
    """The sandbox's memory cgroup directory, if any."""
    uid: int | None
    """Host uid (and gid) of every command; None keeps the server's."""
    disk: str | None = None
    """This sandbox's disk (`bwrap.SandboxLayout.disk`) when the server may mount disks:
    the spawner starts bwrap without any other sandbox's disk in view."""
    network: dict[str, list[str]] | None = None
    """Under network FULL: pasta and the namespace's routes (`local_network.full_network`)."""
    overlays: list[dict[str, Any]] = field(default_factory=list)
    """Overlays to mount before bwrap starts (`local_overlay_start.mount_overlay`): an
    image sandbox's root, a group member's layers."""
    image: bool = False
    """An image sandbox: `uid` is the first host id of its block, and every command runs
    as root in a user namespace mapping the block."""
    own_user_namespace: bool = False
    """An unprivileged server's sandbox (on an image or the host's root): the spawner
    makes a user namespace of its own before any overlay and bwrap
    (`overlay_start.enter_own_user_namespace`)."""
    user_counts: dict[str, int] = field(default_factory=dict)
    """The sandbox's shares of the server's per-user counts (`user_counts`), set in the
    outermost user namespace the spawner makes for it."""


@dataclass
class Command:
    """A command the spawner started: its host pid, and its exit code once it ended."""

    pid: int
    exited: asyncio.Future[int]
    """Its exit code, -N when signal N ended it."""
    spawner: Spawner = field(repr=False)

    def release(self) -> None:
        """Let the spawner reap the ended command: its pid may be reused from then on."""
        self.spawner.release(self.pid)


class Spawner:
    """One sandbox's spawner, seen from the event loop."""

    def __init__(self, sock: socket.socket) -> None:
        self._socket = sock
        sock.setblocking(False)
        self._loop = asyncio.get_running_loop()
        self._serial = 0
        self._replies: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._exits: dict[int, asyncio.Future[int]] = {}
        self._ready = self._future(self._replies, 0)
        self._taken = False
        """Whether `ready` took the reply's descriptors (else `close` closes them)."""
        self._pidfd = -1
        """Of the spawner process, sent with its first message; readable once it exited."""
        self._gone: str | None = None
        self._released: list[int] = []
        """Pids of ended commands the server is done with, for the spawner to reap."""
        self._releasing: asyncio.TimerHandle | None = None
        self._loop.add_reader(sock.fileno(), self._on_readable)

    @property
    def gone(self) -> str | None:
        """Why the spawner can run nothing more (its socket closed or failed), or None."""
        return self._gone

    def _future(self, table: dict[int, asyncio.Future[Any]], key: int) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = self._loop.create_future()
        table[key] = future
        return future

    async def ready(self) -> tuple[int, str | None]:
        """Wait until the sandbox is up and the spawner in it.

        Returns a pidfd of the sandbox's init (the caller's to close), and why the
        spawner could not join the sandbox's cgroup, if it could not.
        """
        reply = await asyncio.shield(self._ready)  # a cancelled wait must not cancel it
        self._taken = True
        fds: list[int] = reply.get("fds", [])
        if "error" in reply or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            raise SandboxError(str(reply.get("error", "the sandbox's spawner sent no init")))
        unjoined = reply.get("unjoined")
        return fds[0], None if unjoined is None else str(unjoined)

    async def run(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        *,
        cwd: str,
        groups: Sequence[int],
        rlimits: Mapping[str, int],
        output: tuple[int, int],
    ) -> Command:
        """Start a command with `rlimits` (`Limits.rlimits`) whose stdout and stderr are
        the `output` descriptors."""
        message = {
            "op": "run",
            "argv": list(argv),
            "env": dict(env),
            "cwd": cwd,
            "groups": list(groups),
            "rlimits": dict(rlimits),
        }
        reply, request_id = self._send(message, list(output))
        exited = self._future(self._exits, request_id)
        answer = await reply
        if "pid" not in answer:
            self._exits.pop(request_id, None)
            _raise_for(answer)
        return Command(int(answer["pid"]), exited, self)

    def _send(
        self, message: dict[str, Any], fds: list[int]
    ) -> tuple[asyncio.Future[dict[str, Any]], int]:
        if self._gone is not None:
            raise SandboxError(self._gone)
        self._serial += 1
        message["id"] = self._serial
        message["release"] = self._take_released()
        reply = self._future(self._replies, self._serial)
        try:
            send(self._socket, message, fds)
        except (OSError, ValueError) as exc:
            del self._replies[self._serial]
            raise SandboxError(f"could not reach the sandbox's spawner: {exc}") from exc
        return reply, self._serial

    def release(self, pid: int) -> None:
        """Let the spawner reap ended command `pid`: the next command sent to it says so
        (reaped before that one is forked), or a message of its own once no command came
        for `_RELEASE_DELAY_S`. A session's next command mostly comes sooner: one message
        per command, not two. Lost if the spawner is gone (so is all it holds)."""
        self._released.append(pid)
        if self._releasing is None:
            self._releasing = self._loop.call_later(_RELEASE_DELAY_S, self._send_released)

    def _take_released(self) -> list[int]:
        """The releases not sent yet, no longer waiting for their timer."""
        if self._releasing is not None:
            self._releasing.cancel()
            self._releasing = None
        released, self._released = self._released, []
        return released

    def _send_released(self) -> None:
        released = self._take_released()
        if released and self._gone is None:
            with contextlib.suppress(OSError):
                send(self._socket, {"op": "release", "id": 0, "release": released})

    def _on_readable(self) -> None:
        try:
            message, fds = receive(self._socket)
        except BlockingIOError:
            return
        except (OSError, ValueError) as exc:
            self._fail(f"the sandbox's spawner is gone: {exc}")
            return
        if message is not None and message["id"] == 0 and fds and self._pidfd < 0:
            self._pidfd, *fds = fds
            message["fds"] = fds  # the sandbox's init, for `ready`
        else:
            for fd in fds:
                os.close(fd)
        if message is None:
            self._fail("the sandbox's spawner exited")
            return
        request_id = int(message["id"])
        if "exit" in message:
            exited = self._exits.pop(request_id, None)
            if exited is not None and not exited.done():
                exited.set_result(int(message["exit"]))
            return
        reply = self._replies.pop(request_id, None)
        if reply is not None and not reply.done():
            reply.set_result(message)

    def _fail(self, reason: str) -> None:
        if self._gone is not None:
            return
        self._gone = reason
        self._loop.remove_reader(self._socket.fileno())
        self._take_released()  # the spawner is gone, and so are they
        for table in (self._replies, self._exits):
            for future in table.values():
                if not future.done():
                    future.set_exception(SandboxError(reason))
                    future.exception()  # a reply nobody awaits any more is no error
            table.clear()

    async def close(self) -> None:
        """Hang up, and wait (a while at most) until the spawner has exited; its sandbox
        dies with it (it kills the sandbox's init on its way out, `forkserver`).

        A spawner still making its sandbox is let finish first (a while at most), so that
        its pidfd, sent with its first reply, says when it has exited. One hung up on while
        bwrap builds the sandbox kills what it started (`holder_start.await_holder`).
        """
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.shield(self._ready), _SETUP_WAIT_S)
        if not self._taken and self._ready.done() and self._ready.exception() is None:
            for fd in self._ready.result().get("fds", []):
                os.close(fd)  # the sandbox's init, which nobody took
        self._send_released()  # reaped by the spawner, not left to whoever inherits them
        self._fail("the sandbox was killed")
        self._socket.close()
        if self._pidfd >= 0:  # its cgroup's removal kills it, should it linger
            pidfd, self._pidfd = self._pidfd, -1
            await await_exits([pidfd], _EXIT_WAIT_S)


def _raise_for(reply: dict[str, Any]) -> None:
    if "error" in reply:
        if reply.get("errno") == errno.ENOMEM:  # fork into a pid namespace whose init died
            raise SandboxError("the sandbox is gone: its pid namespace is empty")
        raise SandboxError(f"the sandbox's spawner failed: {reply['error']}")
