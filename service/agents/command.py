"""The `command` harness: runs a given shell command as the agent (oracles, scripted agents)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from service.agents.base import AgentContext, AgentOutcome, EmitOutput, Progress
from service.agents.process import run_in_task
from service.config import Settings
from service.errors import FieldViolation
from service.models import AgentOutput, AgentOutputKind, ModelAccess
from service.sandboxes import Capabilities, OutputCallback, OutputStream, Sandbox

__all__ = ["CommandAgent", "model_env", "stream_to"]

_KINDS = {OutputStream.STDOUT: AgentOutputKind.STDOUT, OutputStream.STDERR: AgentOutputKind.STDERR}


class CommandAgent:
    """Runs `agent.command` in the workdir; a model endpoint, if given, is exported as OPENAI_*."""

    name = "command"
    requires_model = False
    state_dirs: tuple[str, ...] = ()

    def __init__(self, settings: Settings) -> None:
        self._settings = settings

    def option_violations(self, options: Mapping[str, Any]) -> list[FieldViolation]:
        return [
            FieldViolation(f"spec.agent.options.{name}", f"the {self.name} agent takes no options")
            for name in options
        ]

    async def provision(self, backend: Capabilities, progress: Progress) -> None:
        return None

    async def prepare(self, sandbox: Sandbox, context: AgentContext) -> None:
        return None

    async def run(self, sandbox: Sandbox, context: AgentContext, emit: EmitOutput) -> AgentOutcome:
        command, env = self.command_and_env(context)
        return await run_in_task(sandbox, context, command, env=env, on_output=stream_to(emit))

    def command_and_env(self, context: AgentContext) -> tuple[str, dict[str, str]]:
        """What to run, and its environment over the task's."""
        return context.command, model_env(context.model)


def model_env(model: ModelAccess | None) -> dict[str, str]:
    """The OPENAI_* variables pointing a program at `model` (none without one)."""
    if model is None:
        return {}
    return {
        "OPENAI_BASE_URL": model.base_url,
        "OPENAI_API_KEY": model.api_key,
        "OPENAI_MODEL": model.model,
    }


def stream_to(emit: EmitOutput) -> OutputCallback:
    """A sandbox output callback publishing each chunk as agent output."""

    def on_output(stream: OutputStream, chunk: bytes) -> None:
        emit(AgentOutput(kind=_KINDS[stream], text=chunk.decode("utf-8", errors="replace")))

    return on_output
