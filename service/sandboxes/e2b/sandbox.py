"""A running E2B sandbox behind the `Sandbox` protocol, driven through the `e2b` SDK.

Every SDK error met here becomes a `SandboxError` (kind SANDBOX).
"""

from __future__ import annotations

import asyncio
import io
import logging
import shlex
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import IO

import httpx
from e2b import (
    AsyncSandbox,
    AuthenticationException,
    CommandExitException,
    FileNotFoundException,
    InvalidArgumentException,
    SandboxException,
    ServiceBusyException,
)
from e2b.sandbox.filesystem.filesystem import WriteEntry
from e2b.sandbox.sandbox_api import SandboxNetworkUpdate
from e2b.sandbox_async.commands.command_handle import AsyncCommandHandle

from service.config import Settings
from service.errors import SandboxError, VerifierError
from service.sandboxes.base import WORKDIR, ExecResult, FileEntry, OutputCallback, Reclaimed
from service.sandboxes.deadline import wait_or_kill
from service.sandboxes.e2b.find_listing import list_by_find
from service.sandboxes.e2b.presence import Presence
from service.sandboxes.e2b.process import E2BProcess, TextOutput
from service.sandboxes.e2b.reclaim import RESISTED, STUCK, reclaim_runs

__all__ = ["KILL_TIMEOUT_S", "SDK_ERRORS", "E2BSandbox"]

_log = logging.getLogger(__name__)

SDK_ERRORS = (
    SandboxException,
    AuthenticationException,
    ServiceBusyException,
    httpx.HTTPError,
    OSError,
)
"""What the e2b SDK raises for a failed call (its own errors, transport errors)."""
KILL_TIMEOUT_S = 10.0
"""Budget of each call that kills a command or a sandbox."""
CONTROL_TIMEOUT_S = 30.0
"""Budget of other control-plane calls about a running sandbox."""
ALL_TRAFFIC = "0.0.0.0/0"
KILL_RETRIES = 3
"""Control-plane retries of a sandbox kill (429/5xx)."""
ENVD_DEADLINE_GRACE_S = 5.0
"""envd's own deadline for a foreground command lies this far past ours: a backstop for a
lost stream, never the one that fires first."""
RECLAIM_TIMEOUT_S = 120.0
"""Budget of one run of the reclaim script (killing a fork bomb's worth, removing trees),
and of each of the service's own root commands (`as_root`)."""
_OUTPUT_TAIL = 2000


def _in_own_session(command: str) -> str:
    """`command` as the leader of a new session, so that killing its process group (the pid
    envd reports, negated) takes everything it started; envd signals only that one pid."""
    quoted = shlex.quote(command)
    return (
        f"if command -v setsid >/dev/null; then exec setsid bash -c {quoted}; "
        f"else exec bash -c {quoted}; fi"
    )


