"""One command under bubblewrap: started, limited, streamed, waited for, killed.

Each command is its own bwrap invocation with its own pid namespace, forked by the
sandbox's launcher thread (which sits in the sandbox's memory cgroup, so bwrap is born
there). bwrap holds the namespace's first process (`--block-fd`) until the server has
set its rlimits, so the command and everything it starts inherit them. Killing that
first process ends the namespace, and with it every process of the command, however
deeply backgrounded: a daemon never outlives the command that started it.
`--json-status-fd` tells a command's exit code from bwrap failing first.

The process is driven with pidfds and loop readers rather than asyncio's subprocess
transports, which cost about 3 ms more per command here (a watcher thread per child).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from functools import partial
from pathlib import Path
from typing import Any

from service.errors import SandboxError
from service.sandboxes.base import ExecResult, OutputCallback, OutputStream
from service.sandboxes.limits import Limits
from service.sandboxes.output import HeadTailBuffer

__all__ = ["SandboxedProcess"]

_READ_BYTES = 256 * 1024


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

    def close(self) -> None:
        if not self.closed.done():
            self._loop.remove_reader(self._fd)
            os.close(self._fd)
            self.closed.set_result(None)


class _Status:
    """bwrap's --json-status-fd: the sandbox's first pid, then the command's exit code."""

    def __init__(self) -> None:
        self._data = bytearray()
        self.first: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()

    def feed(self, chunk: bytes) -> None:
        self._data += chunk
        if not self.first.done() and b"\n" in self._data:
            self.first.set_result(self._documents()[0])

    def eof(self) -> None:
        if not self.first.done():
            self.first.set_result({})

    def _documents(self) -> list[dict[str, Any]]:
        documents = []
        for line in bytes(self._data).splitlines():
            with contextlib.suppress(ValueError):
                documents.append(json.loads(line))
        return documents or [{}]

    def exit_code(self) -> int | None:
        """The command's exit code; None when bwrap never got to run it."""
        codes = [doc["exit-code"] for doc in self._documents() if "exit-code" in doc]
        return int(codes[-1]) if codes else None


def _parent_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def _spawn(argv: list[str], child_fds: dict[str, int]) -> tuple[subprocess.Popen[bytes], int]:
    """Start bwrap; returns it with a pidfd that becomes readable when it exits."""
    try:
        popen = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=child_fds["stdout"],
            stderr=child_fds["stderr"],
            pass_fds=(child_fds["status"], child_fds["block"]),
            env={},  # bwrap sets the command's own; its first process keeps no server secret
            start_new_session=True,  # a Ctrl-C at the server's terminal is not theirs
        )
    except OSError as exc:
        raise SandboxError(f"could not start bwrap: {exc}") from exc
    finally:
        for fd in child_fds.values():
            os.close(fd)
    try:
        return popen, os.pidfd_open(popen.pid)
    except OSError as exc:
        popen.kill()
        popen.wait()
        raise SandboxError(f"could not watch bwrap: {exc}") from exc


