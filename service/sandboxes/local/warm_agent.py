"""Agents started ahead in warm local sandboxes (`ROLLOUT_LOCAL_WARM_AGENTS`).

A harness says at each rollout what it starts (`AgentPlan`: the files it writes first, a holder
command, its own command and environment) and that plan is kept for the sandbox's kind with
the agent's name (`WarmKey.agent`). Each warm sandbox of that kind made afterwards writes the
files and starts the holder, which prints `ready <pid>` once the agent may start (e.g. its
stdin, a FIFO, is held open), then the agent's command, exactly as the plan says: the agent
gets through its own start while the sandbox waits to be claimed, and then blocks on its input.

How many of a kind are kept (`wanted`) follows demand: the most rollouts of that kind and agent
alive at once, held for `local_warm_agents_decay_s` after it was last reached, then decaying by
e^-t/`local_warm_agents_decay_s` (a group of 8 wants 8 while it runs and for that long after, so
the next group finds them; an idle server, none), at most
`local_warm_agents_max` over all kinds (the backend counts), and none while the host's
`MemAvailable` is under `local_warm_agents_min_available_mb` (an idle opencode holds ~280 MB).

The harness of the rollout that claims the sandbox takes the process (`take`) and decides: it
is used only if the plan equals the one the harness would run for this rollout and the
sandbox's limits are the ones it was started under (`claim`); otherwise the harness kills it
and runs cold. A sandbox claimed for another agent (or none: a group's template) has it killed
and what it wrote removed (the plan's `cleanup`) as it is claimed: nobody would take it. A
process belongs to the sandbox it was started in, is taken once, and dies with it; nothing is
shared between sandboxes.

While the backend's rollouts run, what is started ahead and not claimed yet runs at the
lowest CPU weight (`autogroup`): the pool's work never slows them (one claiming a sandbox
before its agent settled, or handing its instruction over while the next one starts). With
none running (the pool filling up between groups), or claimed, it has every command's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from service.errors import SandboxError
from service.sandboxes.local.autogroup import BACKGROUND, FOREGROUND, weigh, weigh_once_leading
from service.sandboxes.local.process import SandboxedProcess
from service.sandboxes.local.sandbox import LocalSandbox
from service.sandboxes.local.warm import WarmKey
from service.sandboxes.prestart import SETTLE_TIMEOUT_S, AgentPlan, PrestartedAgent, seat

__all__ = ["Demand", "WarmAgents", "available_memory_mb"]

_log = logging.getLogger(__name__)
_READY_TIMEOUT_S = 30.0
_CLEANUP_TIMEOUT_S = 30.0


@dataclass
class _Slot:
    agents: WarmAgents
    key: WarmKey
    agent: PrestartedAgent | None = None

    def learn(self, plan: AgentPlan) -> None:
        self.agents.learn(self.key, plan)

    def take(self) -> PrestartedAgent | None:
        agent, self.agent = self.agent, None
        return agent


_SLOTS: weakref.WeakKeyDictionary[LocalSandbox, _Slot] = weakref.WeakKeyDictionary()
"""Every sandbox a backend with warm agents made, with its kind and its warm agent if any."""


@dataclass
class Demand:
    """Rollouts of one kind alive now, and the decaying peak of how many were at once."""

    decay_s: float
    live: int = 0
    peak: float = 0.0
    at: float = 0.0

    def level(self, now: float) -> float:
        """The peak, held for `decay_s` after it was last reached, then decaying."""
        past = max(0.0, now - self.at - self.decay_s)
        return max(float(self.live), self.peak * math.exp(-past / self.decay_s))

    def add(self, change: int, now: float) -> None:
        if self.live >= self.level(now):  # the live count is the level: reached until now
            self.peak, self.at = float(self.live), now
        self.live += change
        if self.live > self.peak:
            self.peak, self.at = float(self.live), now

    def wanted(self, now: float) -> int:
        """Agents to keep ready: the level, rounded to the nearest."""
        return math.floor(self.level(now) + 0.5)


def available_memory_mb(meminfo: Path = Path("/proc/meminfo")) -> int:
    """The host's `MemAvailable`, in MiB (0 if the kernel does not say)."""
    for line in meminfo.read_text().splitlines():
        name, _, value = line.partition(":")
        if name == "MemAvailable":
            return int(value.split()[0]) // 1024
    return 0


