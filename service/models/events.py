"""Entries of a rollout's ordered event log."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel

from service.models.rollout import CommandResult, Phase, Rollout, RolloutStatus
from service.models.turn import Turn


class PhaseChanged(BaseModel):
    """The rollout entered a phase."""

    phase: Phase
    status: RolloutStatus
    message: str = ""


class AgentOutputKind(StrEnum):
    """What a piece of agent output is."""

    STDOUT = "stdout"
    STDERR = "stderr"
    TEXT = "text"
    TOOL_CALL = "tool_call"
    ERROR = "error"
    TRUNCATED = "truncated"


class AgentOutput(BaseModel):
    """A piece of the agent's live output."""

    kind: AgentOutputKind
    text: str = ""
    tool_name: str = ""


EventPayload = PhaseChanged | CommandResult | Turn | AgentOutput | Rollout


class RolloutEvent(BaseModel):
    """One entry in a rollout's log; `seq` starts at 1 and has no gaps."""

    rollout_id: str
    seq: int
    time: datetime
    payload: EventPayload
    labels: dict[str, str] = {}
    """The rollout's labels, carried for label-wide watchers (not part of the wire event)."""
    tenant: str = ""
    """The rollout's tenant, carried so a label-wide watcher sees only its own tenant's."""

    @property
    def is_final(self) -> bool:
        return isinstance(self.payload, Rollout)
