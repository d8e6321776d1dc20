"""One rollout of a batch as a trainer reads it: a `BatchResult`, and the line it is in
results.jsonl.

Every rollout ends in one of three outcomes, which decide what the summary counts:

- scored: a task outcome (SUCCEEDED, or FAILED/TIMED_OUT by the agent's doing, TAMPERED
  included: its reward is 0). It counts in the mean reward and pass@k; no reward counts as 0.
- infrastructure: a failure that is nobody's doing in the task (the kinds in
  `RETRYABLE_KINDS`), still so after `--attempts`. Never scored: retry it, don't train on it.
- cancelled or rejected: cancelled by someone else, or a spec the server refused.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from rollout.v1 import rollout_pb2 as pb

from rollout_client.results import reward_of, status_name

__all__ = [
    "PHASES",
    "RETRYABLE_KINDS",
    "BatchResult",
    "group_is_retryable",
    "is_retryable",
    "rejected_result",
    "result_of",
    "unstarted_result",
]

_RETRYABLE_NAMES = ("SANDBOX", "INTERNAL", "AGENT_INSTALL", "UPSTREAM_LLM", "POLICY_STALE")
RETRYABLE_KINDS = frozenset(
    pb.ErrorKind.Value(f"ERROR_KIND_{name}")
    for name in _RETRYABLE_NAMES
    if f"ERROR_KIND_{name}" in pb.ErrorKind.keys()  # noqa: SIM118 (an enum wrapper, not a dict)
)
"""Error kinds that are infrastructure, by the proto's ErrorKind docs: retried, never scored.
POLICY_STALE (a turn sampled from a policy the trainer has moved past) joins when the
proto has it."""

SCORED = "scored"
INFRASTRUCTURE = "infrastructure"
CANCELLED = "cancelled"
REJECTED = "rejected"
PHASES = (
    "queued",
    "creating_sandbox",
    "preparing_agent",
    "setup",
    "agent",
    "verifying",
    "collecting",
    "teardown",
    "total",
)


@dataclass(frozen=True)
class BatchResult:
    """One finished rollout of a batch: a line of results.jsonl."""

    task: str
    """The task's id: its directory's name, or the spec's task_id (JSONL)."""
    member: int
    """The member's index in its group (0 for a lone rollout)."""
    outcome: str
    """scored, infrastructure, cancelled or rejected (see the module docstring)."""
    status: str
    """The rollout's status: SUCCEEDED, FAILED, TIMED_OUT, CANCELLED (REJECTED: not admitted)."""
    rollout_id: str = ""
    group: str = ""
    """The group's id ("" for a lone rollout)."""
    request_id: str = ""
    attempt: int = 0
    """Which of the task's request ids ran it (0 first; each retry or resume of an
    interrupted one takes the next)."""
    seed: int | None = None
    reward: float | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    """The reward dict: every numeric key of reward.json."""
    error_kind: str | None = None
    error: str = ""
    timings_s: dict[str, float] = field(default_factory=dict)
    """Wall time of each phase, in seconds."""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    turns: int = 0
    policy_version_min: int | None = None
    """The oldest policy version its turns ran under (None: not recorded)."""
    policy_version_max: int | None = None
    """The newest policy version its turns ran under."""
    trajectory: str = ""
    """The trajectory file, relative to the output directory ("" when there is none)."""

    @property
    def scored(self) -> bool:
        return self.outcome == SCORED

    def score(self) -> float:
        """The reward a trainer trains on: a scored rollout without one scores 0."""
        return self.reward if self.reward is not None else 0.0

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BatchResult:
        known = {name: data[name] for name in cls.__dataclass_fields__ if name in data}
        return cls(**known)


def is_retryable(rollout: pb.Rollout) -> bool:
    """Whether the rollout ended by an infrastructure failure (retry, don't score)."""
    return rollout.result.HasField("error") and rollout.result.error.kind in RETRYABLE_KINDS


def group_is_retryable(group: pb.Group) -> bool:
    """Whether the group ended by an infrastructure failure (its template's sandbox, say)."""
    return group.HasField("error") and group.error.kind in RETRYABLE_KINDS


def _outcome(error: pb.Error | None, cancelled: bool) -> str:
    if error is not None and error.kind in RETRYABLE_KINDS:
        return INFRASTRUCTURE
    return CANCELLED if cancelled else SCORED


def _kind_name(error: pb.Error | None) -> str | None:
    return pb.ErrorKind.Name(error.kind).removeprefix("ERROR_KIND_") if error else None


def _timings(timings: pb.PhaseTimings) -> dict[str, float]:
    return {
        name: getattr(timings, name).ToTimedelta().total_seconds()
        for name in PHASES
        if timings.HasField(name)
    }


def _policy_version(result: pb.RolloutResult, name: str) -> int | None:
    # Read by name: a client built before the policy-version fields still reads results.
    if name not in result.DESCRIPTOR.fields_by_name or not result.HasField(name):
        return None
    return int(getattr(result, name))


def result_of(
    task: str, rollout: pb.Rollout, *, request_id: str, attempt: int, trajectory: str
) -> BatchResult:
    """The line of a terminal rollout (its FULL view, for the token counts); `request_id` is
    the rollout's, or its group's."""
    result = rollout.result
    error = result.error if result.HasField("error") else None
    return BatchResult(
        task=task,
        member=rollout.member_index,
        outcome=_outcome(error, rollout.status == pb.ROLLOUT_STATUS_CANCELLED),
        status=status_name(rollout.status),
        rollout_id=rollout.id,
        group=rollout.group_id,
        request_id=request_id,
        attempt=attempt,
        seed=rollout.spec.sampling.seed if rollout.spec.sampling.HasField("seed") else None,
        reward=reward_of(rollout),
        metrics=dict(result.metrics),
        error_kind=_kind_name(error),
        error=error.message if error else "",
        timings_s=_timings(result.timings),
        prompt_tokens=sum(turn.usage.prompt_tokens for turn in result.turns),
        completion_tokens=sum(turn.usage.completion_tokens for turn in result.turns),
        turns=result.turn_count,
        policy_version_min=_policy_version(result, "policy_version_min"),
        policy_version_max=_policy_version(result, "policy_version_max"),
        trajectory=trajectory,
    )


def rejected_result(task: str, member: int, request_id: str, why: str) -> BatchResult:
    """The line of a rollout the server refused to admit (a bad spec or task directory)."""
    return BatchResult(
        task=task,
        member=member,
        outcome=REJECTED,
        status="REJECTED",
        request_id=request_id,
        error_kind="INVALID_SPEC",
        error=why,
    )


def unstarted_result(
    task: str, member: int, group: pb.Group, *, request_id: str, attempt: int
) -> BatchResult:
    """The line of a member its group never started, the group having ended first (its
    setup failed, its template's sandbox could not be made, it was cancelled): the group's
    status and error are the member's, and a setup failure is a task outcome, as it is for
    a lone rollout."""
    error = group.error if group.HasField("error") else None
    return BatchResult(
        task=task,
        member=member,
        outcome=_outcome(error, group.status == pb.GROUP_STATUS_CANCELLED),
        status=pb.GroupStatus.Name(group.status).removeprefix("GROUP_STATUS_"),
        group=group.id,
        request_id=request_id,
        attempt=attempt,
        error_kind=_kind_name(error),
        error=error.message if error else "",
    )
