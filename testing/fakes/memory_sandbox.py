"""An in-memory `Sandbox` and its backend: the one seam under the phase machine, faked
small, as httpx's `MockTransport` fakes its transport.

Every command the engine runs (`exec`, `spawn`) goes to the test's `Handler`, which
answers with an exit code or an `ExecResult`, and may write files, sleep (a command that
outlives its deadline) or raise. Files are a dict of absolute path -> bytes, directories
are implied by them. `Hook` is told the name of every other call before it is served
(`create`, `list_files`, `reclaim`, `kill`, ...), so a test can hold or fail the engine
at that point. What the engine did is kept: the commands run, the sandboxes made, and how
many times each was killed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import ClassVar

from service.errors import SandboxError
from service.models import SandboxSpec
from service.sandboxes import (
    Capabilities,
    ExecResult,
    FileEntry,
    OutputCallback,
    OutputStream,
    Reclaimed,
    SandboxRequest,
    Snapshot,
)

__all__ = ["Handler", "Hook", "MemoryBackend", "MemorySandbox", "exited"]

Handler = Callable[["MemorySandbox", str], Awaitable["int | ExecResult"]]
"""Runs one command (as the engine wrote it, `cd` prefix and all) in a sandbox."""
Hook = Callable[[str], Awaitable[None]]
"""Awaited with a call's name (`create`, `list_files`, `kill`, ...) before it is served."""


def exited(code: int = 0, stdout: str = "", stderr: str = "") -> ExecResult:
    """A command's end, as a backend reports it."""
    return ExecResult(code, stdout, stderr, len(stdout), len(stderr), duration_s=0.0)


_TIMED_OUT = ExecResult(-1, "", "", 0, 0, duration_s=0.0, timed_out=True)


async def _nothing(_: str) -> None:
    return None


class _Process:
    """A spawned command: the handler's run, in a task of its own."""

    def __init__(self, run: Awaitable[ExecResult]) -> None:
        self._task = asyncio.ensure_future(run)

    @property
    def running(self) -> bool:
        return not self._task.done()

    async def wait(self) -> ExecResult:
        return await asyncio.shield(self._task)  # cancelling the wait does not kill it

    async def kill(self) -> None:
        self._task.cancel()
        await asyncio.wait([self._task])


class MemorySandbox:
    """A sandbox whose commands are the handler's and whose files are a dict."""

    def __init__(self, sandbox_id: str, handler: Handler, hook: Hook) -> None:
        self._id = sandbox_id
        self._handler = handler
        self._hook = hook
        self.files: dict[str, bytes] = {}
        self.commands: list[str] = []
        """Every command run or spawned, in order."""
        self.kills = 0
        self._processes: list[_Process] = []

    @property
    def id(self) -> str:
        return self._id

    async def exec(
        self,
        command: str,
        *,
        timeout_s: float,
        env: Mapping[str, str] | None = None,
        on_output: OutputCallback | None = None,
    ) -> ExecResult:
        try:
            async with asyncio.timeout(timeout_s):
                return await self._run(command, on_output)
        except TimeoutError:
            return _TIMED_OUT

    async def spawn(
        self,
        command: str,
        *,
        env: Mapping[str, str] | None = None,
        on_output: OutputCallback | None = None,
    ) -> _Process:
        process = _Process(self._run(command, on_output))
        self._processes.append(process)
        return process

    async def _run(self, command: str, on_output: OutputCallback | None) -> ExecResult:
        self.commands.append(command)
        answer = await self._handler(self, command)
        result = exited(answer) if isinstance(answer, int) else answer
        if on_output is not None and result.stdout:
            on_output(OutputStream.STDOUT, result.stdout.encode())
        return result

    async def write_files(self, files: Mapping[str, bytes]) -> None:
        await self._hook("write_files")
        self.files.update(files)

    async def read_file(self, path: str, *, max_bytes: int) -> bytes | None:
        await self._hook("read_file")
        data = self.files.get(path)
        return None if data is None else data[:max_bytes]

    async def list_files(
        self, directory: str, *, max_entries: int, exclude: Collection[str] = ()
    ) -> list[FileEntry]:
        await self._hook("list_files")
        prefix = f"{directory.rstrip('/')}/"
        entries = [
            FileEntry(path.removeprefix(prefix), len(data))
            for path, data in sorted(self.files.items())
            if path.startswith(prefix)
            and not any(path.startswith(f"{prefix}{skipped}/") for skipped in exclude)
        ]
        return entries[:max_entries]

    async def reclaim(
        self, *, remove: Sequence[str] = (), empty_dirs: Sequence[str] = ()
    ) -> Reclaimed:
        await self._hook("reclaim")
        running = [process for process in self._processes if process.running]
        for process in running:
            await process.kill()
        removed = []
        for path in (*remove, *empty_dirs):
            beneath = [p for p in self.files if p == path or p.startswith(f"{path}/")]
            for found in beneath:
                del self.files[found]
            if beneath:
                removed.append(path)
        return Reclaimed(processes=len(running), removed=tuple(removed))

    async def kill(self) -> None:
        self.kills += 1
        await self._hook("kill")
        for process in self._processes:
            await process.kill()


class MemoryBackend:
    """Makes `MemorySandbox`es; it cannot snapshot, so nothing is forked or verified fresh."""

    name = "memory"
    capabilities: ClassVar[Capabilities] = Capabilities(host_socket=False)

    def __init__(self, handler: Handler, hook: Hook | None = None) -> None:
        self._handler = handler
        self._hook = hook or _nothing
        self.requests: list[SandboxRequest] = []
        self.sandboxes: list[MemorySandbox] = []

    def check_ready(self) -> None:
        return None

    async def check_spec(self, spec: SandboxSpec) -> None:
        return None

    def can_snapshot(self, spec: SandboxSpec) -> bool:
        return False

    async def snapshot(self, sandbox: object) -> Snapshot:
        raise SandboxError("memory sandboxes cannot be snapshot")

    async def create(self, request: SandboxRequest) -> MemorySandbox:
        self.requests.append(request)
        await self._hook("create")
        sandbox = MemorySandbox(f"memory-{len(self.sandboxes)}", self._handler, self._hook)
        self.sandboxes.append(sandbox)
        return sandbox

    async def sweep_orphans(self, live_rollout_ids: set[str]) -> int:
        return 0

    async def sweep_rollouts(self, rollout_ids: set[str]) -> int:
        return 0

    @property
    def live_sandboxes(self) -> int:
        return sum(not sandbox.kills for sandbox in self.sandboxes)

    async def close(self) -> None:
        for sandbox in self.sandboxes:
            if not sandbox.kills:
                await sandbox.kill()
