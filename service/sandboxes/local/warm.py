"""Local sandboxes made ahead of demand, so a rollout need not wait for bwrap and a cgroup.

Making a sandbox takes ~15 ms of wall time (bwrap building its mounts, the spawner's
cgroup migration waiting out an RCU grace period), most of a no-op rollout. The pool
keeps `size(kind)` ready sandboxes per kind (network policy, disk size, image and the agent
started ahead in it, fixed at birth; a kind is made once a rollout asked for it, so only
images in use have warm sandboxes; every sandbox has its own proxy directory, which a route's
socket appears in later); the backend renames one to its rollout on claim (`LocalBackend`) and
the pool makes the next in the background. A kind's size may fall (the demand for its agent
decays, `warm_agent`): every `TRIM_EVERY_S` the ready sandboxes beyond it are killed, so an
idle server keeps none of them. Rlimits and the memory limit are set on claim, the rest of a
sandbox does not depend on its rollout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from service.models import NetworkPolicy
from service.sandboxes.local.sandbox import LocalSandbox

__all__ = ["WarmKey", "WarmPool"]

_log = logging.getLogger(__name__)

TRIM_EVERY_S = 5.0
"""How often ready sandboxes beyond their kind's size are killed."""


@dataclass(frozen=True)
class WarmKey:
    """What a sandbox is born with that a rollout may ask otherwise."""

    network: NetworkPolicy
    disk_bytes: int
    """The size of its filesystem (`disk`): a rollout asking another gets a new one."""
    image: str = ""
    """The id of the image it runs on (`image`); "" for the host's root."""
    agent: str = ""
    """The agent started ahead in it (`warm_agent`); "": none."""


class WarmPool:
    """Ready sandboxes by kind; `build(name, key)` makes one (named `warm-...`), `size(key)`
    says how many of a kind to keep."""

    def __init__(
        self,
        size: Callable[[WarmKey], int],
        build: Callable[[str, WarmKey], Awaitable[LocalSandbox]],
        settling: Callable[[LocalSandbox], Awaitable[None]] | None = None,
    ) -> None:
        self._size = size
        self._build = build
        self._settling = settling
        """Awaited once a sandbox is ready (it may be taken meanwhile) before the next of
        its kind is made (`WarmAgents.settling`)."""
        self._ready: dict[WarmKey, list[LocalSandbox]] = {}
        self._building: dict[WarmKey, asyncio.Task[None]] = {}
        self._trimmer: asyncio.Task[None] | None = None
        self._closed = False

    def count(self, which: Callable[[WarmKey], bool]) -> int:
        """Ready and being made, of the kinds `which` is true of."""
        ready = sum(len(sandboxes) for key, sandboxes in self._ready.items() if which(key))
        return ready + sum(1 for key in self._building if which(key))

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
        if self._trimmer is None:
            self._trimmer = asyncio.get_running_loop().create_task(self._trim_every())
        if len(self._ready.get(key, [])) >= self._size(key):
            return
        task = asyncio.get_running_loop().create_task(self._make(key))
        self._building[key] = task
        task.add_done_callback(lambda _: self._made(key))

    async def _make(self, key: WarmKey) -> None:
        sandbox = await self._build(f"warm-{uuid.uuid4().hex[:16]}", key)
        self._ready.setdefault(key, []).append(sandbox)
        if self._settling is not None:
            await self._settling(sandbox)

    def _made(self, key: WarmKey) -> None:
        task = self._building.pop(key)
        if task.cancelled():
            return
        if task.exception() is not None:  # no retry loop: the next claim tries again
            _log.warning("could not make a warm local sandbox: %s", task.exception())
            return
        self.refill(key)

    async def wait(self) -> None:
        """Until the sandboxes being made (of every kind) are ready or have failed."""
        building = list(self._building.values())
        if building:
            await asyncio.wait(building)

    async def trim(self) -> None:
        """Kill the ready sandboxes beyond their kind's size, the oldest first."""
        extra: list[LocalSandbox] = []
        for key, ready in self._ready.items():
            over = len(ready) - max(self._size(key), 0)
            if over > 0:
                extra += ready[:over]
                del ready[:over]
        await asyncio.gather(*(sandbox.kill() for sandbox in extra))  # never raises

    async def _trim_every(self) -> None:
        while True:
            await asyncio.sleep(TRIM_EVERY_S)
            await self.trim()

    async def close(self) -> None:
        """Stop making sandboxes (one being made is killed); ready ones stay the backend's."""
        self._closed = True
        if self._trimmer is not None:
            self._trimmer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._trimmer
        building = list(self._building.values())
        for task in building:
            task.cancel()
        await asyncio.gather(*building, return_exceptions=True)