class WarmAgents:
    """One backend's plans by sandbox kind; starts them in the warm sandboxes it makes."""

    def __init__(
        self,
        rlimits: Mapping[str, int],
        *,
        decay_s: float,
        min_available_mb: int,
        learnt: Callable[[WarmKey], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._rlimits = dict(rlimits)
        """The limits warm sandboxes are made under (the defaults)."""
        self._plans: dict[WarmKey, AgentPlan] = {}
        self._demand: dict[WarmKey, Demand] = {}
        self._running: weakref.WeakKeyDictionary[LocalSandbox, WarmKey] = (
            weakref.WeakKeyDictionary()
        )
        self._decay_s = decay_s
        self._min_available_mb = min_available_mb
        self._learnt = learnt
        """Called with the kind (agent included) of each plan learnt: the pool makes one."""
        self._clock = clock
        self._idle = asyncio.Event()
        """Set while no rollout runs (`_running` is empty)."""
        self._idle.set()

    def started(self, sandbox: LocalSandbox, key: WarmKey) -> None:
        """A rollout of `key.agent` has `sandbox` (until `ended`): demand for its kind."""
        if not key.agent or sandbox in self._running:
            return
        self._running[sandbox] = key
        demand = self._demand.setdefault(key, Demand(self._decay_s))
        demand.add(1, self._clock())
        if len(self._running) == 1:
            self._idle.clear()
            self._reweigh()

    def ended(self, sandbox: LocalSandbox) -> None:
        key = self._running.pop(sandbox, None)
        if key is not None:
            self._demand[key].add(-1, self._clock())
            if not self._running:
                self._idle.set()
                self._reweigh()

    def _weight(self) -> int:
        """The nice of the agents started ahead and not claimed (see the module)."""
        return FOREGROUND if self._idle.is_set() else BACKGROUND

    def _reweigh(self) -> None:
        for sandbox, slot in list(_SLOTS.items()):
            if slot.agents is self and slot.agent is not None and sandbox not in self._running:
                for process in _processes(slot.agent):
                    weigh(process.pid, self._weight())

    def wanted(self, key: WarmKey) -> int:
        """Ready sandboxes to keep with `key.agent` started ahead (see the module)."""
        demand = self._demand.get(key)
        if demand is None or key not in self._plans:
            return 0
        if available_memory_mb() < self._min_available_mb:
            return 0
        return demand.wanted(self._clock())

    def register(self, sandbox: LocalSandbox, key: WarmKey) -> None:
        """`sandbox` (warm or not) is of kind `key`: its rollout's plan is learnt for it."""
        slot = _Slot(self, key)
        _SLOTS[sandbox] = slot
        seat(sandbox, slot)

    def learn(self, key: WarmKey, plan: AgentPlan) -> None:
        with_agent = dataclasses.replace(key, agent=plan.agent)
        self._plans[with_agent] = plan
        self._learnt(with_agent)

    async def start_in(self, sandbox: LocalSandbox, key: WarmKey) -> None:
        """Start the plan of this kind (`key.agent`'s), if any, in a warm sandbox not claimed
        yet. A failure leaves the sandbox without an agent: it is logged, never raised."""
        plan = self._plans.get(key) if key.agent else None
        slot = _SLOTS.get(sandbox)
        if plan is None or slot is None:
            return
        try:
            slot.agent = await _start(sandbox, plan)
            if slot.agent is not None:
                for process in _processes(slot.agent):
                    await weigh_once_leading(process.pid, self._weight)
        except (SandboxError, OSError, ValueError) as exc:  # the sandbox is good without it
            _log.warning("could not start an agent ahead in %s: %s", sandbox.id, exc)

    async def settling(self, sandbox: LocalSandbox) -> None:
        """While rollouts run, until the agent started ahead in `sandbox`, if any and not
        taken, has settled (or ended, or `SETTLE_TIMEOUT_S` passed): the pool makes the next
        only then, so agents start ahead one at a time and never crowd the CPU of the
        rollouts that run. With none running there is nobody to crowd: the next is made at
        once, so the agents a group wants are ready sooner for the next group."""
        slot = _SLOTS.get(sandbox)
        if slot is None or slot.agent is None or self._idle.is_set():
            return
        waits = [slot.agent.until_settled(SETTLE_TIMEOUT_S), self._idle.wait()]
        tasks = [asyncio.ensure_future(wait) for wait in waits]
        try:
            await asyncio.wait(tasks, return_when="FIRST_COMPLETED")
        finally:
            for task in tasks:
                task.cancel()

    async def all_settled(self) -> None:
        """Until every agent started ahead and not taken has settled (or ended, or
        `SETTLE_TIMEOUT_S` passed), however the pool made them."""
        waits = [
            slot.agent.until_settled(SETTLE_TIMEOUT_S)
            for slot in list(_SLOTS.values())
            if slot.agents is self and slot.agent is not None
        ]
        await asyncio.gather(*waits)

    async def claim(self, sandbox: LocalSandbox, rlimits: Mapping[str, int], agent: str) -> None:
        """A warm sandbox was claimed by a rollout of `agent` with these limits (rlimits are
        set on a process as it starts: an agent started under others is not its rollout's).
        One started ahead for another agent is killed now and what it wrote removed; raises
        SandboxError if that could not be done (the caller kills the sandbox)."""
        slot = _SLOTS.get(sandbox)
        if slot is None or slot.agent is None:
            return
        if agent != slot.agent.plan.agent:
            started, slot.agent = slot.agent, None
            _log.info(
                "the %s started ahead in %s is not the agent of its rollout (%s): killed",
                started.plan.agent,
                sandbox.id,
                agent or "none",
            )
            await started.kill()
            result = await sandbox.exec(started.plan.cleanup, timeout_s=_CLEANUP_TIMEOUT_S)
            if result.exit_code != 0:
                raise SandboxError(f"could not remove what was started ahead in {sandbox.id}")
        else:
            for process in _processes(slot.agent):
                weigh(process.pid, FOREGROUND)
            if dict(rlimits) != self._rlimits:
                slot.agent.limits_kept = False


async def _start(sandbox: LocalSandbox, plan: AgentPlan) -> PrestartedAgent | None:
    """The holder, then (once it says ready) the agent; None if the holder declined."""
    await sandbox.write_files(dict(plan.files))
    agent = PrestartedAgent(plan)
    agent.holder = await sandbox.spawn(plan.holder, on_output=agent.on_holder)
    exited: asyncio.Future[Any] = asyncio.ensure_future(agent.holder.wait())
    either: set[asyncio.Future[Any]] = {agent.ready, exited}
    try:
        await asyncio.wait(either, timeout=_READY_TIMEOUT_S, return_when="FIRST_COMPLETED")
        if not agent.ready.done() or agent.ready.result() < 0:
            await agent.kill()
            return None
        agent.process = await sandbox.spawn(
            plan.command, env=dict(plan.env), on_output=agent.on_output
        )
        return agent
    except BaseException:
        await asyncio.shield(agent.kill())
        raise
    finally:
        exited.cancel()


def _processes(agent: PrestartedAgent) -> list[SandboxedProcess]:
    """`agent`'s holder and command, while they run (their pids are still their own)."""
    processes = (agent.holder, agent.process)
    return [p for p in processes if isinstance(p, SandboxedProcess) and not p.done]
