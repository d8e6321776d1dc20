"""Agents started ahead in warm local sandboxes (`ROLLOUT_LOCAL_WARM_AGENTS`).

A harness says at each rollout what it starts (`AgentPlan`: the files it writes first, a holder
command, its own command and environment) and that plan is kept for the sandbox's kind
(`WarmKey`). Each warm sandbox made afterwards writes the files and starts the holder, which
prints `ready <pid>` once the agent may start (e.g. its stdin, a FIFO, is held open), then the
agent's command, exactly as the plan says: the agent gets through its own start while the
sandbox waits to be claimed, and then blocks on its input.

The harness of the rollout that claims the sandbox takes the process (`take`) and decides: it
is used only if the plan equals the one the harness would run for this rollout and the
sandbox's limits are the ones it was started under (`claim`); otherwise the harness kills it
and runs cold. A sandbox claimed for another agent (or none: a group's template) has it killed
and what it wrote removed (the plan's `cleanup`) as it is claimed: nobody would take it. A
process belongs to the sandbox it was started in, is taken once, and dies with it; nothing is
shared between sandboxes.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from service.errors import SandboxError
from service.sandboxes.local.sandbox import LocalSandbox
from service.sandboxes.local.warm import WarmKey
from service.sandboxes.prestart import AgentPlan, PrestartedAgent, seat

__all__ = ["WarmAgents"]

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


class WarmAgents:
    """One backend's plans by sandbox kind; starts them in the warm sandboxes it makes."""

    def __init__(self, rlimits: Mapping[str, int]) -> None:
        self._rlimits = dict(rlimits)
        """The limits warm sandboxes are made under (the defaults)."""
        self._plans: dict[WarmKey, AgentPlan] = {}

    def register(self, sandbox: LocalSandbox, key: WarmKey) -> None:
        """`sandbox` (warm or not) is of kind `key`: its rollout's plan is learnt for it."""
        slot = _Slot(self, key)
        _SLOTS[sandbox] = slot
        seat(sandbox, slot)

    def learn(self, key: WarmKey, plan: AgentPlan) -> None:
        self._plans[key] = plan

    async def start_in(self, sandbox: LocalSandbox, key: WarmKey) -> None:
        """Start the plan of this kind, if any, in a warm sandbox not claimed yet. A failure
        leaves the sandbox as it is (without an agent): it is logged, never raised."""
        plan = self._plans.get(key)
        slot = _SLOTS.get(sandbox)
        if plan is None or slot is None:
            return
        try:
            slot.agent = await _start(sandbox, plan)
        except (SandboxError, OSError, ValueError) as exc:  # the sandbox is good without it
            _log.warning("could not start an agent ahead in %s: %s", sandbox.id, exc)

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
        elif dict(rlimits) != self._rlimits:
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
