"""One local sandbox: its commands, its files, and its teardown.

Created by `LocalBackend` (service.sandboxes.local), which lays out its host directories
and its memory cgroup. Commands are started by the sandbox's launcher thread: one thread
per sandbox that joins the sandbox's memory cgroup once, so every command it forks is
born there (see `cgroup.MemoryCgroups.join`). The holder of its namespaces
(`local_holder`), which only sleeps, is started meanwhile by a thread of its own, which
lives as long as the holder (bwrap's `--die-with-parent` watches the forking thread).
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from service.errors import SandboxError
from service.sandboxes.base import HOME, BackgroundProcess, ExecResult, FileEntry, OutputCallback
from service.sandboxes.bwrap import HostView, SandboxLayout, command_tag, sandbox_env
from service.sandboxes.cgroup import MemoryCgroups
from service.sandboxes.hostfs import list_beneath, read_beneath, split_sandbox_path, write_beneath
from service.sandboxes.local_holder import Holder
from service.sandboxes.local_process import SandboxedProcess

__all__ = ["LIFETIME_MARGIN_S", "LocalSandbox", "SandboxCgroup", "remove_tree"]

_log = logging.getLogger(__name__)
LIFETIME_MARGIN_S = 300.0
"""Added to a request's lifetime before the watchdog kills a sandbox nobody killed: the
engine's lifetime counts command budgets, not preparation and file collection."""
_INLINE_COMMAND_BYTES = 64 * 1024
"""Longer commands go through a file: one argv string may not exceed 128 KiB (E2BIG)."""
_COMMANDS_DIR = ".rollout-commands"


