"""One command in a local sandbox: started, limited, streamed, waited for, killed.

Each command enters its sandbox's namespaces (`local_holder`) with nsenter, forked by
the sandbox's launcher thread (which sits in the sandbox's memory cgroup, so the command
is born there); `prlimit` sets its rlimits and setpriv drops privileges, so everything
it starts inherits both. nsenter forks into the pid namespace and passes its child's
exit status on. It leads a session of its own: a kill (timeout, cancel, `kill()`)
takes that session, the command and everything it started that stayed in it.

The command ends when nsenter exits, like `docker exec`: what it wrote is drained, and
a daemon it left behind (holding the pipes or not) runs on, without its output, until
the command is killed or the sandbox torn down.

The process is driven with pidfds and loop readers rather than asyncio's subprocess
transports, which cost about 3 ms more per command here (a watcher thread per child).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from functools import partial

from service.errors import SandboxError
from service.sandboxes.base import ExecResult, OutputCallback, OutputStream
from service.sandboxes.local_tree import ProcessTree, await_exits, kill_tree
from service.sandboxes.output import HeadTailBuffer

__all__ = ["SandboxedProcess"]

_READ_BYTES = 256 * 1024
_DRAIN_READS = 64
"""At most this many reads drain a pipe once the command has exited: a daemon that
inherited it may keep writing forever."""


class _Reader:
    """Hands what arrives on a pipe to `on_data` until it closes.

    Without `on_data`, `fd` is a pidfd: it closes once the process has exited.
    """

    def __init__(self, fd: int, on_data: Callable[[bytes], None] | None) -> None:
        self._loop = asyncio.get_running_loop()
        self._fd = fd
        self._on_data = on_data
        self.closed: asyncio.Future[None] = self._loop.create_future()
        os.set_blocking(fd, False)
        self._loop.add_reader(fd, self._ready)

    def _ready(self) -> None:
        if self._on_data is None:
            self.close()
            return
        try:
            data = os.read(self._fd, _READ_BYTES)
        except BlockingIOError:
            return
        if not data:
            self.close()
            return
        self._on_data(data)

    def drain(self) -> None:
        """Take what the pipe holds now, then close it."""
        for _ in range(_DRAIN_READS):
            if self.closed.done():
                return
            try:
                data = os.read(self._fd, _READ_BYTES)
            except BlockingIOError:
                break
            if not data:
                break
            if self._on_data is not None:
                self._on_data(data)
        self.close()

    def close(self) -> None:
        if not self.closed.done():
            self._loop.remove_reader(self._fd)
            os.close(self._fd)
            self.closed.set_result(None)


def _spawn(
    argv: list[str], env: dict[str, str], child_fds: dict[str, int]
) -> tuple[subprocess.Popen[bytes], int]:
    """Start nsenter; returns it with a pidfd that becomes readable when it exits."""
    try:
        popen = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=child_fds["stdout"],
            stderr=child_fds["stderr"],
            env=env,
            start_new_session=True,  # its own session and group: killed as one, never ours
        )
    except OSError as exc:
        raise SandboxError(f"could not start nsenter: {exc}") from exc
    finally:
        for fd in child_fds.values():
            os.close(fd)
    try:
        return popen, os.pidfd_open(popen.pid)
    except OSError as exc:
        popen.kill()
        popen.wait()
        raise SandboxError(f"could not watch nsenter: {exc}") from exc


class SandboxedProcess:
    """A command running in a sandbox (its nsenter on the host); matches `BackgroundProcess`."""

    def __init__(
        self,
        popen: subprocess.Popen[bytes],
        exit_fd: int,
        pipes: dict[str, int],
        output_bytes: tuple[int, int],
        on_output: OutputCallback | None,
        owner: tuple[int, int] | None,
    ) -> None:
        self._popen = popen
        self._owner = owner
        self._started = time.monotonic()
        self._buffers = {stream: HeadTailBuffer(*output_bytes) for stream in OutputStream}
        self._on_output = on_output
        self._pipes = [
            _Reader(pipes["stdout"], partial(self._feed, OutputStream.STDOUT)),
            _Reader(pipes["stderr"], partial(self._feed, OutputStream.STDERR)),
        ]
        self._exit = _Reader(exit_fd, None)
        self._killed = False
        self._reaping: asyncio.Future[None] | None = None
        self._result = asyncio.get_running_loop().create_task(self._finish())
        self._result.add_done_callback(_retrieve)

    def _feed(self, stream: OutputStream, data: bytes) -> None:
        self._buffers[stream].feed(data)
        if self._on_output is not None:
            self._on_output(stream, data)

    @classmethod
    async def start(
        cls,
        argv: Sequence[str],
        env: dict[str, str],
        launcher: Executor,
        *,
        output_bytes: tuple[int, int],
        on_output: OutputCallback | None,
        owner: tuple[int, int] | None,
    ) -> SandboxedProcess:
        """Start argv (an nsenter command line) with `env` from `launcher`.

        `owner` is the (uid, supplementary group) argv gives the command, if any.
        """
        ends = {name: os.pipe() for name in ("stdout", "stderr")}
        ours = {name: read for name, (read, _) in ends.items()}
        theirs = {name: write for name, (_, write) in ends.items()}
        loop = asyncio.get_running_loop()
        spawning = loop.run_in_executor(launcher, _spawn, list(argv), env, theirs)
        try:
            popen, exit_fd = await asyncio.shield(spawning)
        except asyncio.CancelledError:
            spawning.add_done_callback(partial(_abandon, ours, output_bytes, owner))
            raise
        except BaseException:
            for fd in ours.values():
                os.close(fd)
            raise
        return cls(popen, exit_fd, ours, output_bytes, on_output, owner)

    async def _finish(self) -> ExecResult:
        try:
            await self._exit.closed
            if self._reaping is not None:  # killed: ends once all it started is gone
                await asyncio.shield(self._reaping)
        finally:
            for pipe in self._pipes:
                pipe.drain()
            self._popen.poll()  # reap: the pidfd said it has exited
        code = self._popen.returncode
        exit_code = -1 if self._killed or code is None else code if code >= 0 else 128 - code
        stdout, stderr = self._buffers[OutputStream.STDOUT], self._buffers[OutputStream.STDERR]
        return ExecResult(
            exit_code=exit_code,
            stdout=stdout.text(),
            stderr=stderr.text(),
            stdout_bytes=stdout.total_bytes,
            stderr_bytes=stderr.total_bytes,
            duration_s=time.monotonic() - self._started,
        )

    def _send_kill(self) -> list[int]:
        """Kill the command's session; returns pidfds of the processes signalled."""
        self._killed = True
        if self._popen.returncode is not None:
            return []
        return kill_tree(ProcessTree(self._popen.pid, self._owner))  # unreaped: pid still its

    @property
    def done(self) -> bool:
        return self._result.done()

    async def wait(self) -> ExecResult:
        """Wait for the command to end. Cancelling the wait does not kill it."""
        return await asyncio.shield(self._result)

    async def kill(self) -> None:
        """Kill the command and everything it started, and wait until it has ended."""
        if not self._result.done() and self._reaping is None:
            pidfds = self._send_kill()
            self._reaping = asyncio.ensure_future(asyncio.to_thread(await_exits, pidfds))
        await asyncio.wait([self._result])


def _abandon(
    pipes: dict[str, int],
    output_bytes: tuple[int, int],
    owner: tuple[int, int] | None,
    spawning: asyncio.Future[tuple[subprocess.Popen[bytes], int]],
) -> None:
    """A start was cancelled while nsenter was being forked: kill whatever came of it."""
    if spawning.cancelled() or spawning.exception() is not None:
        for fd in pipes.values():
            os.close(fd)
        return
    popen, exit_fd = spawning.result()
    for pidfd in SandboxedProcess(popen, exit_fd, pipes, output_bytes, None, owner)._send_kill():
        os.close(pidfd)


def _retrieve(task: asyncio.Task[ExecResult]) -> None:
    """Mark a failure as seen: a killed background process may never be waited for."""
    if not task.cancelled():
        task.exception()
