"""`LiveSession`: one open session this server holds, and what its caller does in it.

Every call checks the session is READY (else SessionStateError: FAILED_PRECONDITION),
counts as activity for the idle timeout, and reaches the sandbox only through the
`Sandbox` protocol, whose file calls never follow a link. A command is the caller's, so it
is treated as a rollout's agent is: it runs as the agent would (the task's env, the model
route's OPENAI_*), what it starts in the background lives on until verification takes the
sandbox back, and its output is bounded on the way out and scrubbed of the route's key in
its event.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar

from service.agents import model_env
from service.config import Settings
from service.engine.manager import RolloutManager
from service.engine.output_scrub import ByteScrubber
from service.engine.sessions.agent import CallerAgent
from service.engine.sessions.requests import (
    CommandRequest,
    check_content,
    checked_command,
    file_bound,
    list_bound,
    session_path,
)
from service.engine.sessions.status import session_status
from service.engine.staging import task_workdir
from service.errors import FieldViolation, SandboxError, SessionStateError, SpecError
from service.models import (
    CommandResult,
    CommandStage,
    Notice,
    Rollout,
    RolloutSpec,
    SessionEnding,
    SessionRecord,
    SessionStatus,
)
from service.proxy import scrub_text
from service.sandboxes import ExecResult, FileEntry, OutputStream, Sandbox

__all__ = ["ExecDone", "LiveSession", "OutputChunk"]

T = TypeVar("T")

_CHUNK_BYTES = 256 * 1024
"""Output queued while the caller read is sent together, up to this much per message."""


@dataclass(frozen=True)
class OutputChunk:
    """Output of a running command, as it came."""

    stream: OutputStream
    data: bytes


@dataclass(frozen=True)
class ExecDone:
    """How a command ended: always the last item of `LiveSession.exec`."""

    index: int
    result: ExecResult
    dropped_bytes: int
    """Output past the request's bound: counted, not sent."""


