"""One local sandbox: its commands, its files, and its teardown.

Created by `LocalBackend` (service.sandboxes.local.backend), which lays out its host directories
and its memory cgroup and asks the fork server for the sandbox's spawner
(`forkserver`). The spawner starts the bwrap that holds the sandbox's namespaces
(`holder`), joins the cgroup meanwhile, enters the namespaces and then forks
every command there.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from service.errors import SandboxError, VerifierError
from service.images import ImageConfig
from service.sandboxes.base import (
    HOME,
    BackgroundProcess,
    ExecResult,
    FileEntry,
    OutputCallback,
    Reclaimed,
)
from service.sandboxes.deadline import wait_or_kill
from service.sandboxes.local.bwrap import HostView, SandboxLayout, command_tag, sandbox_env
from service.sandboxes.local.cgroup import MemoryCgroups
from service.sandboxes.local.holder import Holder
from service.sandboxes.local.host_kit import forwarder_argv
from service.sandboxes.local.hostfs import (
    list_beneath,
    read_beneath,
    split_sandbox_path,
    write_beneath,
)
from service.sandboxes.local.hostfs_clear import clear_beneath, make_dirs_beneath
from service.sandboxes.local.image_view import image_env
from service.sandboxes.local.network import InternetLink, attach_internet
from service.sandboxes.local.process import SandboxedProcess
from service.sandboxes.local.reaper import Reaper
from service.sandboxes.local.reclaim import SandboxProcesses, kill_all
from service.sandboxes.local.spawner import Spawner
from service.sandboxes.local.system_seal import SealedSystem
from service.sandboxes.seal import SystemDiff

__all__ = ["LIFETIME_MARGIN_S", "LocalSandbox", "SandboxCgroup"]

_log = logging.getLogger(__name__)
LIFETIME_MARGIN_S = 300.0
"""Added to a request's lifetime before the watchdog kills a sandbox nobody killed: the
engine's lifetime counts command budgets, not preparation and file collection."""
_INLINE_COMMAND_BYTES = 64 * 1024
"""Longer commands go through a file: one argv string may not exceed 128 KiB (E2BIG)."""
_COMMANDS_DIR = ".rollout-commands"
_KERNEL_TREES = frozenset({"proc", "sys", "dev"})
_RECLAIM_ROUNDS = 16
"""Kill rounds (each stops all it finds, then kills them) before processes that keep
appearing count as the agent's resistance."""


@dataclass(frozen=True)
class SandboxCgroup:
    """One sandbox's memory cgroup."""

    cgroups: MemoryCgroups
    path: Path

    async def remove(self) -> None:
        await self.cgroups.remove(self.path)


