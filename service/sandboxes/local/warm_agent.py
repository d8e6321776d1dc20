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
from service.sandboxes.base import BackgroundProcess, OutputCallback, OutputStream, Sandbox
from service.sandboxes.local.sandbox import LocalSandbox
from service.sandboxes.local.warm import WarmKey

__all__ = ["AgentPlan", "PrestartedAgent", "WarmAgents", "has_warm_agents", "learn", "take"]

_log = logging.getLogger(__name__)
_READY_TIMEOUT_S = 30.0
_CLEANUP_TIMEOUT_S = 30.0
_BUFFER_BYTES = 64 * 1024
"""Output an agent may write before it is handed its rollout; more and it is not used."""


@dataclass(frozen=True)
class AgentPlan:
    """What a harness starts, exactly: compared whole before a warm process is used."""

    files: tuple[tuple[str, bytes], ...]
    """Written before anything starts (sandbox path, content)."""
    holder: str
    """Started first; prints `ready <pid>` on stdout once the command may start."""
    command: str
    env: tuple[tuple[str, str], ...]
    agent: str = ""
    """The agent's name (`SandboxRequest.agent`): a sandbox claimed for another kills it."""
    cleanup: str = ""
    """Removes what the agent and the files wrote, once it is killed."""

    @classmethod
    def of(
        cls,
        files: Mapping[str, bytes],
        holder: str,
        command: str,
        env: Mapping[str, str],
        *,
        agent: str = "",
        cleanup: str = "",
    ) -> AgentPlan:
        files_, env_ = tuple(sorted(files.items())), tuple(sorted(env.items()))
        return cls(files_, holder, command, env_, agent, cleanup)


class PrestartedAgent:
    """An agent started ahead in one sandbox, its output kept until `attach`.

    Its holder prints `ready <pid>` once the agent may start, then `settled` once the agent
    has read what it reads before its input (e.g. its workdir's config), and waits."""

    def __init__(self, plan: AgentPlan) -> None:
        self.plan = plan
        self.holder: BackgroundProcess | None = None
        self.process: BackgroundProcess | None = None
        self.limits_kept = True
        """False once the sandbox was claimed under other limits than it was started under."""
        loop = asyncio.get_running_loop()
        self.ready: asyncio.Future[int] = loop.create_future()
        """The holder's pid inside the sandbox, once it said ready (-1: it said otherwise)."""
        self.settled: asyncio.Future[None] = loop.create_future()
        self._lines = bytearray()
        self._held: list[tuple[OutputStream, bytes]] = []
        self._held_bytes = 0
        self._sink: OutputCallback | None = None

    @property
    def usable(self) -> bool:
        """Started, still running, under its limits, and quiet enough to replay."""
        return (
            self.process is not None
            and self.holder is not None
            and not _done(self.process)
            and not _done(self.holder)
            and self.limits_kept
            and self._held_bytes <= _BUFFER_BYTES
        )

    @property
    def holder_pid(self) -> int:
        return self.ready.result()

    def on_holder(self, stream: OutputStream, chunk: bytes) -> None:
        if stream is not OutputStream.STDOUT or self.settled.done():
            return
        self._lines.extend(chunk)
        while b"\n" in self._lines:
            line, _, rest = bytes(self._lines).partition(b"\n")
            self._lines[:] = rest
            words = line.split()
            if not self.ready.done():
                ok = len(words) == 2 and words[0] == b"ready" and words[1].isdigit()
                self.ready.set_result(int(words[1]) if ok else -1)
            elif words == [b"settled"]:
                self.settled.set_result(None)

    def on_output(self, stream: OutputStream, chunk: bytes) -> None:
        if self._sink is not None:
            self._sink(stream, chunk)
            return
        self._held.append((stream, chunk))
        self._held_bytes += len(chunk)

    def attach(self, on_output: OutputCallback) -> None:
        """From now on its output goes to `on_output`, what it wrote so far first."""
        held, self._held = self._held, []
        for stream, chunk in held:
            on_output(stream, chunk)
        self._sink = on_output

    async def kill(self) -> None:
        """Kill the agent and its holder (idempotent)."""
        processes = [p for p in (self.process, self.holder) if p is not None]
        await asyncio.gather(*(process.kill() for process in processes))


def _done(process: BackgroundProcess) -> bool:
    return bool(getattr(process, "done", False))


@dataclass
class _Slot:
    agents: WarmAgents
    key: WarmKey
    agent: PrestartedAgent | None = None


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
        _SLOTS[sandbox] = _Slot(self, key)

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


def _slot(sandbox: Sandbox) -> _Slot | None:
    return _SLOTS.get(sandbox) if isinstance(sandbox, LocalSandbox) else None


def has_warm_agents(sandbox: Sandbox) -> bool:
    """Whether `sandbox` is one of a backend with warm agents (`learn` keeps its plans)."""
    return _slot(sandbox) is not None


def learn(sandbox: Sandbox, plan: AgentPlan) -> None:
    """The next warm sandboxes of `sandbox`'s kind start `plan` (none if `sandbox` is not
    one of a backend with warm agents)."""
    slot = _slot(sandbox)
    if slot is not None:
        slot.agents.learn(slot.key, plan)


def take(sandbox: Sandbox) -> PrestartedAgent | None:
    """The agent started ahead in `sandbox`, once: the caller uses or kills it."""
    slot = _slot(sandbox)
    if slot is None or slot.agent is None:
        return None
    agent, slot.agent = slot.agent, None
    return agent