def remove_tree(path: Path) -> None:
    """Remove a sandbox's host directory (rmtree never follows the links it planted)."""
    try:
        shutil.rmtree(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        _log.warning("could not remove sandbox directory %s: %s", path, exc)


def _nothing() -> None:
    return None


@dataclass(frozen=True)
class SandboxCgroup:
    """One sandbox's memory cgroup."""

    cgroups: MemoryCgroups
    path: Path

    def join(self) -> None:
        """Move the calling thread into this group; commands it starts are born there."""
        try:
            self.cgroups.join(self.path)
        except OSError as exc:
            _log.warning("commands run outside memory cgroup %s: %s", self.path, exc)

    async def remove(self) -> None:
        await self.cgroups.remove(self.path)


class LocalSandbox:
    """One rollout's bubblewrap sandbox; matches `Sandbox`."""

    def __init__(
        self,
        rollout_id: str,
        layout: SandboxLayout,
        enter: Callable[..., list[str]],
        view: HostView,
        cgroup: SandboxCgroup | None,
        output_bytes: tuple[int, int],
        on_gone: Callable[[], None],
    ) -> None:
        self._id = f"local-{rollout_id}"
        self._on_gone = on_gone
        self._layout = layout
        self._enter = enter
        self._view = view
        self._holder: Holder | None = None
        self._cgroup = cgroup
        self._launcher = ThreadPoolExecutor(
            max_workers=1,
            thread_name_prefix=self._id,
            initializer=cgroup.join if cgroup is not None else None,
        )
        self._launcher.submit(_nothing)  # join the cgroup now, while the holder starts
        self._holding = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"{self._id}-holder")
        self._output_bytes = output_bytes
        self._roots = {HOME: layout.home, "/tmp": layout.tmp}
        self._processes: set[SandboxedProcess] = set()
        self._commands = 0
        self._serial = 0
        self._teardown: asyncio.Task[None] | None = None
        self._expiry: asyncio.TimerHandle | None = None

    @property
    def id(self) -> str:
        return self._id

    async def open(self, holder_argv: Sequence[str]) -> None:
        """Start the holder of the sandbox's namespaces from the launcher thread."""
        loop = asyncio.get_running_loop()
        start = partial(Holder.start, holder_argv, user_namespace=self._layout.uid is None)
        self._holder = await loop.run_in_executor(self._holding, start)

    def expire_after(self, lifetime_s: float) -> None:
        """Kill the sandbox after `lifetime_s` plus a margin, should nobody do it first."""
        if lifetime_s > 0:
            delay_s = lifetime_s + LIFETIME_MARGIN_S
            self._expiry = asyncio.get_running_loop().call_later(delay_s, self._expire)

    def _expire(self) -> None:
        _log.warning("sandbox %s reached its lifetime; killing it", self._id)
        self._begin_teardown()

    def _check_alive(self) -> None:
        if self._teardown is not None:
            raise SandboxError(f"sandbox {self._id} was killed")

    async def _start(
        self, command: str, env: Mapping[str, str] | None, on_output: OutputCallback | None
    ) -> SandboxedProcess:
        if len(command.encode()) > _INLINE_COMMAND_BYTES:
            command = await self._command_file(command)
        self._check_alive()  # from here to the launcher's queue nothing awaits
        if self._holder is None or not self._holder.alive:
            raise SandboxError(f"sandbox {self._id} is gone: the holder of its namespaces exited")
        self._serial += 1
        tag = command_tag(self._serial)
        process = await SandboxedProcess.start(
            self._enter(self._holder.options, command, tag=tag),
            sandbox_env(self._view, env),
            self._launcher,
            owner=None if self._layout.uid is None else (self._layout.uid, tag),
            output_bytes=self._output_bytes,
            on_output=on_output,
        )
        if self._teardown is not None:  # killed while this command was starting
            await process.kill()
            self._check_alive()
        self._processes = {p for p in self._processes if not p.done}
        self._processes.add(process)
        return process

    async def _command_file(self, command: str) -> str:
        """Stage a long command in the sandbox's /tmp; returns the command that sources it."""
        self._commands += 1
        path = f"/tmp/{_COMMANDS_DIR}/{self._commands}.sh"
        await self.write_files({path: command.encode()})
        return f". {path}"

    async def exec(
        self,
        command: str,
        *,
        timeout_s: float,
        env: Mapping[str, str] | None = None,
        on_output: OutputCallback | None = None,
    ) -> ExecResult:
        """Run `bash -c command` in WORKDIR; kill it (timed_out=True) at the deadline."""
        process = await self._start(command, env, on_output)
        try:
            return await asyncio.wait_for(process.wait(), timeout_s)
        except TimeoutError:
            await process.kill()
            return replace(await process.wait(), timed_out=True)
        except asyncio.CancelledError:
            await asyncio.shield(process.kill())
            raise

    async def spawn(
        self,
        command: str,
        *,
        env: Mapping[str, str] | None = None,
        on_output: OutputCallback | None = None,
    ) -> BackgroundProcess:
        """Start `bash -c command` in WORKDIR in the background, streaming its output."""
        return await self._start(command, env, on_output)

    async def write_files(self, files: Mapping[str, bytes]) -> None:
        """Write files at absolute paths under HOME or /tmp; a planted link is replaced."""
        self._check_alive()
        targets = [
            (path, split_sandbox_path(path, self._roots), data) for path, data in files.items()
        ]
        await asyncio.to_thread(self._write_all, targets)

    def _write_all(self, targets: list[tuple[str, tuple[Path, tuple[str, ...]], bytes]]) -> None:
        for path, (root, parts), data in targets:
            try:
                write_beneath(root, parts, data, self._layout.uid)
            except OSError as exc:
                raise SandboxError(f"could not write {path} in sandbox {self._id}: {exc}") from exc

    async def read_file(self, path: str, *, max_bytes: int) -> bytes | None:
        """Up to max_bytes of a regular file under HOME or /tmp; None if absent.

        A symbolic link is never followed: one at `path` (or on the way) reads as absent.
        """
        self._check_alive()
        root, parts = split_sandbox_path(path, self._roots)
        try:
            return await asyncio.to_thread(read_beneath, root, parts, max(max_bytes, 0))
        except OSError as exc:
            raise SandboxError(f"could not read {path} in sandbox {self._id}: {exc}") from exc

    async def list_files(self, directory: str, *, max_entries: int) -> list[FileEntry]:
        """Regular files beneath a directory under HOME or /tmp, walked host-side without
        following a link (bounds: `hostfs.list_beneath`)."""
        self._check_alive()
        root, parts = split_sandbox_path(directory, self._roots)
        try:
            return await asyncio.to_thread(list_beneath, root, parts, max_entries)
        except OSError as exc:
            raise SandboxError(f"could not list {directory} in sandbox {self._id}: {exc}") from exc

    async def kill(self) -> None:
        """Kill every process of the sandbox and remove its directories. Never raises."""
        await asyncio.shield(self._begin_teardown())

    def _begin_teardown(self) -> asyncio.Task[None]:
        if self._teardown is None:
            self._teardown = asyncio.get_running_loop().create_task(self._destroy())
        return self._teardown

    async def _destroy(self) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
        await asyncio.gather(*(process.kill() for process in self._processes))
        if self._holder is not None:  # queued after any command being started
            await asyncio.get_running_loop().run_in_executor(self._launcher, self._holder.kill)
        await asyncio.to_thread(self._launcher.shutdown)  # its thread leaves the cgroup
        await asyncio.to_thread(self._holding.shutdown)
        if self._cgroup is not None:
            await self._cgroup.remove()
        await asyncio.to_thread(remove_tree, self._layout.root)
        self._on_gone()