class SandboxedProcess:
    """A running bwrap invocation; matches `BackgroundProcess`."""

    def __init__(
        self,
        popen: subprocess.Popen[bytes],
        exit_fd: int,
        pipes: dict[str, int],
        output_bytes: tuple[int, int],
        on_output: OutputCallback | None,
    ) -> None:
        self._popen = popen
        self._started = time.monotonic()
        self._buffers = {stream: HeadTailBuffer(*output_bytes) for stream in OutputStream}
        self._on_output = on_output
        self._status = _Status()
        self._readers = [
            _Reader(pipes["stdout"], partial(self._feed, OutputStream.STDOUT)),
            _Reader(pipes["stderr"], partial(self._feed, OutputStream.STDERR)),
            _Reader(pipes["status"], self._status.feed),
            _Reader(exit_fd, None),
        ]
        self._readers[2].closed.add_done_callback(lambda _: self._status.eof())
        self._first_pidfd: int | None = None
        self._killed = False
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
        limits: Limits,
        launcher: Executor,
        *,
        output_bytes: tuple[int, int],
        on_output: OutputCallback | None,
    ) -> SandboxedProcess:
        """Start argv (a bwrap command line) from `launcher`, limit it, let the command run."""
        ends = {name: os.pipe() for name in ("stdout", "stderr", "status", "block")}
        ours = {name: read for name, (read, _) in ends.items() if name != "block"}
        theirs = {name: write for name, (_, write) in ends.items() if name != "block"}
        block_r, block_w = ends["block"]
        theirs["block"] = block_r
        status_fd = str(theirs["status"])
        full = [argv[0], "--json-status-fd", status_fd, "--block-fd", str(block_r), *argv[1:]]
        spawning = asyncio.get_running_loop().run_in_executor(launcher, _spawn, full, theirs)
        try:
            popen, exit_fd = await asyncio.shield(spawning)
        except asyncio.CancelledError:
            spawning.add_done_callback(partial(_abandon, ours, block_w, output_bytes))
            raise
        except BaseException:
            for fd in (*ours.values(), block_w):
                os.close(fd)
            raise
        process = cls(popen, exit_fd, ours, output_bytes, on_output)
        try:
            await process._release(block_w, limits)
        except BaseException:
            process._send_kill()  # its readers still drain and reap it
            raise
        finally:
            os.close(block_w)
        return process

    async def _release(self, block_w: int, limits: Limits) -> None:
        """Limit the namespace's first process, then unblock it."""
        first = await asyncio.shield(self._status.first)
        if "child-pid" not in first:
            return  # bwrap failed before creating the sandbox; _finish reports it
        try:
            self._confine(int(first["child-pid"]), limits)
        except (ProcessLookupError, FileNotFoundError):
            pass  # already gone: _finish reports how it ended
        except OSError as exc:
            raise SandboxError(f"could not limit the sandbox: {exc}") from exc
        with contextlib.suppress(BrokenPipeError):
            os.write(block_w, b"\0")

    def _confine(self, pid: int, limits: Limits) -> None:
        self._first_pidfd = os.pidfd_open(pid)
        if _parent_of(pid) != self._popen.pid:
            raise ProcessLookupError(pid)  # it died and its pid was reused: not ours
        limits.apply(pid)

    async def _finish(self) -> ExecResult:
        try:
            await asyncio.gather(*(reader.closed for reader in self._readers))
        finally:
            self._popen.poll()  # reap: the pidfd said it has exited
            pidfd, self._first_pidfd = self._first_pidfd, None
            if pidfd is not None:
                os.close(pidfd)
        exit_code = -1 if self._killed else self._status.exit_code()
        stdout, stderr = self._buffers[OutputStream.STDOUT], self._buffers[OutputStream.STDERR]
        if exit_code is None:
            detail = stderr.text().strip() or f"bwrap exited {self._popen.returncode}"
            raise SandboxError(f"the sandbox failed before the command ran: {detail}")
        return ExecResult(
            exit_code=exit_code,
            stdout=stdout.text(),
            stderr=stderr.text(),
            stdout_bytes=stdout.total_bytes,
            stderr_bytes=stderr.total_bytes,
            duration_s=time.monotonic() - self._started,
        )

    def _send_kill(self) -> None:
        self._killed = True
        if self._first_pidfd is not None:
            # The namespace's first process: its death takes every process of the command.
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._first_pidfd, signal.SIGKILL)
        self._popen.kill()  # safe: only we reap it, so its pid is still its own

    @property
    def done(self) -> bool:
        return self._result.done()

    async def wait(self) -> ExecResult:
        """Wait for the command to end. Cancelling the wait does not kill it."""
        return await asyncio.shield(self._result)

    async def kill(self) -> None:
        """Kill the command and everything it started, and wait until they are gone."""
        if not self._result.done():
            self._send_kill()
        await asyncio.wait([self._result])


def _abandon(
    pipes: dict[str, int],
    block_w: int,
    output_bytes: tuple[int, int],
    spawning: asyncio.Future[tuple[subprocess.Popen[bytes], int]],
) -> None:
    """A start was cancelled while bwrap was being forked: kill whatever came of it."""
    os.close(block_w)
    if spawning.cancelled() or spawning.exception() is not None:
        for fd in pipes.values():
            os.close(fd)
        return
    popen, exit_fd = spawning.result()
    SandboxedProcess(popen, exit_fd, pipes, output_bytes, None)._send_kill()


def _retrieve(task: asyncio.Task[ExecResult]) -> None:
    """Mark a failure as seen: a killed background process may never be waited for."""
    if not task.cancelled():
        task.exception()