class LiveSession:
    """A session from admission to its end; `follow` runs it (the manager's task)."""

    def __init__(
        self, rollout: Rollout, spec: RolloutSpec, agent: CallerAgent, rollouts: RolloutManager
    ) -> None:
        assert rollout.result.session is not None
        self.rollout = rollout
        """The live rollout record (the manager's own object: always current)."""
        self.opened = asyncio.Event()
        """Set once it is READY, or ended before it was."""
        self._spec = spec
        self._agent = agent
        self._rollouts = rollouts
        self._settings: Settings = rollouts.settings
        self._busy = 0
        self._begun = time.monotonic()
        self._last = self._begun

    @property
    def id(self) -> str:
        return self.rollout.id

    @property
    def record(self) -> SessionRecord:
        assert self.rollout.result.session is not None
        return self.rollout.result.session

    async def follow(self) -> None:
        """Wait for READY (or the end), then reap it at its idle timeout or lifetime."""
        ended = asyncio.ensure_future(self._rollouts.wait(self.id))
        ready = asyncio.ensure_future(self._agent.ready.wait())
        try:
            await asyncio.wait({ended, ready}, return_when=asyncio.FIRST_COMPLETED)
            if not ended.done():
                self._became_ready()
                expiry = asyncio.ensure_future(self._expire_when_due())
                try:
                    await asyncio.wait({ended})
                finally:
                    expiry.cancel()
        finally:
            ready.cancel()
            self.opened.set()

    def _became_ready(self) -> None:
        context = self._agent.context
        self.record.ready_time = datetime.now(UTC)
        if context is not None and context.model is not None:
            self.record.model_base_url = context.model.base_url
        self._touch()
        self._rollouts.publish(self.id, Notice(topic="session.ready", message="ready for commands"))
        self.opened.set()

    async def _expire_when_due(self) -> None:
        """Reap it at its idle timeout or lifetime; between calls, check its sandbox alive
        every `session_probe_interval_s` (a command in flight finds a death itself).

        Calls do not wake it (a command would cost two wake-ups): they only move its idle
        deadline later, read again at each wake. While one runs it looks again an idle
        timeout later, by when idle time counts from no earlier than that call's end."""
        record = self.record
        interval_s = self._settings.session_probe_interval_s
        probe_due = time.monotonic() + interval_s
        while True:
            now = time.monotonic()
            lifetime_due = self._begun + record.max_lifetime_s
            idle_due = self._last + record.idle_timeout_s
            if now >= lifetime_due:
                why = f"its lifetime of {record.max_lifetime_s:g}s (max_lifetime) is over"
                break
            if now >= idle_due and not self._busy:
                why = f"no call for {record.idle_timeout_s:g}s (idle_timeout)"
                break
            if now >= probe_due:
                probe_due = now + interval_s
                if not self._busy and not await self._alive():
                    return
                continue
            idle_wake = now + record.idle_timeout_s if self._busy else idle_due
            await asyncio.sleep(min(idle_wake, lifetime_due, probe_due) - now)
        await asyncio.shield(self.end(SessionEnding.EXPIRE, f"session expired: {why}"))

    async def _alive(self) -> bool:
        """Whether its sandbox still runs a command; one that cannot fails the session
        (SANDBOX), as a command of the caller's would."""
        sandbox = self._agent.sandbox
        if sandbox is None or self.record.ending is not None:
            return True
        try:
            await sandbox.exec("true", timeout_s=self._settings.session_probe_interval_s)
        except SandboxError as exc:
            self._lost(exc)
            return False
        return True

    def _lost(self, failure: SandboxError) -> None:
        """The sandbox died: the session fails SANDBOX, unless already ending."""
        if self.record.ending is None:
            self._agent.fail(failure)

    async def end(self, ending: SessionEnding, reason: str) -> Rollout:
        """Close it (no verification): the rollout cancelled, its sandbox gone on return."""
        if not self.rollout.terminal and self.record.ending is None:
            self.record.ending = ending
            if ending is SessionEnding.EXPIRE:
                self._rollouts.publish(self.id, Notice(topic="session.expired", message=reason))
        return await self._rollouts.cancel(self.id, reason)

    async def verify(self) -> Rollout:
        """End the caller's turn and wait for the rollout's own verification and teardown."""
        self._sandbox()  # READY, or FAILED_PRECONDITION
        self.record.ending = SessionEnding.VERIFY
        self._touch()
        self._agent.release()
        return await self._rollouts.wait(self.id)

    def _touch(self) -> None:
        self._last = time.monotonic()
        self.record.last_activity_time = datetime.now(UTC)

    def _sandbox(self) -> Sandbox:
        status = session_status(self.rollout)
        sandbox = self._agent.sandbox
        if status is not SessionStatus.READY or sandbox is None:
            raise SessionStateError(f"session {self.id} is {status.value.upper()}, not READY")
        return sandbox

    @contextlib.contextmanager
    def _acting(self) -> Iterator[Sandbox]:
        sandbox = self._sandbox()
        self._busy += 1
        self._touch()
        try:
            yield sandbox
        finally:
            self._busy -= 1
            self._touch()

    async def exec(self, request: CommandRequest) -> AsyncIterator[OutputChunk | ExecDone]:
        """Run one command: its output as it comes (bounded), then how it ended."""
        task = self._spec.task
        line, timeout_s, env, bound = checked_command(
            request, task, self._settings, self._spec.command_timeout_s
        )
        context = self._agent.context
        env = task.env | model_env(None if context is None else context.model) | env
        with self._acting() as sandbox:
            index = self.record.commands
            self.record.commands += 1
            output = _BoundedOutput(bound, self._secrets())
            running = asyncio.ensure_future(
                sandbox.exec(line, timeout_s=timeout_s, env=env, on_output=output.feed)
            )
            running.add_done_callback(lambda _: output.close())
            try:
                async for chunk in output.chunks():
                    yield chunk
                result = await self._unless_lost(running)
            finally:
                if not running.done():  # the caller went away: the command is killed
                    running.cancel()
                    with contextlib.suppress(BaseException):
                        await running
            self._published(index, request.command, result)
            if self.record.ending is not None:  # verified, closed or expired under it: the
                status = session_status(self.rollout).value.upper()
                raise SessionStateError(f"session {self.id} is {status}: the command was killed")
            yield ExecDone(index, result, output.dropped)

    def _secrets(self) -> list[str]:
        """What the session's commands were handed that never goes back out: the model
        route's token (or key)."""
        context = self._agent.context
        return [context.model.api_key] if context and context.model else []

    def _published(self, index: int, command: str, result: ExecResult) -> None:
        secrets = self._secrets()
        self._rollouts.publish(
            self.id,
            CommandResult(
                stage=CommandStage.SESSION,
                index=index,
                command=command,
                exit_code=result.exit_code,
                stdout=scrub_text(result.stdout, secrets),
                stderr=scrub_text(result.stderr, secrets),
                stdout_bytes=result.stdout_bytes,
                stderr_bytes=result.stderr_bytes,
                duration_s=result.duration_s,
                timed_out=result.timed_out,
            ),
        )

    async def _unless_lost(self, running: Awaitable[T]) -> T:
        """A command's result; its sandbox lost under it fails the session (SANDBOX)."""
        try:
            return await running
        except SandboxError as exc:
            self._lost(exc)
            raise SessionStateError(
                f"session {self.id} lost its sandbox ({exc}); the session is ending"
            ) from exc

    async def read(self, path: str, max_bytes: int) -> tuple[bytes | None, bool]:
        """Up to `max_bytes` of a regular file (None: none there), and whether it holds more."""
        target = session_path(self._spec.task, path, "path")
        bound = file_bound(max_bytes)
        with self._acting() as sandbox:
            data = await _file_call(sandbox.read_file(target, max_bytes=bound + 1), "path")
        if data is None:
            return None, False
        return data[:bound], len(data) > bound

    async def write(self, path: str, content: bytes) -> None:
        target = session_path(self._spec.task, path, "path")
        check_content(content)
        with self._acting() as sandbox:
            await _file_call(sandbox.write_files({target: content}), "path")

    async def list_files(self, directory: str, max_entries: int) -> tuple[list[FileEntry], bool]:
        """The first regular files beneath `directory`, and whether there are more."""
        task = self._spec.task
        target = session_path(task, directory, "directory") if directory else task_workdir(task)
        bound = list_bound(max_entries)
        with self._acting() as sandbox:
            entries = await _file_call(
                sandbox.list_files(target, max_entries=bound + 1), "directory"
            )
        return entries[:bound], len(entries) > bound


