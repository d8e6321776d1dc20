"""A command running in an E2B sandbox: its bounded output capture and its end.

A command's own failure is its exit code; losing the command (the stream broke, the sandbox
died) is a `SandboxError`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from e2b import CommandExitException
from e2b.sandbox_async.commands.command_handle import AsyncCommandHandle

from service.config import Settings
from service.errors import SandboxError
from service.sandboxes.base import ExecResult, OutputCallback, OutputStream
from service.sandboxes.output import OutputCapture

__all__ = ["KILL_GRACE_S", "E2BProcess", "TextOutput"]

KILL_GRACE_S = 5.0
"""How long a killed command may take to report its end before we stop listening."""


class TextOutput(OutputCapture):
    """An E2B command's output: the SDK hands it over as UTF-8 text (invalid bytes
    replaced), not raw bytes."""

    def __init__(self, settings: Settings, on_output: OutputCallback | None) -> None:
        super().__init__(settings.output_head_bytes, settings.output_tail_bytes, on_output)

    def stdout(self, text: str) -> None:
        self.feed(OutputStream.STDOUT, text.encode())

    def stderr(self, text: str) -> None:
        self.feed(OutputStream.STDERR, text.encode())


class E2BProcess:
    """A command running in an E2B sandbox (`BackgroundProcess`)."""

    def __init__(
        self,
        handle: AsyncCommandHandle[None],
        capture: TextOutput,
        *,
        sandbox_id: str,
        until_gone: Callable[[], Coroutine[Any, Any, None]],
        kill_group: Callable[[int], Coroutine[Any, Any, None]],
        on_exit: Callable[[E2BProcess], None],
    ) -> None:
        self.capture = capture
        self.killed = False
        """Set once the command or its sandbox was killed on purpose: its end is exit -1."""
        self._handle = handle
        self._sandbox_id = sandbox_id
        self._until_gone = until_gone
        self._kill_group = kill_group
        self._kill_task: asyncio.Task[None] | None = None
        self._exit = asyncio.create_task(self._exit_code())
        self._exit.add_done_callback(lambda task: task.cancelled() or task.exception())
        self._exit.add_done_callback(lambda _: capture.close())
        self._exit.add_done_callback(lambda _: on_exit(self))

    @property
    def pid(self) -> int:
        pid: int = self._handle.pid
        return pid

    async def wait(self) -> ExecResult:
        """The result once the command ends; SandboxError if the sandbox dies first."""
        watchdog = asyncio.create_task(self._until_gone())
        try:
            await asyncio.wait({self._exit, watchdog}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            watchdog.cancel()
        if self._exit.done() and not self._exit.cancelled():
            return self.capture.result(self._exit.result())
        if self.killed:
            return self.capture.result(-1)
        raise SandboxError(f"E2B sandbox {self._sandbox_id} stopped while a command was running")

    async def kill(self) -> None:
        """Kill the command's whole process group. Idempotent; finishes even if cancelled."""
        if self._kill_task is None:
            self.killed = True
            self._kill_task = asyncio.create_task(self._terminate())
        await asyncio.shield(self._kill_task)

    async def _terminate(self) -> None:
        await self._kill_group(self.pid)
        _, pending = await asyncio.wait({self._exit}, timeout=KILL_GRACE_S)
        if pending:
            await self._handle.disconnect()

    async def _exit_code(self) -> int:
        try:
            result = await self._handle.wait()
        except CommandExitException as exc:
            return int(exc.exit_code)
        except Exception as exc:  # whatever broke the stream; translated here, once
            if self.killed:
                return -1
            message = f"E2B sandbox {self._sandbox_id}: lost a running command: {exc}"
            raise SandboxError(message) from exc
        return int(result.exit_code)
