"""The terminal environment's action, observation and state, as OpenEnv's `/schema` shows."""

from __future__ import annotations

from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field, model_validator

__all__ = ["TerminalAction", "TerminalObservation", "TerminalState"]


class TerminalAction(Action):
    """A command to run, or `verify: true` to end the episode with the verifier's reward."""

    command: str = Field(default="", description="bash command, run in the workdir")
    timeout_s: float | None = Field(default=None, description="the command's limit, seconds")
    verify: bool = Field(default=False, description="verify and end the episode")

    @model_validator(mode="after")
    def _one_of(self) -> TerminalAction:
        if bool(self.command) == self.verify:
            raise ValueError("an action is either a command or verify: true, not both or neither")
        return self


class TerminalObservation(Observation):
    """What a step saw: a command's output, or the verification's reward (done)."""

    session_id: str = Field(default="", description="the rollout-service session")
    instruction: str = Field(default="", description="the task, on reset")
    stdout: str = ""
    stderr: str = ""
    exit_code: int | None = Field(default=None, description="the command's exit code")
    timed_out: bool = False
    error: str | None = Field(
        default=None, description='why verification failed, if it did: "<KIND>: <message>"'
    )
    error_kind: str | None = Field(
        default=None, description="TAMPERED, VERIFIER, SANDBOX, ...: score it, or retry it"
    )


class TerminalState(State):
    """The session this environment is stepping."""

    session_id: str | None = None
    verified: bool = False
    last_exit_code: int | None = None