class E2BSandbox:
    """One E2B sandbox. `on_killed` runs once, after the sandbox is gone."""

    def __init__(
        self,
        sdk: AsyncSandbox,
        settings: Settings,
        *,
        on_killed: Callable[[], None],
        presence: Presence,
    ) -> None:
        self._sdk = sdk
        self._settings = settings
        self._on_killed = on_killed
        self._presence = presence
        self._processes: set[E2BProcess] = set()
        self._chores: set[asyncio.Task[None]] = set()
        self._kill_task: asyncio.Task[None] | None = None

    @property
    def id(self) -> str:
        sandbox_id: str = self._sdk.sandbox_id
        return sandbox_id

    async def exec(
        self,
        command: str,
        *,
        timeout_s: float,
        env: Mapping[str, str] | None = None,
        on_output: OutputCallback | None = None,
    ) -> ExecResult:
        process = await self._launch(command, env, on_output, timeout_s + ENVD_DEADLINE_GRACE_S)
        result = await wait_or_kill(process, timeout_s)
        return result if result is not None else process.capture.result(-1, timed_out=True)

    async def spawn(
        self,
        command: str,
        *,
        env: Mapping[str, str] | None = None,
        on_output: OutputCallback | None = None,
    ) -> E2BProcess:
        return await self._launch(command, env, on_output, envd_deadline_s=0)

    async def write_files(self, files: Mapping[str, bytes]) -> None:
        if not files:
            return
        entries = [WriteEntry(path=path, data=data) for path, data in files.items()]
        try:
            await self._sdk.files.write_files(entries)
        except SDK_ERRORS as exc:
            raise SandboxError(f"E2B sandbox {self.id}: could not write files: {exc}") from exc

    async def read_file(self, path: str, *, max_bytes: int) -> bytes | None:
        data = io.BytesIO()
        try:
            await self.download(path, data, max_bytes=max_bytes)
        except FileNotFoundError:
            return None
        return data.getvalue()

    async def download(
        self, path: str, into: IO[bytes], *, max_bytes: int, user: str | None = None
    ) -> int:
        """Copy up to `max_bytes` of a file into `into` through envd's files API; returns how
        many. FileNotFoundError when there is none."""
        try:
            stream = await self._sdk.files.read(path, format="stream", user=user)
        except (FileNotFoundException, InvalidArgumentException) as exc:
            raise FileNotFoundError(path) from exc
        except SDK_ERRORS as exc:
            raise SandboxError(f"E2B sandbox {self.id}: could not read {path}: {exc}") from exc
        size = 0
        try:
            async for chunk in stream:
                size += into.write(chunk[: max_bytes - size])
                if size >= max_bytes:
                    break
        except SDK_ERRORS as exc:
            raise SandboxError(f"E2B sandbox {self.id}: could not read {path}: {exc}") from exc
        finally:
            await stream.aclose()
        return size

    async def upload(self, path: str, data: IO[bytes], *, user: str | None = None) -> None:
        """Write a file from `data`, read as it is sent."""
        try:
            await self._sdk.files.write(path, data, user=user)
        except SDK_ERRORS as exc:
            raise SandboxError(f"E2B sandbox {self.id}: could not write {path}: {exc}") from exc

    async def as_root(self, command: str) -> tuple[int, str]:
        """Run a command of the service's own as root (after `reclaim`: none of the agent's
        is left to meddle); its exit code and the tail of its output."""
        try:
            result = await self._sdk.commands.run(command, user="root", timeout=RECLAIM_TIMEOUT_S)
        except CommandExitException as exc:
            return exc.exit_code, (exc.stderr or exc.stdout)[-_OUTPUT_TAIL:]
        except SDK_ERRORS as exc:
            raise SandboxError(f"E2B sandbox {self.id}: could not run a command: {exc}") from exc
        return result.exit_code, (result.stderr or result.stdout)[-_OUTPUT_TAIL:]

    async def list_files(
        self, directory: str, *, max_entries: int, exclude: Collection[str] = ()
    ) -> list[FileEntry]:
        """`find | sort | head` in the sandbox (`find_listing`): its files API lists a
        directory in one unbounded answer."""
        return await list_by_find(self, directory, max_entries, exclude)

    async def make_dirs(self, *paths: str) -> None:
        """Create directories (and their parents) that commands expect to exist."""
        try:
            await asyncio.gather(*(self._sdk.files.make_dir(path) for path in paths))
        except SDK_ERRORS as exc:
            raise SandboxError(f"E2B sandbox {self.id}: could not prepare it: {exc}") from exc

    async def allow_egress(self, hosts: Sequence[str]) -> None:
        """Let the sandbox reach `hosts` (names or addresses) and nothing else: for a sandbox
        created without internet access whose capture proxy must reach the model."""
        network: SandboxNetworkUpdate = {"allow_out": list(hosts), "deny_out": [ALL_TRAFFIC]}
        try:
            await self._sdk.update_network(network, request_timeout=CONTROL_TIMEOUT_S)
        except SDK_ERRORS as exc:
            raise SandboxError(f"E2B sandbox {self.id}: could not open egress: {exc}") from exc

    async def open_internet(self) -> None:
        """Network FULL from now on (`InternetAccess`): every egress rule replaced by one
        allowing all traffic, as a sandbox created with internet access has."""
        network: SandboxNetworkUpdate = {"allow_out": [ALL_TRAFFIC]}
        try:
            await self._sdk.update_network(network, request_timeout=CONTROL_TIMEOUT_S)
        except SDK_ERRORS as exc:
            raise SandboxError(f"E2B sandbox {self.id}: could not open egress: {exc}") from exc

    async def reclaim(
        self, *, remove: Sequence[str] = (), empty_dirs: Sequence[str] = ()
    ) -> Reclaimed:
        """Kill every process of the VM but init, the kernel's and envd, then clear paths:
        a root script (`reclaim`)."""
        killed, removed = 0, []
        for run in reclaim_runs(remove, empty_dirs):
            try:
                result = await self._sdk.commands.run(
                    run.command, user="root", timeout=RECLAIM_TIMEOUT_S
                )
            except CommandExitException as exc:
                if exc.exit_code in (RESISTED, STUCK):  # the agent's doing: never SANDBOX
                    raise VerifierError(f"could not reclaim the sandbox: {exc}") from exc
                raise SandboxError(f"E2B sandbox {self.id}: could not reclaim: {exc}") from exc
            except SDK_ERRORS as exc:
                raise SandboxError(f"E2B sandbox {self.id}: could not reclaim: {exc}") from exc
            more_killed, more_removed = run.tally(result.stdout)
            killed += more_killed
            removed += more_removed
        return Reclaimed(killed, tuple(removed))

    async def kill(self) -> None:
        """Destroy the sandbox. Idempotent; never raises; finishes even if cancelled."""
        if self._kill_task is None:
            self._kill_task = asyncio.create_task(self._destroy())
        await asyncio.shield(self._kill_task)

    async def kill_process_group(self, pid: int) -> None:
        """SIGKILL a command's process group (see `_in_own_session`), then the command."""
        group = f"kill -KILL -- -{pid} 2>/dev/null; true"
        try:
            await self._sdk.commands.run(group, timeout=KILL_TIMEOUT_S)
        except SDK_ERRORS as exc:
            _log.debug("E2B sandbox %s: kill of process group %d: %s", self.id, pid, exc)
        try:
            await self._sdk.commands.kill(pid, request_timeout=KILL_TIMEOUT_S)
        except SDK_ERRORS as exc:
            _log.debug("E2B sandbox %s: kill of command %d: %s", self.id, pid, exc)

    async def until_gone(self) -> None:
        """Return once the backend's listings say the sandbox is gone (`presence`). A sandbox
        can vanish without closing the command streams, which would then wait forever."""
        await self._presence.until_gone(self.id)

    async def _launch(
        self,
        command: str,
        env: Mapping[str, str] | None,
        on_output: OutputCallback | None,
        envd_deadline_s: float,
    ) -> E2BProcess:
        capture = TextOutput(self._settings, on_output)
        start = asyncio.create_task(
            self._sdk.commands.run(
                _in_own_session(command),
                background=True,
                envs=dict(env or {}),
                cwd=WORKDIR,
                on_stdout=capture.stdout,
                on_stderr=capture.stderr,
                timeout=envd_deadline_s,
                retain_output=False,
            )
        )
        try:
            handle = await asyncio.shield(start)
        except asyncio.CancelledError:
            start.add_done_callback(self._kill_orphan)
            raise
        except SDK_ERRORS as exc:
            raise SandboxError(f"E2B sandbox {self.id}: could not start a command: {exc}") from exc
        process = E2BProcess(
            handle,
            capture,
            sandbox_id=self.id,
            until_gone=self.until_gone,
            kill_group=self.kill_process_group,
            on_exit=self._processes.discard,
        )
        self._processes.add(process)
        return process

    def _kill_orphan(self, start: asyncio.Task[AsyncCommandHandle[None]]) -> None:
        """A command started for a caller that was cancelled meanwhile: kill it."""
        if start.cancelled() or start.exception() is not None:
            return
        handle = start.result()
        chore = asyncio.create_task(self._kill_started(handle))
        self._chores.add(chore)
        chore.add_done_callback(self._chores.discard)

    async def _kill_started(self, handle: AsyncCommandHandle[None]) -> None:
        await self.kill_process_group(handle.pid)
        await handle.disconnect()

    async def _destroy(self) -> None:
        for process in self._processes:
            process.killed = True
        try:
            await self._sdk.kill(request_timeout=KILL_TIMEOUT_S, retries=KILL_RETRIES)
        except SDK_ERRORS as exc:
            _log.warning(
                "could not kill E2B sandbox %s (E2B ends it at its timeout, the next start's "
                "sweep kills it): %s",
                self.id,
                exc,
            )
        finally:
            self._on_killed()
