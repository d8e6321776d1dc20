"""The `local` sandbox backend: bubblewrap on this host, the embedded default.

A local sandbox is a pair of private host directories (`<state_dir>/sandboxes/<id>/`
holds its home and /tmp, on a size-limited filesystem of its own: `disk`), a network
namespace of its own (`network` under FULL), a host uid of its own when the server runs
as root, a memory cgroup where the host allows one, one long-lived bwrap holding its
namespaces (`holder`), and a spawner inside them, forked from the backend's fork server
(`forkserver`), which forks every exec and spawn there (`process`), like `docker exec`:
a background daemon a command starts may outlive that command, until the sandbox is
killed. What a sandbox sees of the host is laid out in `bwrap`; a sandbox on an image
(`spec.sandbox.image`, `image`) runs on the image's root through an overlay of its own
instead (`image_view`, `overlay_start`), as root in a user namespace of its own. A
group's template sandbox is frozen as a layer its members start from, copy-on-write
(`LocalBackend.snapshot`, the `snapshot` module). A missing tool is an error at
construction; commands never run unsandboxed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import hashlib
import logging
import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar

from service.config import Settings
from service.errors import FieldViolation, SandboxError, SpecError
from service.host_python import host_python
from service.images import BASE_NAMES, Image, ImageStore, qualify
from service.models import NetworkPolicy, Resources, SandboxSpec
from service.sandboxes.base import HOME, WORKDIR, Capabilities, Sandbox, SandboxRequest, Snapshot
from service.sandboxes.local.bwrap import (
    SANDBOX_USER,
    SandboxLayout,
    etc_overlay,
    holder_argv,
    host_view,
    require_bwrap,
    sandbox_uid,
)
from service.sandboxes.local.cgroup import MemoryCgroups
from service.sandboxes.local.disk_pool import DiskPool
from service.sandboxes.local.image import (
    BASE_NOT_MADE,
    HOST_IMAGE,
    ImageRoots,
    UidBlocks,
    image_overlay,
    prepare_upper,
)
from service.sandboxes.local.image_view import (
    image_holder_command,
    image_mount_args,
    image_mount_points,
)
from service.sandboxes.local.limits import Limits
from service.sandboxes.local.network import (
    MISSING_TOOLS,
    FullNetwork,
    full_network,
    has_network_tools,
    resolv_conf,
)
from service.sandboxes.local.reaper import Reaper, kill_leftover_holders
from service.sandboxes.local.removal import remove_tree
from service.sandboxes.local.sandbox import LocalSandbox, SandboxCgroup
from service.sandboxes.local.snapshot import (
    LocalSnapshot,
    home_overlays,
    image_lower,
    prepare_home_overlays,
    take_carried,
    take_snapshot,
)
from service.sandboxes.local.spawner import ForkServer, SpawnerSetup
from service.sandboxes.local.tree import await_exits
from service.sandboxes.local.user_counts import sandbox_shares
from service.sandboxes.local.warm import WarmKey, WarmPool
from service.sandboxes.local.warm_agent import WarmAgents

__all__ = ["LocalBackend", "LocalSandbox", "require_bwrap"]


def _quiet(_: str) -> None:
    """Where image progress goes when the caller wants none."""


_log = logging.getLogger(__name__)
_ROLLOUT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_BASE_NAMES = {qualify(name) for name in BASE_NAMES}
_ID_BLOCKS = Path("/run/rollout-service/id-blocks")
"""Lock files of the host id blocks image sandboxes hold, shared by every server here."""


def _write_readable(path: Path, text: str) -> None:
    """Write a file of the sandbox's /etc: every sandbox user reads it, whatever the
    server's umask (a service manager's UMask=0077)."""
    path.write_text(text)
    os.chmod(path, 0o644)


class LocalBackend:
    """Creates bubblewrap sandboxes on this host; matches `SandboxBackend`."""

    name = "local"
    capabilities: ClassVar[Capabilities] = Capabilities(
        host_socket=True, host_cache=True, store_images=True
    )

    def __init__(self, settings: Settings) -> None:
        self._bwrap = require_bwrap()
        host_python()  # chosen now, so that none (or a closed one) is said at start
        self._settings = settings
        self._state_dir = Path(os.path.realpath(settings.state_dir))
        self._root = self._state_dir / "sandboxes"
        self._snapshots_dir = self._state_dir / "snapshots"
        self._snapshots: set[Path] = set()
        """The directories of the snapshots not released yet (`snapshot`)."""
        self._view = host_view(settings)
        self._user_counts = sandbox_shares(settings.max_running)
        self._privileged = os.geteuid() == 0
        key = hashlib.sha256(str(self._state_dir).encode()).hexdigest()[:12]
        self._cgroups = MemoryCgroups(key)
        self._sandboxes: dict[str, LocalSandbox] = {}
        self._forks = ForkServer(settings.cache_dir)
        pooled = settings.local_disk_pool if self._privileged else 0
        default_limits = Limits.resolve(Resources(), settings)
        default_disk = default_limits.disk_bytes
        self._disks = DiskPool(self._state_dir, pooled, default_disk)
        self._reaper = Reaper(self._disks.recycle)
        self._warm = WarmPool(self._warm_size, self._build_warm, self._settling)
        self._agents = self._warm_agents(settings, default_limits.rlimits)
        store = ImageStore.of_server(settings)
        owned = None if self._privileged else self._state_dir / "images"
        self._images = ImageRoots(store, settings.sandbox_image, owned=owned)
        self._id_blocks = UidBlocks(_ID_BLOCKS)
        self._image_holds: dict[int, int] = {}
        """An image sandbox's id block -> its hold on the image (`ImageStore.hold`)."""
        if not self._privileged:
            self._unprivileged_start()

    def _warm_agents(self, settings: Settings, rlimits: Mapping[str, int]) -> WarmAgents | None:
        """Agents started ahead: on unless turned off, or the server is not root (its
        sandboxes may have no memory cgroup to bound an idle agent), or there is no pool."""
        if not (settings.local_warm_agents and self._privileged and settings.local_warm_sandboxes):
            return None
        return WarmAgents(
            rlimits,
            decay_s=settings.local_warm_agents_decay_s,
            min_available_mb=settings.local_warm_agents_min_available_mb,
            learnt=self._warm.refill,
        )

    async def _settling(self, sandbox: LocalSandbox) -> None:
        if self._agents is not None:
            await self._agents.settling(sandbox)

    def _warm_size(self, key: WarmKey) -> int:
        """Ready sandboxes to keep of a kind: the setting's without an agent; with one, as
        many as its demand wants, within the maximum over all kinds (`warm_agent`)."""
        if not key.agent:
            return self._settings.local_warm_sandboxes
        if self._agents is None:
            return 0
        others = self._warm.count(lambda other: bool(other.agent) and other != key)
        wanted = self._agents.wanted(key)
        return max(0, min(wanted, self._settings.local_warm_agents_max - others))

    def _unprivileged_start(self) -> None:
        """Say in one line what a server not running as root goes without; fall back to
        the host's root when the default image cannot be had."""
        base = self._images.store.made_base()
        images = (
            "the Debian base made ahead (copied at first use, every file root's inside; "
            "no other owner), and images built or imported rootless, on it"
            if base is not None
            else f"none ({BASE_NOT_MADE})"
        )
        fallback = ""
        default = self._images.default
        if default != HOST_IMAGE and (base is None or qualify(default) not in _BASE_NAMES):
            self._images.default = HOST_IMAGE
            fallback = f"; default image {default!r} unavailable, using host"
        memory = "" if self._cgroups.enabled else "memory cgroup (per-process rlimits only), "
        _log.warning(
            "running unprivileged (uid %d): off: disk quota (spec.sandbox.resources.disk_mb "
            "refused; only each file is bounded), %sper-sandbox host uids, group snapshots; "
            "images: %s%s",
            os.geteuid(),
            memory,
            images,
            fallback,
        )

    def check_ready(self) -> None:
        """Always ready: bwrap was found when the backend was built."""

    async def check_spec(self, spec: SandboxSpec) -> None:
        """Refuse an image the store lacks (the default base is made at first use), and a
        verifier under FULL this host cannot give (before the agent runs for nothing)."""
        if not self._privileged and spec.resources.disk_mb > 0:
            why = "a disk quota needs a server running as root (a loop-mounted filesystem)"
            raise SpecError([FieldViolation("spec.sandbox.resources.disk_mb", why)])
        opens = spec.network is NetworkPolicy.NONE and spec.verifier_policy is NetworkPolicy.FULL
        if opens and not has_network_tools():
            why = f"FULL: {MISSING_TOOLS}; set NONE to verify offline"
            raise SpecError([FieldViolation("spec.sandbox.verifier_network", why)])
        await self._images.check(spec.image)

    def can_snapshot(self, spec: SandboxSpec) -> bool:
        """Snapshots are overlay layers: mounting them needs a server running as root."""
        return self._privileged

    async def snapshot(self, sandbox: Sandbox) -> LocalSnapshot:
        """Freeze what `sandbox` (reclaimed) wrote: its image's overlay upper layer, or its
        home and /tmp on the host's root (`snapshot`). SandboxError if it cannot."""
        local = self._mine(sandbox)
        take = functools.partial(take_snapshot, local.layout, local.image_id)
        return await self._freeze(local, local.name, take)

    async def _freeze(
        self,
        sandbox: LocalSandbox,
        name: str,
        take: Callable[[Path, Callable[[LocalSnapshot], None]], LocalSnapshot],
    ) -> LocalSnapshot:
        """Run `take` into a new snapshot directory in a thread, and hold what it made."""
        directory = self._snapshots_dir / name
        self._snapshots.add(directory)
        self._snapshots_dir.mkdir(mode=0o700, exist_ok=True)
        taking = asyncio.ensure_future(asyncio.to_thread(take, directory, self._released))
        try:
            return await asyncio.shield(taking)
        except OSError as exc:
            self._snapshots.discard(directory)
            raise SandboxError(f"could not snapshot sandbox {sandbox.id}: {exc}") from exc
        except asyncio.CancelledError:  # the copy runs on in its thread: undo it after
            await asyncio.wait([taking])
            if not taking.exception():
                await taking.result().release()
            self._snapshots.discard(directory)
            raise

    def can_carry(self, spec: SandboxSpec) -> bool:
        """Carried paths are snapshot layers too (`can_snapshot`)."""
        return self._privileged

    async def carry(
        self, sandbox: Sandbox, paths: Sequence[str], *, over: Snapshot | None = None
    ) -> LocalSnapshot:
        """Freeze `paths` of what `sandbox` (reclaimed) wrote, as a layer for
        `SandboxRequest.carried` over `over` (`snapshot.take_carried`). SandboxError if it
        cannot."""
        local = self._mine(sandbox)
        below = None if over is None or local.forked else self._own_snapshot(over)
        take = functools.partial(
            take_carried, local.layout, local.image_id, local.forked, tuple(paths), below
        )
        return await self._freeze(local, f"{local.name}.carried", take)

    def _mine(self, sandbox: Sandbox) -> LocalSandbox:
        if not (isinstance(sandbox, LocalSandbox) and self._sandboxes.get(sandbox.name) is sandbox):
            raise ValueError(f"sandbox {sandbox.id} is not one of this backend's")
        if not self._privileged:
            raise SandboxError("snapshots need a server running as root")
        return sandbox

    def _released(self, snapshot: LocalSnapshot) -> None:
        self._snapshots.discard(snapshot.directory)

    async def create(self, request: SandboxRequest) -> LocalSandbox:
        """A sandbox for the rollout: a warm one renamed to it, else one made now (from the
        request's snapshot if any)."""
        rollout_id = request.rollout_id
        if not _ROLLOUT_ID.fullmatch(rollout_id):
            raise ValueError(f"rollout id {rollout_id!r} cannot name a sandbox directory")
        if rollout_id in self._sandboxes:
            raise SandboxError(f"a local sandbox for rollout {rollout_id} already exists")
        limits = Limits.resolve(request.spec.resources, self._settings)
        image = await self._images.resolve(request.spec.image, request.on_progress or _quiet)
        key = WarmKey(request.spec.network, limits.disk_bytes, "" if image is None else image.id)
        layers = tuple(
            self._own(layer, key) for layer in (request.carried, request.snapshot) if layer
        )
        # Never a warm one from a snapshot: its layer is mounted as a sandbox starts.
        warm = None if layers else await self._take_warm(key, request.agent)
        sandbox = None if warm is None else await self._adopt(warm, rollout_id, limits)
        if sandbox is not None and self._agents is not None:
            try:
                await self._agents.claim(sandbox, limits.rlimits, request.agent)
            except BaseException:
                await sandbox.kill()
                raise
        if sandbox is None:
            sandbox = await self._build(rollout_id, key, limits, layers)
        if not layers:
            self._warm.refill(key)
            if self._agents is not None and request.agent:
                with_agent = dataclasses.replace(key, agent=request.agent)
                self._agents.started(sandbox, with_agent)
                self._warm.refill(with_agent)
        sandbox.expire_after(request.lifetime_s)
        return sandbox

    async def _take_warm(self, key: WarmKey, agent: str) -> LocalSandbox | None:
        """A ready sandbox with `agent` started ahead, else one without any: never one with
        another agent, whose killing would delay this rollout."""
        if self._agents is not None and agent:
            warm = await self._warm.take(dataclasses.replace(key, agent=agent))
            if warm is not None:
                return warm
        return await self._warm.take(key)

    def _own_snapshot(self, snapshot: object) -> LocalSnapshot:
        """The snapshot as this backend's, not released."""
        if not isinstance(snapshot, LocalSnapshot) or snapshot.directory not in self._snapshots:
            raise SandboxError("the snapshot is not one of this backend's, or was released")
        return snapshot

    def _own(self, snapshot: object, key: WarmKey) -> LocalSnapshot:
        """The snapshot as this backend's, taken on the same image and not released."""
        snapshot = self._own_snapshot(snapshot)
        if snapshot.image_id != key.image:
            raise SandboxError("the snapshot was taken on another image than the sandbox's")
        return snapshot

    async def _build_warm(self, name: str, key: WarmKey) -> LocalSandbox:
        """A warm sandbox, with the agent of its kind started ahead in it (`warm_agent`)."""
        sandbox = await self._build(name, key)
        if self._agents is not None:
            await self._agents.start_in(sandbox, key)
        return sandbox

    async def _build(
        self,
        name: str,
        key: WarmKey,
        limits: Limits | None = None,
        layers: tuple[LocalSnapshot, ...] = (),
    ) -> LocalSandbox:
        """Make a sandbox's directories (and cgroup), from snapshot layers if given (top
        first); its spawner starts bwrap in them."""
        limits = limits or Limits.resolve(Resources(), self._settings)
        image = self._images.by_id(key.image) if key.image else None
        layout = SandboxLayout(self._root / name, self._sandbox_uid(name, image))
        try:
            network = self._network(key.network, layout)
            if self._has_leftovers(name):
                await self._discard(name)  # a crashed run's, under the same id
            self._disks.first_use(key.disk_bytes)
            prepare = functools.partial(self._prepare, layout, key, image, layers)
            overlays = await self._prepared(layout, prepare)
        except BaseException:
            self._release(layout.uid)
            raise
        group = self._cgroups.create(name, limits.memory_bytes)
        cgroup = None if group is None else SandboxCgroup(self._cgroups, group)
        mounts = None if image is None else image_mount_args(self._view, layout)
        command = None if image is None else image_holder_command(image.config)
        holder = holder_argv(self._bwrap, self._view, layout, mounts=mounts, command=command)
        setup = SpawnerSetup(
            holder=holder,
            cgroup=None if group is None else str(group),
            uid=layout.uid,
            disk=str(layout.disk) if self._privileged else None,
            network=network,
            overlays=overlays,
            image=image is not None and self._privileged,
            own_user_namespace=not self._privileged,
            user_counts=self._user_counts,
        )
        try:
            spawner = await self._forks.spawner(setup)
        except BaseException:
            if cgroup is not None:
                await cgroup.remove()
            await asyncio.to_thread(remove_tree, layout.root)
            self._release(layout.uid)
            raise
        output_bytes = (self._settings.output_head_bytes, self._settings.output_tail_bytes)
        sandbox = LocalSandbox(
            name,
            layout,
            spawner,
            self._view,
            cgroup,
            limits.rlimits,
            output_bytes,
            on_gone=lambda: self._forget(sandbox),
            reaper=self._reaper,
            image=None if image is None else image.config,
            image_id=key.image,
            forked=bool(layers),
            lowers=_lowers(image, layers),
        )
        self._sandboxes[name] = sandbox
        if self._agents is not None:
            self._agents.register(sandbox, key)
        try:
            await sandbox.open()
        except BaseException:
            await sandbox.kill()
            raise
        return sandbox

    async def _adopt(
        self, sandbox: LocalSandbox, rollout_id: str, limits: Limits
    ) -> LocalSandbox | None:
        """Rename a warm sandbox's directories and cgroup to the rollout's and set its
        limits; None (and the sandbox killed) if that failed, or cancelled."""
        warm_name = sandbox.name
        try:
            if self._has_leftovers(rollout_id):
                await self._discard(rollout_id)
            self._rename(sandbox, rollout_id, limits)
        except OSError as exc:
            _log.warning("could not claim warm sandbox %s: %s", warm_name, exc)
            await sandbox.kill()
            return None
        except BaseException:
            await asyncio.shield(sandbox.kill())
            raise
        return sandbox

    def _rename(self, sandbox: LocalSandbox, rollout_id: str, limits: Limits) -> None:
        """On the loop, awaiting nothing (renames are quick): the sandbox always knows
        where its directories and cgroup are, so a kill at any point finds them."""
        layout = SandboxLayout(self._root / rollout_id, sandbox.layout.uid)
        sandbox.layout.root.rename(layout.root)
        self._sandboxes[rollout_id] = self._sandboxes.pop(sandbox.name)
        sandbox.adopt(rollout_id, layout, sandbox.cgroup, limits.rlimits)
        if sandbox.cgroup is not None:
            group = self._cgroups.rename(sandbox.cgroup.path, rollout_id)
            sandbox.adopt(rollout_id, layout, SandboxCgroup(self._cgroups, group), limits.rlimits)
            self._cgroups.limit(group, limits.memory_bytes)

    async def warm_up(self, network: NetworkPolicy = NetworkPolicy.NONE) -> None:
        """Make the warm sandboxes of this kind, and the disk pool's disks, now and wait for
        them (rather than after the first rollout that asks for one), and for every sandbox
        being made (those with an agent started ahead too)."""
        disk_bytes = Limits.resolve(Resources(), self._settings).disk_bytes
        self._disks.fill(disk_bytes)
        await self._disks.filled()
        image = await self._images.resolve("", _quiet)
        key = WarmKey(network, disk_bytes, "" if image is None else image.id)
        self._warm.refill(key)
        await self._warm.wait()
        if self._agents is not None:
            await self._agents.all_settled()

    def _forget(self, sandbox: LocalSandbox) -> None:
        if self._sandboxes.get(sandbox.name) is sandbox:
            del self._sandboxes[sandbox.name]
        self._warm.forget(sandbox)
        if self._agents is not None:
            self._agents.ended(sandbox)
        self._release(sandbox.layout.uid)

    def _release(self, uid: int | None) -> None:
        """Give back an image sandbox's id block and its hold on the image."""
        self._id_blocks.release(uid)
        hold = self._image_holds.pop(uid, None) if uid is not None else None
        if hold is not None:
            os.close(hold)

    def _sandbox_uid(self, name: str, image: Image | None) -> int | None:
        """The host uid of a host-root sandbox, or the first id of an image sandbox's block;
        None (the server's own) when not running as root."""
        if not self._privileged:
            return None
        if image is not None:
            first = self._id_blocks.claim(f"{self._state_dir}\0{name}")
            self._image_holds[first] = self._images.store.hold(image.id)  # prune leaves it
            return first
        return sandbox_uid(self._state_dir, name)

    async def _prepared(
        self, layout: SandboxLayout, prepare: Callable[[], list[dict[str, Any]]]
    ) -> list[dict[str, Any]]:
        """Make the sandbox's directories (and its disk) in a thread (`_prepare`); the
        overlays its spawner mounts (`overlay_start`)."""
        preparing = asyncio.ensure_future(asyncio.to_thread(prepare))
        try:
            return await asyncio.shield(preparing)
        except BaseException as exc:
            await asyncio.wait([preparing])  # its thread runs on if we were cancelled
            await asyncio.shield(asyncio.to_thread(remove_tree, layout.root))
            if isinstance(exc, OSError):
                raise SandboxError(f"could not prepare sandbox {layout.root.name}: {exc}") from exc
            raise

    def _network(self, network: NetworkPolicy, layout: SandboxLayout) -> FullNetwork | None:
        if network is NetworkPolicy.NONE:
            return None
        return full_network(layout, self._privileged)

    def _prepare(
        self,
        layout: SandboxLayout,
        key: WarmKey,
        image: Image | None,
        layers: tuple[LocalSnapshot, ...],
    ) -> list[dict[str, Any]]:
        for shared in self._view.shared:
            # bwrap binds these unconditionally: a sandbox made before the first download
            # must still see the cache, and see what is installed into it later.
            os.makedirs(shared, exist_ok=True)
        self._root.mkdir(parents=True, exist_ok=True)
        os.chmod(self._root, 0o700)  # sandbox files must not be reachable by host users
        if self._privileged and key.disk_bytes > 0:
            self._disks.provide(layout, key.disk_bytes)  # makes layout.root too
        else:
            layout.root.mkdir(mode=0o700)
            layout.disk.mkdir()
        for directory in (layout.proxy_dir, layout.etc):  # the server's: the sandbox user
            directory.mkdir()  # reaches them and cannot write them, whatever the umask
            os.chmod(directory, 0o755)  # (etc is the top of its /etc: `etc_overlay`)
        _write_readable(layout.resolv_conf, resolv_conf())  # for a verifier under FULL too
        if key.network is NetworkPolicy.FULL:
            os.mkfifo(layout.network_ready, 0o600)
        if image is not None:
            prepare_upper(layout, image, [WORKDIR], image_mount_points(self._view))
            tops = [image_lower(layout, layer, index) for index, layer in enumerate(layers)]
            return [image_overlay(layout, image, tops)]
        self._prepare_host_root(layout)
        if not layers:
            return [etc_overlay(layout)]
        prepare_home_overlays(layout, len(layers))
        return [etc_overlay(layout), *home_overlays(layout, layers)]

    def _prepare_host_root(self, layout: SandboxLayout) -> None:
        """The home and /tmp a sandbox on the host's root gets on its disk."""
        workdir = layout.home / PurePosixPath(WORKDIR).relative_to(HOME)
        for directory in (layout.home, workdir):
            directory.mkdir(mode=0o755)
            if layout.uid is not None:
                os.chown(directory, layout.uid, layout.uid)
        layout.tmp.mkdir()
        os.chmod(layout.tmp, 0o1777)
        layout.etc_view.mkdir()
        if layout.uid is not None:
            self._write_accounts(layout)

    @staticmethod
    def _write_accounts(layout: SandboxLayout) -> None:
        """The host's passwd and group plus the sandbox user, so `id` and `~` resolve."""
        uid = layout.uid
        user = f"{SANDBOX_USER}:x:{uid}:{uid}:rollout sandbox:{HOME}:/bin/bash\n"
        passwd = Path("/etc/passwd").read_text()
        _write_readable(layout.passwd, passwd.rstrip("\n") + "\n" + user)
        group = Path("/etc/group").read_text()
        _write_readable(layout.group, group.rstrip("\n") + f"\n{SANDBOX_USER}:x:{uid}:\n")

    def _has_leftovers(self, name: str) -> bool:
        group = self._cgroups.path(name)
        return (group is not None and group.is_dir()) or (self._root / name).exists()

    async def _discard(self, name: str) -> None:
        group = self._cgroups.path(name)
        if group is not None and group.is_dir():
            await self._cgroups.remove(group)
        await asyncio.to_thread(remove_tree, self._root / name)

    @property
    def live_sandboxes(self) -> int:
        return len(self._sandboxes)

    async def sweep_orphans(self, live_rollout_ids: set[str]) -> int:
        """Kill what is left of the sandboxes no live rollout owns (`kill_leftover_holders`),
        and remove their directories and cgroups.

        Whatever a sandbox left, the sweep logs what it could not remove and goes on:
        it runs at start-up, which nothing a sandbox made may stop.
        """
        try:
            names = set(self._cgroups.names()) | await asyncio.to_thread(self._directory_names)
        except OSError as exc:
            _log.warning("could not list orphaned local sandboxes: %s", exc)
            return 0
        orphans = names - live_rollout_ids - self._sandboxes.keys()
        holders = await asyncio.to_thread(kill_leftover_holders, self._bwrap, self._root, orphans)
        await await_exits(holders)  # their mounts go with them, before their directories
        await asyncio.to_thread(self._remove_unheld_snapshots)
        await asyncio.to_thread(self._disks.sweep)
        for name in orphans:
            _log.info("removing orphaned local sandbox %s", name)
            try:
                await self._discard(name)
            except OSError as exc:
                _log.warning("could not remove orphaned local sandbox %s: %s", name, exc)
        if not self._sandboxes:
            self._cgroups.prune()
        return len(orphans)

    async def sweep_rollouts(self, rollout_ids: set[str]) -> int:
        """Nothing: another server's local sandboxes are on its host; their processes end with
        it, and its start-up sweep removes their directories and disks."""
        return 0

    def _remove_unheld_snapshots(self) -> None:
        """A crashed server's snapshots (a group's members start again from setup)."""
        if self._snapshots_dir.is_dir():
            for directory in self._snapshots_dir.iterdir():
                if directory not in self._snapshots:
                    remove_tree(directory)

    def _directory_names(self) -> set[str]:
        return {entry.name for entry in self._root.iterdir()} if self._root.is_dir() else set()

    async def reaped(self) -> None:
        """Wait until the directories of the sandboxes torn down so far are removed
        (teardown leaves that to the background: `reaper`)."""
        await self._reaper.drain()

    async def close(self) -> None:
        """Kill every sandbox this backend created that is still alive, warm ones too."""
        await self._warm.close()
        sandboxes = list(self._sandboxes.values())
        self._sandboxes.clear()
        await asyncio.gather(*(sandbox.kill() for sandbox in sandboxes))
        await self._reaper.drain()
        await self._disks.close()
        await asyncio.to_thread(self._forks.close)
        self._snapshots.clear()
        await asyncio.to_thread(self._remove_unheld_snapshots)
        self._cgroups.prune()


def _lowers(image: Image | None, layers: tuple[LocalSnapshot, ...]) -> tuple[Path, ...]:
    """An image sandbox's lower layers on the host, top first (`image.image_overlay`)."""
    if image is None:
        return ()
    return (*(layer.directory / "root" for layer in layers), image.rootfs)
