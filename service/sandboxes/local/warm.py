"""Local sandboxes made ahead of demand, so a rollout need not wait for bwrap and a cgroup.

Making a sandbox takes ~15 ms of wall time (bwrap building its mounts, the spawner's
cgroup migration waiting out an RCU grace period), most of a no-op rollout. The pool
keeps `size` ready sandboxes per kind (network policy, disk size and image, fixed at birth;
a kind is made once a rollout asked for it, so only images in use have warm sandboxes; every
sandbox has its own proxy directory, which a route's socket appears in later); the backend
renames one to its rollout on claim (`LocalBackend`) and the pool makes the next in the
background. Rlimits and the memory limit are set on
claim, the rest of a sandbox does not depend on its rollout.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from service.models import NetworkPolicy
from service.sandboxes.local.sandbox import LocalSandbox

__all__ = ["WarmKey", "WarmPool"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WarmKey:
    """What a sandbox is born with that a rollout may ask otherwise."""

    network: NetworkPolicy
    disk_bytes: int
    """The size of its filesystem (`disk`): a rollout asking another gets a new one."""
    image: str = ""
    """The id of the image it runs on (`image`); "" for the host's root."""


class WarmPool:
    """Ready sandboxes by kind; `build(name, key)` makes one (named `warm-...`)."""

    def __init__(self, size: int, build: Callable[[str, WarmKey], Awaitable[LocalSandbox]]) -> None:
        self._size = size
        self._build = build
        self._ready: dict[WarmKey, list[LocalSandbox]] = {}
        self._building: dict[WarmKey, asyncio.Task[None]] = {}
        self._closed = False

    async def take(self, key: WarmKey) -> LocalSandbox | None:
        """A ready sandbox of this kind, if one is alive; the caller owns it from now on."""
        ready = self._ready.get(key, [])
        while ready:
            sandbox = ready.pop()
            if sandbox.alive:
                return sandbox
            await sandbox.kill()  # its namespaces died while it waited
        return None

    def forget(self, sandbox: LocalSandbox) -> None:
        """A ready sandbox was killed (by `close`, or its lifetime)."""
        for ready in self._ready.values():
            if sandbox in ready:
                ready.remove(sandbox)

    def refill(self, key: WarmKey) -> None:
        """Start making a sandbox of this kind if fewer than `size` are ready."""
        if self._closed or key in self._building:
            return
        if len(self._ready.get(key, [])) >= self._size:
            return
        task = asyncio.get_running_loop().create_task(self._make(key))
        self._building[key] = task
        task.add_done_callback(lambda _: self._made(key))

    async def _make(self, key: WarmKey) -> None:
        sandbox = await self._build(f"warm-{uuid.uuid4().hex[:16]}", key)
        self._ready.setdefault(key, []).append(sandbox)

    def _made(self, key: WarmKey) -> None:
        task = self._building.pop(key)
        if task.cancelled():
            return
        if task.exception() is not None:  # no retry loop: the next claim tries again
            _log.warning("could not make a warm local sandbox: %s", task.exception())
            return
        self.refill(key)

    async def wait(self, key: WarmKey) -> None:
        """Until the sandbox of this kind being made (if any) is ready or has failed."""
        building = self._building.get(key)
        if building is not None:
            await asyncio.wait([building])

    async def close(self) -> None:
        """Stop making sandboxes (one being made is killed); ready ones stay the backend's."""
        self._closed = True
        building = list(self._building.values())
        for task in building:
            task.cancel()
        await asyncio.gather(*building, return_exceptions=True)
