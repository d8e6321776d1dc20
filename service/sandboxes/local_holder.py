"""The long-lived process that holds one local sandbox's namespaces (the docker-exec model).

At create, one bwrap makes the sandbox's namespaces (mount with every bind, pid, ipc,
uts, and net under network NONE) and leaves a holder sleeping in them; each command
then enters them with nsenter (`local_process`), which costs a fork and a few execs
instead of building and tearing down namespaces per command. The holder is not in the
sandbox's memory cgroup: commands are born there (the launcher thread's), the holder
only sleeps.

The server keeps descriptors of the holder's namespace files and nsenter opens them
through /proc/<server pid>/fd (close-on-exec: no command inherits one), so a command
never enters a pid reused after the holder died: the namespaces stay what they were,
and a pid namespace whose init is gone refuses new processes.
Killing the holder's first process (pid 1 of the namespace) kills every process of the
sandbox; `--die-with-parent` does the same when the server (or its launcher thread) dies.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
from collections.abc import Mapping, Sequence

from service.errors import SandboxError

__all__ = ["Holder"]

_NAMESPACES = {"mount": "mnt", "pid": "pid", "net": "net", "ipc": "ipc", "uts": "uts"}
"""nsenter's option -> the file under /proc/<pid>/ns."""
_READY = b"ready\n"
_KILL_WAIT_S = 10.0


def _read_line(fd: int) -> bytes:
    """One line from a blocking pipe, read byte by byte so nothing after it is consumed."""
    line = bytearray()
    while not line.endswith(b"\n") and (byte := os.read(fd, 1)):
        line += byte
    return bytes(line)


def _read_all(fd: int) -> str:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace").strip()


class Holder:
    """One sandbox's namespace holder: a bwrap run whose command sleeps until killed."""

    def __init__(self, popen: subprocess.Popen[bytes], init_pidfd: int) -> None:
        self._popen = popen
        self._init_pidfd = init_pidfd
        self._namespaces: dict[str, int] = {}
        """nsenter's option -> a descriptor of that namespace, open until `kill`."""

    @classmethod
    def start(cls, argv: Sequence[str], *, user_namespace: bool) -> Holder:
        """Run bwrap with `argv` and wait until its mounts are in place. Blocks."""
        ends = {name: os.pipe() for name in ("status", "stdout", "stderr")}
        full = [argv[0], "--json-status-fd", str(ends["status"][1]), *argv[1:]]
        try:
            popen = subprocess.Popen(
                full,
                stdin=subprocess.DEVNULL,
                stdout=ends["stdout"][1],
                stderr=ends["stderr"][1],
                pass_fds=(ends["status"][1],),
                env={},  # the holder keeps no server secret
                start_new_session=True,  # a Ctrl-C at the server's terminal is not its
            )
        except OSError as exc:
            for read, write in ends.values():
                os.close(read)
                os.close(write)
            raise SandboxError(f"could not start bwrap: {exc}") from exc
        for _, write in ends.values():
            os.close(write)
        try:
            pipes = {name: read for name, (read, _) in ends.items()}
            return cls._attach(popen, pipes, user_namespace)
        finally:
            for read, _ in ends.values():
                os.close(read)

    @classmethod
    def _attach(
        cls, popen: subprocess.Popen[bytes], pipes: Mapping[str, int], user_namespace: bool
    ) -> Holder:
        status = _read_line(pipes["status"])
        ready = _read_line(pipes["stdout"]) == _READY
        try:
            if not ready:
                raise SandboxError(f"the sandbox failed to start: {cls._failure(popen, pipes)}")
            pid = int(json.loads(status)["child-pid"])
            holder = cls(popen, os.pidfd_open(pid))
            holder._open_namespaces(pid, user_namespace)
        except (OSError, ValueError, KeyError) as exc:
            popen.kill()
            popen.wait()
            raise SandboxError(f"could not attach to the sandbox: {exc}") from exc
        except BaseException:
            popen.kill()
            popen.wait()
            raise
        return holder

    @staticmethod
    def _failure(popen: subprocess.Popen[bytes], pipes: Mapping[str, int]) -> str:
        detail = _read_all(pipes["stderr"])
        return detail or f"bwrap exited {popen.wait()}"

    def _open_namespaces(self, pid: int, user_namespace: bool) -> None:
        files = dict(_NAMESPACES, **({"user": "user"} if user_namespace else {}))
        try:
            for option, name in files.items():
                path = f"/proc/{pid}/ns/{name}"
                self._namespaces[option] = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except BaseException:
            self._close()
            raise
        if not self.alive:  # the pid may have been reused: these are not the sandbox's
            self._close()
            raise ProcessLookupError(pid)

    @property
    def options(self) -> list[str]:
        """nsenter's options entering every namespace of the sandbox."""
        own = os.getpid()
        return [f"--{name}=/proc/{own}/fd/{fd}" for name, fd in self._namespaces.items()]

    @property
    def alive(self) -> bool:
        """Whether the namespace's first process still runs (its pidfd is not readable)."""
        if self._init_pidfd < 0:
            return False
        readable, _, _ = select.select([self._init_pidfd], [], [], 0)
        return not readable

    def kill(self) -> None:
        """Kill every process of the sandbox and wait for bwrap. Blocks; idempotent."""
        if self._init_pidfd >= 0:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._init_pidfd, signal.SIGKILL)
            # Its exit completes once every process of the namespace is gone.
            select.select([self._init_pidfd], [], [], _KILL_WAIT_S)
        self._popen.kill()  # safe: only we reap it, so its pid is still its own
        self._popen.wait()
        self._close()

    def _close(self) -> None:
        for fd in self._namespaces.values():
            os.close(fd)
        self._namespaces.clear()
        if self._init_pidfd >= 0:
            os.close(self._init_pidfd)
            self._init_pidfd = -1
