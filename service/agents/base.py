"""The `Agent` protocol: a coding-agent harness that works on a task in a sandbox."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from service.errors import FieldViolation
from service.models import AgentOutput, ModelAccess
from service.sandboxes import Capabilities, Sandbox

__all__ = [
    "ORACLE",
    "Agent",
    "AgentContext",
    "AgentOutcome",
    "EmitOutput",
    "Progress",
]

ORACLE = "oracle"
"""The harness that runs the task's reference solution; the only one solution files reach."""

EmitOutput = Callable[[AgentOutput], None]
"""Publishes one piece of live agent output; must not block."""
Progress = Callable[[str], None]
"""Publishes a line saying how long host-side work is going; must not block."""


@dataclass(frozen=True)
class AgentContext:
    """Everything a harness needs for one run."""

    rollout_id: str
    instruction: str
    command: str
    """The shell command, for the "command" harness."""
    options: Mapping[str, Any]
    timeout_s: float
    model: ModelAccess | None = None
    """None when the rollout has no endpoint."""
    env: Mapping[str, str] = field(default_factory=dict)
    """The task's environment (`Task.env`)."""
    workdir: str = ""
    """The task's working directory, where every agent starts (`process.run_in_task`);
    empty means the sandbox's WORKDIR."""
    solution_env: Mapping[str, str] = field(default_factory=dict)
    """The oracle's environment: the task's with `Task.solution_env` over it."""
    paused_s: Callable[[], float] | None = None
    """Seconds the rollout's model calls have been paused so far: the deadline moves by them
    (`sandboxes.deadline`). None: never paused."""


@dataclass(frozen=True)
class AgentOutcome:
    """How the agent's run ended."""

    exit_code: int | None
    """None when it was killed (timeout) before exiting."""
    timed_out: bool
    log_tail: str


class Agent(Protocol):
    """A harness. `run` is cancellable: cancelling it kills the agent and its children."""

    name: str
    requires_model: bool
    """True when the harness cannot work without an LLM endpoint."""
    state_dirs: tuple[str, ...]
    """Absolute sandbox paths of the directories it keeps its own files in (config, install,
    transcripts), all under HOME: never the task's, so collecting a workdir at HOME or above
    skips them (`engine.collect`)."""

    def option_violations(self, options: Mapping[str, Any]) -> list[FieldViolation]:
        """Problems with `agent.options`, each naming its field; checked at admission."""
        ...

    async def provision(self, backend: Capabilities, progress: Progress) -> None:
        """Host-side work before the rollout's sandbox is made by a backend that can do
        `backend`: e.g. installing the agent where that sandbox will see it. Raises
        AgentInstallError."""
        ...

    async def prepare(self, sandbox: Sandbox, context: AgentContext) -> None:
        """Configure the agent in its sandbox; raises AgentError (AgentInstallError when
        its program cannot be installed or found there)."""
        ...

    async def run(self, sandbox: Sandbox, context: AgentContext, emit: EmitOutput) -> AgentOutcome:
        """Run until exit or `context.timeout_s`, streaming output through `emit`."""
        ...
