"""Responses out: domain values to protobuf messages (requests come in through `inbound`)."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import Enum
from typing import Any

from google.protobuf import duration_pb2, struct_pb2, timestamp_pb2
from rollout.v1 import rollout_pb2 as pb

from service.models import (
    AgentOutput,
    CommandResult,
    Notice,
    PhaseChanged,
    Rollout,
    RolloutEvent,
    RolloutResult,
    RolloutSpec,
    Turn,
)

__all__ = [
    "duration",
    "enum_to_proto",
    "event_to_proto",
    "rollout_to_proto",
    "spec_to_proto",
    "timestamp",
]


def enum_to_proto(value: Enum, prefix: str) -> int:
    return int(
        pb.DESCRIPTOR.enum_types_by_name[prefix]
        .values_by_name[f"{_snake_upper(prefix)}_{value.name}"]
        .number
    )


def _snake_upper(name: str) -> str:
    return "".join(f"_{c}" if c.isupper() and i else c for i, c in enumerate(name)).upper()


def duration(seconds: float) -> duration_pb2.Duration:
    message = duration_pb2.Duration()
    message.FromNanoseconds(int(seconds * 1e9))
    return message


def timestamp(moment: datetime | None) -> timestamp_pb2.Timestamp | None:
    if moment is None:
        return None
    message = timestamp_pb2.Timestamp()
    message.FromDatetime(moment.astimezone(UTC))
    return message


def _struct(value: dict[str, Any]) -> struct_pb2.Struct:
    message = struct_pb2.Struct()
    message.update(value)
    return message


def spec_to_proto(spec: RolloutSpec) -> pb.RolloutSpec:
    message = pb.RolloutSpec(
        task_id=spec.task_id,
        task=pb.Task(
            instruction=spec.task.instruction,
            setup=spec.task.setup,
            verify=spec.task.verify,
            files=spec.task.files,
            verifier_files=spec.task.verifier_files,
            reward_source=enum_to_proto(spec.task.reward_source, "RewardSource"),  # type: ignore[arg-type]
            reward_key=spec.task.reward_key,
            env=spec.task.env,
            file_modes=spec.task.file_modes,
            solution_files=spec.task.solution_files,
            verifier_env=spec.task.verifier_env,
            solution_env=spec.task.solution_env,
            workdir=spec.task.workdir,
            verify_mode=enum_to_proto(spec.task.verify_mode, "VerifyMode"),  # type: ignore[arg-type]
            carried_paths=spec.task.carried_paths,
        ),
        agent=pb.Agent(
            name=spec.agent.name, command=spec.agent.command, options=_struct(spec.agent.options)
        ),
        endpoint=pb.Endpoint(
            kind=spec.endpoint.kind,
            base_url=spec.endpoint.base_url,
            model=spec.endpoint.model,
            dialect_mode=enum_to_proto(spec.endpoint.dialect_mode, "DialectMode"),  # type: ignore[arg-type]
        ),
        sandbox=pb.SandboxSpec(
            backend=spec.sandbox.backend,
            template=spec.sandbox.template,
            image=spec.sandbox.image,
            network=enum_to_proto(spec.sandbox.network, "NetworkPolicy"),  # type: ignore[arg-type]
            verifier_network=(
                pb.NETWORK_POLICY_UNSPECIFIED  # follows network
                if spec.sandbox.verifier_network is None
                else enum_to_proto(spec.sandbox.verifier_network, "NetworkPolicy")  # type: ignore[arg-type]
            ),
            resources=pb.Resources(**spec.sandbox.resources.model_dump()),
        ),
        capture=pb.Capture(
            mode=enum_to_proto(spec.capture.mode, "CaptureMode"),  # type: ignore[arg-type]
            max_tokens_cap=spec.capture.max_tokens_cap,
            top_logprobs=spec.capture.top_logprobs,
            disable_thinking=spec.capture.disable_thinking,
        ),
        labels=spec.labels,
        request_id=spec.request_id,
        sampling=pb.Sampling(**spec.capture.sampling.model_dump()),
        max_policy_lag=spec.max_policy_lag,
    )
    if spec.agent_timeout_s is not None:
        message.agent_timeout.CopyFrom(duration(spec.agent_timeout_s))
    if spec.command_timeout_s is not None:
        message.command_timeout.CopyFrom(duration(spec.command_timeout_s))
    if spec.verify_timeout_s is not None:
        message.verify_timeout.CopyFrom(duration(spec.verify_timeout_s))
    if spec.harbor_task is not None:
        harbor = spec.harbor_task
        message.harbor_task.CopyFrom(pb.HarborTask(digest=harbor.digest))
        if harbor.archive:
            message.harbor_task.archive = harbor.archive
        else:
            message.harbor_task.path = harbor.path
    return message


def rollout_to_proto(rollout: Rollout, *, slim: bool = False) -> pb.Rollout:
    """A rollout for the wire; `slim` leaves out its bulk (see `Rollout.slim`)."""
    if slim:
        rollout = rollout.slim()
    message = pb.Rollout(
        id=rollout.id,
        spec=spec_to_proto(rollout.spec.redacted()),
        status=enum_to_proto(rollout.status, "RolloutStatus"),  # type: ignore[arg-type]
        phase=enum_to_proto(rollout.phase, "Phase"),  # type: ignore[arg-type]
        result=_result_to_proto(rollout.result),
        create_time=timestamp(rollout.create_time),
        start_time=timestamp(rollout.start_time),
        finish_time=timestamp(rollout.finish_time),
        tenant=rollout.tenant,
        group_id=rollout.group_id,
        member_index=rollout.member_index,
    )
    return message


def _result_to_proto(result: RolloutResult) -> pb.RolloutResult:
    timings = result.timings
    message = pb.RolloutResult(
        reward=result.reward,
        metrics=result.metrics,
        reward_key=result.reward_key,
        agent_exit_code=result.agent_exit_code,
        setup_results=[_command_to_proto(r) for r in result.setup_results],
        verify_results=[_command_to_proto(r) for r in result.verify_results],
        timings=pb.PhaseTimings(
            **{
                name.removesuffix("_s"): duration(value)
                for name, value in timings.model_dump().items()
            }
        ),
        sandbox_id=result.sandbox_id,
        turn_count=result.turn_count,
        files_omitted=result.files_omitted,
        trainable_calls=result.trainable_calls,
        trainable_calls_failed=result.trainable_calls_failed,
        agent_log_tail=result.agent_log_tail,
        policy_version_min=result.policy_version_min,
        policy_version_max=result.policy_version_max,
    )
    if result.error is not None:
        message.error.CopyFrom(
            pb.Error(
                kind=enum_to_proto(result.error.kind, "ErrorKind"),  # type: ignore[arg-type]
                message=result.error.message,
            )
        )
    message.turns.extend(_turn_to_proto(turn) for turn in result.turns)
    message.files.update(result.files)
    return message


def _command_to_proto(result: CommandResult) -> pb.CommandResult:
    return pb.CommandResult(
        stage=enum_to_proto(result.stage, "CommandStage"),  # type: ignore[arg-type]
        index=result.index,
        command=result.command,
        exit_code=result.exit_code,
        stdout=result.stdout,
        stderr=result.stderr,
        stdout_bytes=result.stdout_bytes,
        stderr_bytes=result.stderr_bytes,
        duration=duration(result.duration_s),
        timed_out=result.timed_out,
        display_command=result.display_command,
    )


def _turn_to_proto(turn: Turn) -> pb.Turn:
    message = pb.Turn(
        index=turn.index,
        trainable=turn.trainable,
        requested_model=turn.requested_model,
        request_messages=[_struct(m) for m in turn.request_messages],
        request_message_offset=turn.request_message_offset,
        tools=[_struct(t) for t in turn.tools],
        tools_hash=turn.tools_hash,
        completion_text=turn.completion_text,
        reasoning_text=turn.reasoning_text,
        tool_calls=[pb.ToolCall(**call.model_dump()) for call in turn.tool_calls],
        finish_reason=turn.finish_reason,
        prompt_token_ids=turn.prompt_token_ids,
        completion_token_ids=turn.completion_token_ids,
        logprobs=turn.logprobs,
        completion_tokens=turn.completion_tokens,
        top_logprobs=[
            pb.TopLogprobs(entries=[pb.TokenLogprob(**e.model_dump()) for e in entries])
            for entries in turn.top_logprobs
        ],
        token_ids_present=turn.token_ids_present,
        usage=pb.Usage(**turn.usage.model_dump()),
        latency=duration(turn.latency_s),
        upstream_status=turn.upstream_status,
        upstream_error=turn.upstream_error,
        stream=turn.stream,
        start_time=timestamp(turn.start_time),
        incomplete=turn.incomplete,
        logprobs_present=turn.logprobs_present,
        usage_counted=turn.usage_counted,
        unparsed=turn.unparsed,
        raw_request=turn.raw_request,
        dialect=enum_to_proto(turn.dialect, "Dialect"),  # type: ignore[arg-type]
        translated=turn.translated,
        body_cut=turn.body_cut,
        body_bytes_dropped=turn.body_bytes_dropped,
        policy_version_start=turn.policy_version_start,
        policy_version_end=turn.policy_version_end,
        upstream_weight_version=turn.upstream_weight_version,
        paused=duration(turn.paused_s),
        sampling=pb.Sampling(**turn.sampling.model_dump()),
        sampling_stripped=turn.sampling_stripped,
    )
    if turn.time_to_first_token_s is not None:
        message.time_to_first_token.CopyFrom(duration(turn.time_to_first_token_s))
    return message


def event_to_proto(event: RolloutEvent) -> pb.RolloutEvent:
    """An event for the wire; the final event carries the slim rollout (turns were events)."""
    message = pb.RolloutEvent(
        rollout_id=event.rollout_id, seq=event.seq, time=timestamp(event.time)
    )
    payload = event.payload
    if isinstance(payload, PhaseChanged):
        message.phase.CopyFrom(
            pb.PhaseChanged(
                phase=enum_to_proto(payload.phase, "Phase"),  # type: ignore[arg-type]
                status=enum_to_proto(payload.status, "RolloutStatus"),  # type: ignore[arg-type]
                message=payload.message,
            )
        )
    elif isinstance(payload, CommandResult):
        message.command.CopyFrom(_command_to_proto(payload))
    elif isinstance(payload, Turn):
        message.turn.CopyFrom(_turn_to_proto(payload))
    elif isinstance(payload, AgentOutput):
        message.output.CopyFrom(
            pb.AgentOutput(
                kind=enum_to_proto(payload.kind, "AgentOutputKind"),  # type: ignore[arg-type]
                text=payload.text,
                tool_name=payload.tool_name,
            )
        )
    elif isinstance(payload, Notice):
        message.notice.CopyFrom(pb.Notice(topic=payload.topic, message=payload.message))
    else:
        message.finished.CopyFrom(rollout_to_proto(payload, slim=True))
    return message