class LocalSandbox:
    """One rollout's bubblewrap sandbox; matches `Sandbox`."""

    def __init__(
        self,
        name: str,
        layout: SandboxLayout,
        spawner: Spawner,
        view: HostView,
        cgroup: SandboxCgroup | None,
        rlimits: Mapping[str, int],
        output_bytes: tuple[int, int],
        on_gone: Callable[[], None],
        reaper: Reaper,
        image: ImageConfig | None = None,
        image_id: str = "",
        forked: bool = False,
        lowers: Sequence[Path] = (),
    ) -> None:
        self.name = name
        """Of its directory and cgroup: its rollout's id, or a warm sandbox's own."""
        self._on_gone = on_gone
        self._reaper = reaper
        self._layout = layout
        self._rlimits = rlimits
        self._spawner = spawner
        self._view = view
        self._holder: Holder | None = None
        self._namespace = ""
        self._cgroup = cgroup
        self._joined = False
        """Whether its spawner joined the cgroup, so that every command was born in it."""
        self._output_bytes = output_bytes
        self._image = image
        """The config of the image it runs on (`image_view`); None on the host's root."""
        self.image_id = image_id
        """The store's id of that image; "" on the host's root."""
        self._forked = forked
        """Started from a snapshot (`snapshot`): on the host's root its home and /tmp
        are overlays only its spawner's mount namespace has."""
        self._lowers = tuple(lowers)
        """Its overlay's lower layers on the host, top first (an image sandbox's)."""
        self._sealed: SealedSystem | None = None
        self._internet: InternetLink | None = None
        """Network FULL opened after creation (`open_internet`)."""
        self._root_fd = -1
        self._roots = _host_roots(layout)
        self._processes: set[SandboxedProcess] = set()
        self._commands = 0
        self._serial = 0
        self._teardown: asyncio.Task[None] | None = None
        self._writes: set[asyncio.Future[None]] = set()
        self._expiry: asyncio.TimerHandle | None = None

    @property
    def id(self) -> str:
        return f"local-{self.name}"

    @property
    def forked(self) -> bool:
        return self._forked

    @property
    def layout(self) -> SandboxLayout:
        return self._layout

    @property
    def proxy_socket_path(self) -> Path:
        """Where the capture proxy binds this sandbox's route socket on the host (it is
        PROXY_SOCKET inside; the directory follows the sandbox when a warm one is renamed)."""
        return self._layout.proxy_dir / "proxy.sock"

    @property
    def forwarder_argv(self) -> list[str]:
        """How the capture proxy's forwarder runs here: on the server's interpreter,
        never the image's (`host_kit`)."""
        return forwarder_argv(on_image=self._image is not None)

    @property
    def cgroup(self) -> SandboxCgroup | None:
        return self._cgroup

    @property
    def alive(self) -> bool:
        """Neither killed nor lost its namespaces."""
        return self._teardown is None and self._holder is not None and self._holder.alive

    def adopt(
        self,
        name: str,
        layout: SandboxLayout,
        cgroup: SandboxCgroup | None,
        rlimits: Mapping[str, int],
    ) -> None:
        """Take a rollout's name, moved directories and cgroup, and limits (a warm sandbox
        being claimed). Its mounts follow the renamed directories: they hold the inodes."""
        self.name = name
        self._layout = layout
        if self._image is None:
            self._roots = _host_roots(layout)
        self._cgroup = cgroup
        self._rlimits = rlimits

    async def open(self) -> None:
        """Wait until the spawner has made the sandbox and entered it."""
        init, unjoined = await self._spawner.ready()
        self._holder = Holder(init)
        self._namespace = self._holder.pid_namespace()
        if self._image is not None or self._forked:
            # Files are reached through the sandbox's own root (its overlays, as its init
            # sees them), held open until teardown. On an image every absolute path is the
            # image's; on the host's root, only its home and /tmp are the sandbox's.
            self._root_fd = self._holder.open_root()
            root = Path(f"/proc/self/fd/{self._root_fd}")
            self._roots = {"": root} if self._image is not None else _trees_inside(root)
        self._joined = unjoined is None
        if unjoined is not None and self._cgroup is not None:
            _log.warning("commands run outside memory cgroup %s: %s", self._cgroup.path, unjoined)

    def expire_after(self, lifetime_s: float) -> None:
        """Kill the sandbox after `lifetime_s` plus a margin, should nobody do it first."""
        if lifetime_s > 0:
            delay_s = lifetime_s + LIFETIME_MARGIN_S
            self._expiry = asyncio.get_running_loop().call_later(delay_s, self._expire)

    def _expire(self) -> None:
        _log.warning("sandbox %s reached its lifetime; killing it", self.id)
        self._begin_teardown()

    def _check_alive(self) -> None:
        if self._teardown is not None:
            raise SandboxError(f"sandbox {self.id} was killed")

    async def _start(
        self, command: str, env: Mapping[str, str] | None, on_output: OutputCallback | None
    ) -> SandboxedProcess:
        if len(command.encode()) > _INLINE_COMMAND_BYTES:
            command = await self._command_file(command)
        self._check_alive()  # from here to the spawner's socket nothing awaits
        if self._spawner.gone is not None:  # the cause, when the holder died with it
            raise SandboxError(self._spawner.gone)
        if self._holder is None or not self._holder.alive:
            raise SandboxError(f"sandbox {self.id} is gone: the holder of its namespaces exited")
        self._serial += 1
        tag = command_tag(self._serial)
        # Root in an image sandbox could drop a tag: its commands are followed by session
        # and parentage, and the reclaim kills its whole pid namespace (`reclaim`).
        uid = self._layout.uid if self._image is None else None
        process = await SandboxedProcess.start(
            self._spawner,
            command,
            sandbox_env(self._view, env, None if self._image is None else image_env(self._image)),
            groups=() if uid is None else (tag,),
            rlimits=self._rlimits,
            owner=None if uid is None else (uid, tag),
            output_bytes=self._output_bytes,
            on_output=on_output,
        )
        if self._teardown is not None:  # killed while this command was starting
            await process.kill()
            self._check_alive()
        self._processes = {p for p in self._processes if not p.done}
        self._processes.add(process)
        return process

    def _split(self, path: str) -> tuple[Path, tuple[str, ...]]:
        """The host directory and components behind a sandbox path (`split_sandbox_path`).

        On an image every path is the sandbox's, but for the kernel's own trees: reached
        host-side as root, /proc/sys or /sys would be the host's settings, never a file."""
        root, parts = split_sandbox_path(path, self._roots)
        if self._image is not None and parts[0] in _KERNEL_TREES:
            raise ValueError(f"sandbox path {path!r} is in /{parts[0]}, which is not a file tree")
        return root, parts

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
        result = await wait_or_kill(process, timeout_s)
        return result if result is not None else replace(await process.wait(), timed_out=True)

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
        """Write files at absolute paths under HOME or /tmp (anywhere on an image
        sandbox); a planted link is replaced."""
        self._check_alive()
        targets = [(path, self._split(path), data) for path, data in files.items()]
        # A cancelled caller leaves the thread writing: teardown waits for it (`_destroy`)
        # and it stops at the next file, so no file lands after the directory is gone.
        writing = asyncio.ensure_future(asyncio.to_thread(self._write_all, targets))
        self._writes.add(writing)
        writing.add_done_callback(self._written)
        await asyncio.shield(writing)

    def _written(self, writing: asyncio.Future[None]) -> None:
        self._writes.discard(writing)
        if not writing.cancelled():
            writing.exception()  # its caller may be gone; it had the error if not

    def _write_all(self, targets: list[tuple[str, tuple[Path, tuple[str, ...]], bytes]]) -> None:
        for path, (root, parts), data in targets:
            if self._teardown is not None:
                raise SandboxError(f"sandbox {self.id} was killed while {path} was being written")
            try:
                write_beneath(root, parts, data, self._layout.uid)
            except OSError as exc:
                raise SandboxError(f"could not write {path} in sandbox {self.id}: {exc}") from exc

    async def read_file(self, path: str, *, max_bytes: int) -> bytes | None:
        """Up to max_bytes of a regular file under HOME or /tmp (anywhere on an image
        sandbox); None if absent.

        A symbolic link is never followed: one at `path` (or on the way) reads as absent.
        """
        self._check_alive()
        root, parts = self._split(path)
        try:
            return await asyncio.to_thread(read_beneath, root, parts, max(max_bytes, 0))
        except OSError as exc:
            raise SandboxError(f"could not read {path} in sandbox {self.id}: {exc}") from exc

    async def list_files(
        self, directory: str, *, max_entries: int, exclude: Collection[str] = ()
    ) -> list[FileEntry]:
        """Regular files beneath a directory under HOME or /tmp, walked host-side without
        following a link (bounds: `hostfs.list_beneath`)."""
        self._check_alive()
        root, parts = self._split(directory)
        try:
            return await asyncio.to_thread(list_beneath, root, parts, max_entries, exclude)
        except OSError as exc:
            raise SandboxError(f"could not list {directory} in sandbox {self.id}: {exc}") from exc

    async def reclaim(
        self, *, remove: Sequence[str] = (), empty_dirs: Sequence[str] = ()
    ) -> Reclaimed:
        """Kill every process of the sandbox's pid namespace but its init and holder
        (`reclaim`), then clear paths host-side (`hostfs_clear`)."""
        self._check_alive()
        killed = await self._kill_commands()
        paths = [*remove, *empty_dirs]
        targets = [(path, self._split(path)) for path in paths]
        made = [self._split(path) for path in empty_dirs]
        try:
            removed = await asyncio.to_thread(self._clear, targets, made)
        except OSError as exc:
            raise SandboxError(f"could not clear paths in sandbox {self.id}: {exc}") from exc
        return Reclaimed(killed, removed)

    async def _kill_commands(self) -> int:
        if not (self._namespace and self.alive):
            raise SandboxError(f"sandbox {self.id} is gone: the holder of its namespaces exited")
        members = self._cgroup.path if self._cgroup is not None and self._joined else None
        killed, done = await kill_all(SandboxProcesses(self._namespace, members), _RECLAIM_ROUNDS)
        if not done:  # the agent's doing: never SANDBOX
            raise VerifierError(f"the agent's processes kept forking after {killed} were killed")
        return killed

    def _clear(
        self,
        targets: list[tuple[str, tuple[Path, tuple[str, ...]]]],
        made: list[tuple[Path, tuple[str, ...]]],
    ) -> tuple[str, ...]:
        removed = tuple(path for path, (root, parts) in targets if clear_beneath(root, parts))
        for root, parts in made:
            make_dirs_beneath(root, parts, self._layout.uid)
        return removed

    async def seal_system(self, *, exempt: Sequence[str] = ()) -> None:
        """Record an image sandbox's system trees from its overlay's upper layer
        (`system_seal`); on the host's root they are read-only to commands: nothing to do."""
        self._check_alive()
        if self._image is None:
            return
        upper, path = self._layout.disk / "upper", image_env(self._image)["PATH"]
        try:
            self._sealed = await asyncio.to_thread(SealedSystem, upper, self._lowers, exempt, path)
        except OSError as exc:
            raise SandboxError(f"could not read sandbox {self.id}'s system trees: {exc}") from exc

    async def system_changes(self, *, path: str | None = None) -> SystemDiff:
        """What changed in the system trees since `seal_system` (commands reclaimed)."""
        self._check_alive()
        if self._sealed is None:
            return SystemDiff(())
        try:
            return await asyncio.to_thread(self._sealed.diff, path)
        except OSError as exc:
            raise SandboxError(f"could not read sandbox {self.id}'s system trees: {exc}") from exc

    async def open_internet(self) -> None:
        """Network FULL from now on, for a sandbox made under NONE (`InternetAccess`):
        pasta attached to its network namespace, as at creation under FULL (`network`)."""
        self._check_alive()
        if self._holder is None or not self._holder.alive:
            raise SandboxError(f"sandbox {self.id} is gone: the holder of its namespaces exited")
        if self._internet is not None:
            return
        cgroup = None if self._cgroup is None else str(self._cgroup.path)
        privileged = os.geteuid() == 0
        self._internet = await attach_internet(self._holder.pidfd, self._layout, cgroup, privileged)

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
        if self._holder is not None:  # a command forked meanwhile dies with its namespace
            await self._holder.kill()
        if self._internet is not None:
            await self._internet.close()
        await self._spawner.close()  # out of the cgroup before its removal
        if self._cgroup is not None:
            await self._cgroup.remove()
        if self._writes:
            await asyncio.wait(self._writes)
        if self._root_fd >= 0:
            # The last hold on an image sandbox's mount tree: closing it unmounts the tree
            # (2-4 ms, tens under load), so not on the event loop.
            root_fd, self._root_fd = self._root_fd, -1
            await asyncio.to_thread(os.close, root_fd)
        await self._reaper.remove(self._layout.root)  # the rest after the result (`reaper`)
        self._on_gone()


def _host_roots(layout: SandboxLayout) -> dict[str, Path]:
    """A host-root sandbox's writable trees, behind which its files are reached."""
    return {HOME: layout.home, "/tmp": layout.tmp}


def _trees_inside(root: Path) -> dict[str, Path]:
    """The same trees reached through the sandbox's root: a forked sandbox's overlays."""
    return {tree: root / tree.lstrip("/") for tree in (HOME, "/tmp")}
