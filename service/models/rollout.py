"""A rollout and what it produced."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, Field

from service.models.session import SessionRecord
from service.models.spec import RolloutSpec
from service.models.turn import Turn


class RolloutStatus(StrEnum):
    """Overall status; the last four are terminal."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"


TERMINAL_STATUSES = frozenset(
    {
        RolloutStatus.SUCCEEDED,
        RolloutStatus.FAILED,
        RolloutStatus.CANCELLED,
        RolloutStatus.TIMED_OUT,
    }
)


class Phase(StrEnum):
    """Lifecycle phases, in order."""

    QUEUED = "queued"
    CREATING_SANDBOX = "creating_sandbox"
    PREPARING_AGENT = "preparing_agent"
    SETUP = "setup"
    AGENT = "agent"
    VERIFYING = "verifying"
    COLLECTING = "collecting"
    TEARDOWN = "teardown"
    DONE = "done"


class ErrorKind(StrEnum):
    """Failure classes: infrastructure (retry) versus task (score)."""

    INVALID_SPEC = "invalid_spec"
    SANDBOX = "sandbox"
    SETUP = "setup"
    AGENT = "agent"
    AGENT_TIMEOUT = "agent_timeout"
    UPSTREAM_LLM = "upstream_llm"
    VERIFIER = "verifier"
    CANCELLED = "cancelled"
    INTERNAL = "internal"
    AGENT_INSTALL = "agent_install"
    TAMPERED = "tampered"
    """The agent changed what the verifier executes (`verifier.integrity`): scored 0."""
    POLICY_STALE = "policy_stale"
    """A model call would have started beyond `max_policy_lag`: stopped, unscored; retry."""


class RolloutError(BaseModel):
    """What went wrong, classified."""

    kind: ErrorKind
    message: str = ""


class CommandStage(StrEnum):
    """Which list a command came from."""

    SETUP = "setup"
    VERIFY = "verify"
    SESSION = "session"
    """A command a session's caller ran (`engine.sessions`)."""


class CommandResult(BaseModel):
    """Outcome of one setup or verify command."""

    stage: CommandStage
    index: int
    command: str
    exit_code: int
    """Exit code; -1 when killed or never run."""
    stdout: str = ""
    """Head and tail of stdout, middle elided when long."""
    stderr: str = ""
    stdout_bytes: int = 0
    """Total bytes written, including elided ones."""
    stderr_bytes: int = 0
    duration_s: float = 0.0
    timed_out: bool = False
    display_command: str = ""
    """The command as the task wrote it when `command` is a wrapper around it; "" if not."""

    @property
    def passed(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


class PhaseTimings(BaseModel):
    """Wall seconds per phase (Harbor-style per-phase timing)."""

    queued_s: float = 0.0
    creating_sandbox_s: float = 0.0
    preparing_agent_s: float = 0.0
    setup_s: float = 0.0
    agent_s: float = 0.0
    verifying_s: float = 0.0
    collecting_s: float = 0.0
    teardown_s: float = 0.0
    total_s: float = 0.0
    paused_s: float = 0.0
    """Time the model calls were paused while the agent ran (not counted against its timeout)."""


class RolloutResult(BaseModel):
    """Everything a rollout produced."""

    reward: float | None = None
    """None means no reward could be computed (distinct from 0.0)."""
    metrics: dict[str, float] = Field(default_factory=dict)
    reward_key: str = ""
    """Which reward.json key the reward is; "" when it came from elsewhere or is unset."""
    agent_exit_code: int | None = None
    setup_results: list[CommandResult] = Field(default_factory=list)
    verify_results: list[CommandResult] = Field(default_factory=list)
    turns: list[Turn] = Field(default_factory=list)
    files: dict[str, bytes] = Field(default_factory=dict)
    files_omitted: list[str] = Field(default_factory=list)
    agent_log_tail: str = ""
    error: RolloutError | None = None
    timings: PhaseTimings = Field(default_factory=PhaseTimings)
    sandbox_id: str = ""
    trainable_calls: int = 0
    """Trainable model calls the capture proxy relayed."""
    trainable_calls_failed: int = 0
    """Of those, how many failed upstream (all of them: the rollout is UPSTREAM_LLM)."""
    policy_version_min: int | None = None
    """The oldest policy version the turns started or ended under (None: never set)."""
    policy_version_max: int | None = None
    """The newest policy version the turns started or ended under."""
    turns_left_out: int = 0
    """Turns this copy leaves out (a slim copy carries none of them)."""
    session: SessionRecord | None = None
    """Set when the rollout is a session's record (agent "session"): its bookkeeping."""

    @property
    def turn_count(self) -> int:
        return len(self.turns) + self.turns_left_out


class Rollout(BaseModel):
    """One run of one task. `spec` is always the redacted spec."""

    id: str
    spec: RolloutSpec
    status: RolloutStatus = RolloutStatus.QUEUED
    phase: Phase = Phase.QUEUED
    result: RolloutResult = Field(default_factory=RolloutResult)
    create_time: datetime
    start_time: datetime | None = None
    finish_time: datetime | None = None
    tenant: str = ""
    """The tenant of the token that submitted it; "" for an admin token or no auth."""
    group_id: str = ""
    """The group it is a member of; "" for a lone rollout."""
    member_index: int = 0
    """Its index in the group (a refill keeps the index of the member it replaces)."""

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    def slim(self) -> Rollout:
        """This rollout without its bulk: task and verifier files, turns, result files, log tail.

        What a list, a final event or the SLIM view carries; its size no longer grows with the
        files a caller sent or the turns a run made.
        """
        task = self.spec.task.model_copy(update={"files": {}, "verifier_files": {}})
        result = self.result.model_copy(
            update={
                "turns": [],
                "turns_left_out": self.result.turn_count,
                "files": {},
                "agent_log_tail": "",
            }
        )
        spec = self.spec.model_copy(update={"task": task})
        return self.model_copy(update={"spec": spec, "result": result})
