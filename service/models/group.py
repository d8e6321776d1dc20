"""A group: n rollouts of one spec, scored together (GRPO), and its statistics."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from service.models.rollout import ErrorKind, RolloutError, RolloutStatus
from service.models.spec import RolloutSpec

INFRASTRUCTURE_KINDS = frozenset(
    {
        ErrorKind.SANDBOX,
        ErrorKind.UPSTREAM_LLM,
        ErrorKind.INTERNAL,
        ErrorKind.AGENT_INSTALL,
        ErrorKind.POLICY_STALE,
    }
)
"""Failures that say nothing about the policy: refilled, never scored."""

GROUP_LABEL = "rollout.group"
"""The label every member carries, valued with its group's id (for label-wide watchers)."""


class GroupStatus(StrEnum):
    """Overall status of a group; the last four are terminal."""

    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"


class GroupSpec(BaseModel):
    """What a caller asks for: n members of `spec`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    spec: RolloutSpec
    """Every member's spec; its `capture.sampling.seed`, if set, is the group's seed."""
    n: int
    """Members running at once."""
    min_complete: int = 0
    """Complete once this many members count (0: n); the rest are cancelled."""
    max_refills: int | None = None
    """Infrastructure failures that may be replaced (None: n)."""
    deadline_s: float | None = None
    """The group's time budget from admission (None: none of its own)."""

    @property
    def needed(self) -> int:
        return self.min_complete or self.n

    @property
    def refill_budget(self) -> int:
        return self.n if self.max_refills is None else self.max_refills


class GroupMember(BaseModel):
    """One member rollout as the group sees it."""

    rollout_id: str
    index: int
    status: RolloutStatus = RolloutStatus.QUEUED
    reward: float | None = None
    error_kind: ErrorKind | None = None
    counted: bool = False
    """A terminal task outcome: not an infrastructure failure, not cancelled."""
    replaced_by: str = ""
    seed: int | None = None
    policy_version_min: int | None = None
    """The oldest policy version the member's turns used."""
    policy_version_max: int | None = None
    """The newest policy version the member's turns used."""

    @property
    def terminal(self) -> bool:
        return self.status in {
            RolloutStatus.SUCCEEDED,
            RolloutStatus.FAILED,
            RolloutStatus.CANCELLED,
            RolloutStatus.TIMED_OUT,
        }


class GroupStats(BaseModel):
    """Statistics over the members that count."""

    counted: int = 0
    rewarded: int = 0
    reward_mean: float | None = None
    reward_stddev: float | None = None
    """Population standard deviation (what GRPO's advantage normalisation divides by)."""
    statuses: dict[RolloutStatus, int] = Field(default_factory=dict)
    errors: dict[ErrorKind, int] = Field(default_factory=dict)
    refills: int = 0
    policy_version_min: int | None = None
    """The oldest policy version any counted member's turns used."""
    policy_version_max: int | None = None
    """The newest policy version any counted member's turns used."""


class Group(BaseModel):
    """A group and where it stands. `spec` is always redacted."""

    id: str
    spec: GroupSpec
    status: GroupStatus = GroupStatus.RUNNING
    members: list[GroupMember] = Field(default_factory=list)
    stats: GroupStats = Field(default_factory=GroupStats)
    error: RolloutError | None = None
    create_time: datetime
    finish_time: datetime | None = None
    tenant: str = ""
    template_setups: int = 0
    """Times the task was set up in a template sandbox for the members to fork (0: each member
    set itself up)."""

    @property
    def terminal(self) -> bool:
        return self.status is not GroupStatus.RUNNING
