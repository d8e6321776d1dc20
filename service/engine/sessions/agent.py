"""`CallerAgent`: the agent of a session's rollout, which is its caller.

The rollout's phase machine (`engine.lifecycle`) runs a session as it runs any rollout: the
sandbox made, the model route opened, the task staged and set up, then AGENT. There this
agent only says the sandbox is ready and waits: the caller's commands reach the sandbox
through `LiveSession` meanwhile. `release` (VerifySession) ends the wait, and the machine
goes on to verify exactly as for a rollout; a cancel (CloseSession, expiry, shutdown) ends
it with the sandbox killed; `fail` (the sandbox died under a command) ends it as SANDBOX.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from service.agents import AgentContext, AgentOutcome, EmitOutput, Progress
from service.errors import FieldViolation, SandboxError
from service.models import SESSION_AGENT
from service.sandboxes import Capabilities, Sandbox

__all__ = ["CallerAgent"]


class CallerAgent:
    """One session's agent (an instance per session: it holds the session's sandbox)."""

    name = SESSION_AGENT
    requires_model = False
    state_dirs: tuple[str, ...] = ()

    def __init__(self) -> None:
        self.ready = asyncio.Event()
        """Set once the sandbox is set up and the caller may act in it."""
        self.sandbox: Sandbox | None = None
        self.context: AgentContext | None = None
        self._released = asyncio.Event()
        self._failure: SandboxError | None = None

    def option_violations(self, options: Mapping[str, Any]) -> list[FieldViolation]:
        return []

    async def provision(self, backend: Capabilities, progress: Progress) -> None:
        return None

    async def prepare(self, sandbox: Sandbox, context: AgentContext) -> None:
        self.sandbox, self.context = sandbox, context

    async def run(self, sandbox: Sandbox, context: AgentContext, emit: EmitOutput) -> AgentOutcome:
        self.ready.set()
        await self._released.wait()
        if self._failure is not None:
            raise self._failure
        return AgentOutcome(exit_code=0, timed_out=False, log_tail="")

    def release(self) -> None:
        """End the caller's turn: the rollout goes on to verification."""
        self._released.set()

    def fail(self, failure: SandboxError) -> None:
        """End the caller's turn with the sandbox lost: the rollout fails SANDBOX."""
        self._failure = failure
        self._released.set()
