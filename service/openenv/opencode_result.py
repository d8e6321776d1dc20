"""A finished Rollout as the seed's `run_rollout` result JSON, so a trainer's parser reads it.

The seed's fields, with what fills them here:

    field            from the Rollout
    task_id          spec.task_id
    sandbox_id       result.sandbox_id
    reward           result.reward (null when unset, never a made-up 0)
    agent_exit_code  result.agent_exit_code
    wall_s           result.timings.total
    mode             the `mode` argument
    setup_results,   result.setup_results / verify_results: cmd, exit_code, stdout, stderr,
    verify_results   duration_s
    proxy_turns      result.turns: turn (index), finish_reason, completion_tokens,
                     completion_token_ids, per_token_logps (logprobs), latency_s,
                     timestamp (start, epoch seconds), upstream_status (null when none),
                     upstream_error ({"message": ...} or null)
    files            result.files, keyed by absolute path in the workdir as the seed's were,
                     decoded as UTF-8 (undecodable bytes replaced)
    files_extra      result.files_omitted, likewise absolute
    agent_log_tail   result.agent_log_tail
    proxy_log_tail   "": the capture proxy runs outside the sandbox and keeps no log there
    error            null on success, else "<ERROR_KIND>: message"

Added, which a parser of the seed's shape ignores: `rollout_id` (GetRollout / WatchRollout),
`status` (SUCCEEDED, FAILED, TIMED_OUT, CANCELLED) and `error_kind`, which tells "the
infrastructure failed, retry" (SANDBOX, AGENT_INSTALL, UPSTREAM_LLM, ...) from "score it".
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field
from rollout.v1 import rollout_pb2 as pb
from rollout_client import reward_of, status_name

__all__ = ["CommandResult", "RolloutResult", "RolloutTurn", "result_of"]

DEFAULT_WORKDIR = "/home/user/workdir"


class RolloutTurn(BaseModel):
    """One model call the capture proxy recorded."""

    turn: int
    finish_reason: str | None = None
    completion_tokens: list[str] = Field(default_factory=list)
    completion_token_ids: list[int] = Field(default_factory=list)
    per_token_logps: list[float] = Field(default_factory=list)
    latency_s: float = 0.0
    timestamp: float = 0.0
    upstream_status: int | None = None
    upstream_error: dict[str, Any] | None = None


class CommandResult(BaseModel):
    """One setup or verify command."""

    cmd: str
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    duration_s: float = 0.0


class RolloutResult(BaseModel):
    """The JSON `run_rollout` returns: the seed's fields, then this service's additions."""

    task_id: str = ""
    sandbox_id: str = ""
    reward: float | None = None
    agent_exit_code: int | None = None
    wall_s: float = 0.0
    mode: str = "transparent_proxy"
    setup_results: list[CommandResult] = Field(default_factory=list)
    verify_results: list[CommandResult] = Field(default_factory=list)
    proxy_turns: list[RolloutTurn] = Field(default_factory=list)
    files: dict[str, str] = Field(default_factory=dict)
    files_extra: list[str] = Field(default_factory=list)
    agent_log_tail: str = ""
    proxy_log_tail: str = ""
    error: str | None = None
    rollout_id: str = ""
    status: str = ""
    error_kind: str | None = None


def result_of(rollout: pb.Rollout, mode: str) -> RolloutResult:
    """The seed's result for a terminal `rollout` run with capture `mode`."""
    result = rollout.result
    workdir = rollout.spec.task.workdir or DEFAULT_WORKDIR
    kind = pb.ErrorKind.Name(result.error.kind) if result.HasField("error") else None
    return RolloutResult(
        task_id=rollout.spec.task_id,
        sandbox_id=result.sandbox_id,
        reward=reward_of(rollout),
        agent_exit_code=result.agent_exit_code if result.HasField("agent_exit_code") else None,
        wall_s=round(result.timings.total.ToTimedelta().total_seconds(), 3),
        mode=mode,
        setup_results=[_command(c) for c in result.setup_results],
        verify_results=[_command(c) for c in result.verify_results],
        proxy_turns=[_turn(t) for t in result.turns],
        files={
            f"{workdir}/{path}": content.decode("utf-8", "replace")
            for path, content in sorted(result.files.items())
        },
        files_extra=[f"{workdir}/{path}" for path in result.files_omitted],
        agent_log_tail=result.agent_log_tail,
        error=f"{kind.removeprefix('ERROR_KIND_')}: {result.error.message}" if kind else None,
        rollout_id=rollout.id,
        status=status_name(rollout.status),
        error_kind=kind.removeprefix("ERROR_KIND_") if kind else None,
    )


def _command(command: pb.CommandResult) -> CommandResult:
    return CommandResult(
        cmd=command.command,
        exit_code=command.exit_code,
        stdout=command.stdout,
        stderr=command.stderr,
        duration_s=round(command.duration.ToTimedelta().total_seconds(), 3),
    )


def _turn(turn: pb.Turn) -> RolloutTurn:
    return RolloutTurn(
        turn=turn.index,
        finish_reason=turn.finish_reason or None,
        completion_tokens=list(turn.completion_tokens),
        completion_token_ids=list(turn.completion_token_ids),
        per_token_logps=list(turn.logprobs),
        latency_s=round(turn.latency.ToTimedelta().total_seconds(), 6),
        timestamp=turn.start_time.ToMicroseconds() / 1e6,
        upstream_status=turn.upstream_status or None,
        upstream_error={"message": turn.upstream_error} if turn.upstream_error else None,
    )
