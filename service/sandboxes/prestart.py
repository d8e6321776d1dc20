"""An agent started ahead of its rollout, backend-neutral: the seam between the harnesses,
which say what they start (`AgentPlan`) and use what was started (`take`), and a backend that
starts it in the sandboxes it makes ahead (`sandboxes.local.warm_agent`).

A backend that can start agents ahead gives each sandbox it makes a `WarmSeat` (`seat`); a
harness never knows which backend it runs on: `learn` and `take` are no-ops on a sandbox
without a seat (`has_warm_agents` False).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from service.sandboxes.base import BackgroundProcess, OutputCallback, OutputStream, Sandbox

__all__ = [
    "SETTLE_TIMEOUT_S",
    "AgentPlan",
    "PrestartedAgent",
    "WarmSeat",
    "has_warm_agents",
    "learn",
    "seat",
    "take",
]

SETTLE_TIMEOUT_S = 60.0
"""How long an agent started ahead is waited for to settle (by the harness, and by the pool
before it starts the next)."""
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

    async def until_settled(self, timeout_s: float) -> bool:
        """Wait, at most `timeout_s`, until it has settled or one of its processes ended:
        whether it has settled and is still usable."""
        if not self.usable or self.process is None or self.holder is None:
            return False
        ended: list[asyncio.Future[Any]] = [
            asyncio.ensure_future(p.wait()) for p in (self.process, self.holder)
        ]
        try:
            await asyncio.wait(
                {self.settled, *ended}, timeout=timeout_s, return_when="FIRST_COMPLETED"
            )
        finally:
            for waiter in ended:
                waiter.cancel()
        return self.settled.done() and self.usable

    async def kill(self) -> None:
        """Kill the agent and its holder (idempotent)."""
        processes = [p for p in (self.process, self.holder) if p is not None]
        await asyncio.gather(*(process.kill() for process in processes))


def _done(process: BackgroundProcess) -> bool:
    return bool(getattr(process, "done", False))


class WarmSeat(Protocol):
    """A sandbox's place for an agent started ahead, kept by the backend that made it."""

    def learn(self, plan: AgentPlan) -> None:
        """The next sandboxes of this one's kind start `plan` ahead."""
        ...

    def take(self) -> PrestartedAgent | None:
        """The agent started ahead in this sandbox, once."""
        ...


_SEATS: weakref.WeakKeyDictionary[Sandbox, WarmSeat] = weakref.WeakKeyDictionary()


def seat(sandbox: Sandbox, place: WarmSeat) -> None:
    """`sandbox`'s backend starts agents ahead for its kind (backends call this)."""
    _SEATS[sandbox] = place


def has_warm_agents(sandbox: Sandbox) -> bool:
    """Whether `sandbox` is one of a backend that starts agents ahead."""
    return sandbox in _SEATS


def learn(sandbox: Sandbox, plan: AgentPlan) -> None:
    """The next warm sandboxes of `sandbox`'s kind start `plan` (none if it has no seat)."""
    place = _SEATS.get(sandbox)
    if place is not None:
        place.learn(plan)


def take(sandbox: Sandbox) -> PrestartedAgent | None:
    """The agent started ahead in `sandbox`, once: the caller uses or kills it."""
    place = _SEATS.get(sandbox)
    return None if place is None else place.take()
