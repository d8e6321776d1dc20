"""One command in a local sandbox: started, streamed, waited for, killed.

The sandbox's spawner (`forkserver`) forks the command inside the sandbox's
namespaces and memory cgroup, with its rlimits, uid and tag. It leads a session of its
own: a kill (timeout, cancel, `kill()`) takes that session, the command and everything
it started that stayed in it, plus every process carrying its tag (`tree`).

The command ends when its first process exits, like `docker exec`: what it wrote is
drained, and a daemon it left behind (holding the pipes or not) runs on, without its
output, until the command is killed or the sandbox torn down.

Output is read with loop readers on plain pipes rather than asyncio's subprocess
transports, which cost about 3 ms more per command here (a watcher thread per child).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping, Sequence
from functools import partial

from service.sandboxes.base import WORKDIR, ExecResult, OutputCallback, OutputStream
from service.sandboxes.local.spawner import Command, Spawner
from service.sandboxes.local.tree import ProcessTree, await_exits, kill_tree
from service.sandboxes.output import OutputCapture

__all__ = ["SandboxedProcess"]

_READ_BYTES = 256 * 1024
_DRAIN_READS = 64
"""At most this many reads drain a pipe once the command has exited: a daemon that
inherited it may keep writing forever."""


class _Reader:
    """Hands what arrives on a pipe to `on_data` until it closes."""

    def __init__(self, fd: int, on_data: Callable[[bytes], None]) -> None:
        self._loop = asyncio.get_running_loop()
        self._fd = fd
        self._on_data = on_data
        self.closed: asyncio.Future[None] = self._loop.create_future()
        os.set_blocking(fd, False)
        self._loop.add_reader(fd, self._ready)

    def _ready(self) -> None:
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
            self._on_data(data)
        self.close()

    def close(self) -> None:
        if not self.closed.done():
            self._loop.remove_reader(self._fd)
            os.close(self._fd)
            self.closed.set_result(None)


class SandboxedProcess:
    """A command running in a sandbox; matches `BackgroundProcess`."""

    def __init__(
        self,
        command: Command,
        pipes: tuple[int, int],
        output_bytes: tuple[int, int],
        on_output: OutputCallback | None,
        owner: tuple[int, int] | None,
    ) -> None:
        self._command = command
        self._owner = owner
        self._output = OutputCapture(*output_bytes, on_output)
        self._pipes = [
            _Reader(pipes[0], partial(self._output.feed, OutputStream.STDOUT)),
            _Reader(pipes[1], partial(self._output.feed, OutputStream.STDERR)),
        ]
        self._killed = False
        self._reaping: asyncio.Future[None] | None = None
        self._result = asyncio.get_running_loop().create_task(self._finish())
        self._result.add_done_callback(_retrieve)

    @classmethod
    async def start(
        cls,
        spawner: Spawner,
        command: str,
        env: Mapping[str, str],
        *,
        groups: Sequence[int],
        rlimits: Mapping[str, int],
        output_bytes: tuple[int, int],
        on_output: OutputCallback | None,
        owner: tuple[int, int] | None,
    ) -> SandboxedProcess:
        """Have `spawner` run `bash -c command` in WORKDIR with exactly `env`.

        `owner` is the (uid, supplementary group) the command runs with, if any.
        """
        stdout, stderr = os.pipe(), os.pipe()
        ours = (stdout[0], stderr[0])
        argv = ("bash", "-c", command)
        output = (stdout[1], stderr[1])
        spawning = asyncio.ensure_future(
            spawner.run(argv, env, cwd=WORKDIR, groups=groups, rlimits=rlimits, output=output)
        )
        spawning.add_done_callback(partial(_close, output))  # the spawner has its own copies
        try:
            started = await asyncio.shield(spawning)
        except asyncio.CancelledError:
            spawning.add_done_callback(partial(_abandon, ours, output_bytes, owner))
            raise
        except BaseException:
            for fd in ours:
                os.close(fd)
            raise
        return cls(started, ours, output_bytes, on_output, owner)

    async def _finish(self) -> ExecResult:
        try:  # raises SandboxError if the spawner died: how the command ended is lost
            code = await self._command.exited
            if self._reaping is not None:  # killed: ends once all it started is gone
                await asyncio.shield(self._reaping)
        finally:
            for pipe in self._pipes:
                pipe.drain()
        self._command.release()
        self._output.close()
        return self._output.result(-1 if self._killed else code if code >= 0 else 128 - code)

    def _send_kill(self) -> list[int]:
        """Kill the command's session; returns pidfds of the processes signalled."""
        self._killed = True
        if self._command.exited.done():
            return []
        # Unreaped until released (after this kill is over): its pid is still its own.
        return kill_tree(ProcessTree(self._command.pid, self._owner))

    @property
    def done(self) -> bool:
        return self._result.done()

    @property
    def pid(self) -> int:
        """Its host pid, the leader of its session (not reaped before it ended)."""
        return self._command.pid

    async def wait(self) -> ExecResult:
        """Wait for the command to end. Cancelling the wait does not kill it."""
        return await asyncio.shield(self._result)

    async def kill(self) -> None:
        """Kill the command and everything it started, and wait until it has ended."""
        if not self._result.done() and self._reaping is None:
            pidfds = self._send_kill()
            self._reaping = asyncio.ensure_future(await_exits(pidfds))
        await asyncio.wait([self._result])


def _abandon(
    pipes: tuple[int, int],
    output_bytes: tuple[int, int],
    owner: tuple[int, int] | None,
    spawning: asyncio.Future[Command],
) -> None:
    """A start was cancelled while the command was being forked: kill whatever came of it."""
    if spawning.cancelled() or spawning.exception() is not None:
        for fd in pipes:
            os.close(fd)
        return
    process = SandboxedProcess(spawning.result(), pipes, output_bytes, None, owner)
    for pidfd in process._send_kill():
        os.close(pidfd)


def _close(fds: tuple[int, ...], _: object) -> None:
    for fd in fds:
        os.close(fd)


def _retrieve(task: asyncio.Task[ExecResult]) -> None:
    """Mark a failure as seen: a killed background process may never be waited for."""
    if not task.cancelled():
        task.exception()