async def _file_call(call: Awaitable[T], field: str) -> T:
    """A sandbox file call; a path it cannot reach is the caller's field, a failure the
    session's state."""
    try:
        return await call
    except ValueError as exc:
        raise SpecError([FieldViolation(field, str(exc))]) from exc
    except SandboxError as exc:
        raise SessionStateError(str(exc)) from exc


class _BoundedOutput:
    """A command's output between the sandbox's callback and the caller: the route's
    secrets scrubbed (`ByteScrubber`: one split across chunks too), at most `bound` bytes
    kept (the rest counted), handed over in chunks of one stream."""

    def __init__(self, bound: int, secrets: list[str]) -> None:
        self._room = bound
        self.dropped = 0
        self._scrubber: ByteScrubber[OutputStream] = ByteScrubber(secrets)
        self._queue: asyncio.Queue[OutputChunk | None] = asyncio.Queue()

    def feed(self, stream: OutputStream, data: bytes) -> None:
        self._keep(stream, self._scrubber.scrub(stream, data))

    def _keep(self, stream: OutputStream, data: bytes) -> None:
        kept = data[: self._room]
        self._room -= len(kept)
        self.dropped += len(data) - len(kept)
        if kept:
            self._queue.put_nowait(OutputChunk(stream, kept))

    def close(self) -> None:
        for stream, held in self._scrubber.flush():
            self._keep(stream, held)
        self._queue.put_nowait(None)

    async def chunks(self) -> AsyncIterator[OutputChunk]:
        item = await self._queue.get()
        while item is not None:
            parts, size = [item.data], len(item.data)
            taken, following = False, None
            while size < _CHUNK_BYTES and not self._queue.empty():
                candidate = self._queue.get_nowait()
                if candidate is None or candidate.stream is not item.stream:
                    taken, following = True, candidate
                    break
                parts.append(candidate.data)
                size += len(candidate.data)
            yield OutputChunk(item.stream, b"".join(parts))
            item = following if taken else await self._queue.get()
