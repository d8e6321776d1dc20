"""Requests in: protobuf fields to domain values, refusing what the wire allows but means nothing.

Protobuf accepts more than a request can mean: enum numbers no version of the contract
defines (open enums keep them), Durations outside their documented range, Struct numbers
that are NaN or infinite (not JSON), sequence numbers past SQLite's signed 64 bits. Each is
an INVALID_ARGUMENT naming the field here, at the edge, instead of a silent default or an
exception deep inside. Rules about what a spec asks for live in `service.engine.validation`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from enum import Enum
from typing import TypeVar

from google.protobuf import duration_pb2, json_format, struct_pb2
from google.protobuf.descriptor import EnumDescriptor
from rollout.v1 import rollout_pb2 as pb

from service.engine import label_violations, text_violations
from service.errors import FieldViolation, SpecError
from service.models import (
    AgentSpec,
    CaptureMode,
    CaptureSpec,
    DialectMode,
    EndpointSpec,
    GroupStatus,
    HarborTaskSpec,
    NetworkPolicy,
    Resources,
    RewardSource,
    RolloutSpec,
    RolloutStatus,
    Sampling,
    SandboxSpec,
    TaskSpec,
    VerifyMode,
)

__all__ = [
    "after_seq_from_proto",
    "cancel_reason_from_proto",
    "duration_from_proto",
    "group_deadline_from_proto",
    "group_statuses_from_proto",
    "id_from_proto",
    "label_filter_from_proto",
    "rollout_id_from_proto",
    "slim_view",
    "spec_from_proto",
    "statuses_from_proto",
]

E = TypeVar("E", bound=Enum)

_MAX_SEQ = 2**63 - 1
"""Event sequence numbers are SQLite integers (signed 64 bits)."""
_MAX_DURATION_SECONDS = 315_576_000_000
"""google.protobuf.Duration's documented range: +-10,000 years."""
_MAX_ROLLOUT_ID_CHARS = 256
_MAX_REASON_BYTES = 1024


class _Violations(list[FieldViolation]):
    def add(self, field: str, description: str) -> None:
        self.append(FieldViolation(field, description))

    def raise_any(self) -> None:
        if self:
            raise SpecError(list(self))


def _enum(
    number: int, descriptor: EnumDescriptor, domain: type[E], field: str, violations: _Violations
) -> E | None:
    """The domain value of a defined, specified enum number; None (and a violation) otherwise."""
    value = descriptor.values_by_number.get(number)
    if value is None or number == 0:
        if value is None:
            violations.add(field, f"{number} is not a {descriptor.full_name} value")
        return None
    prefix = descriptor.values_by_number[0].name.removesuffix("UNSPECIFIED")
    return domain[value.name.removeprefix(prefix)]


def _seconds(message: duration_pb2.Duration, field: str, violations: _Violations) -> float:
    seconds, nanos = message.seconds, message.nanos
    valid = (
        abs(seconds) <= _MAX_DURATION_SECONDS
        and abs(nanos) < 1_000_000_000
        and not (seconds > 0 > nanos or seconds < 0 < nanos)
    )
    if not valid:
        violations.add(field, "not a valid Duration (nanos in -999999999..999999999, same sign)")
    return seconds + nanos / 1e9


def _non_finite(value: struct_pb2.Value, path: str) -> Iterator[str]:
    kind = value.WhichOneof("kind")
    if kind == "number_value" and not math.isfinite(value.number_value):
        yield path
    elif kind == "struct_value":
        for key, item in value.struct_value.fields.items():
            yield from _non_finite(item, f"{path}.{key}")
    elif kind == "list_value":
        for index, item in enumerate(value.list_value.values):
            yield from _non_finite(item, f"{path}[{index}]")


def _options(message: struct_pb2.Struct, violations: _Violations) -> dict[str, object]:
    field = "spec.agent.options"
    bad = [path for key, value in message.fields.items() for path in _non_finite(value, key)]
    for path in bad[:8]:
        violations.add(f"{field}.{path[:64]}", "NaN and Infinity are not JSON numbers")
    return {} if bad else json_format.MessageToDict(message)


def spec_from_proto(message: pb.RolloutSpec) -> RolloutSpec:
    """A request's spec as the domain model; wire-level nonsense is a SpecError.

    What the spec asks for (sizes, paths, limits) is still unvalidated.
    """
    violations = _Violations()
    task, agent = message.task, message.agent
    spec = RolloutSpec(
        task_id=message.task_id,
        task=TaskSpec(
            instruction=task.instruction,
            setup=tuple(task.setup),
            verify=tuple(task.verify),
            files=dict(task.files),
            verifier_files=dict(task.verifier_files),
            reward_source=_enum(
                task.reward_source,
                pb.RewardSource.DESCRIPTOR,
                RewardSource,
                "spec.task.reward_source",
                violations,
            )
            or RewardSource.AUTO,
            reward_key=task.reward_key,
            env=dict(task.env),
            file_modes=dict(task.file_modes),
            solution_files=dict(task.solution_files),
            verifier_env=dict(task.verifier_env),
            solution_env=dict(task.solution_env),
            workdir=task.workdir,
            verify_mode=_enum(
                task.verify_mode,
                pb.VerifyMode.DESCRIPTOR,
                VerifyMode,
                "spec.task.verify_mode",
                violations,
            )
            or VerifyMode.AUTO,
            carried_paths=tuple(task.carried_paths),
        ),
        agent=AgentSpec(
            name=agent.name or "command",
            command=agent.command,
            options=_options(agent.options, violations),
        ),
        endpoint=EndpointSpec(
            kind=message.endpoint.kind,
            base_url=message.endpoint.base_url,
            api_key=message.endpoint.api_key,
            model=message.endpoint.model,
            dialect_mode=_enum(
                message.endpoint.dialect_mode,
                pb.DialectMode.DESCRIPTOR,
                DialectMode,
                "spec.endpoint.dialect_mode",
                violations,
            )
            or DialectMode.TRANSLATED,
        ),
        sandbox=_sandbox_from_proto(message.sandbox, violations),
        capture=_capture_from_proto(message.capture, message.sampling, violations),
        agent_timeout_s=(
            _seconds(message.agent_timeout, "spec.agent_timeout", violations)
            if message.HasField("agent_timeout")
            else None
        ),
        command_timeout_s=(
            _seconds(message.command_timeout, "spec.command_timeout", violations)
            if message.HasField("command_timeout")
            else None
        ),
        verify_timeout_s=(
            _seconds(message.verify_timeout, "spec.verify_timeout", violations)
            if message.HasField("verify_timeout")
            else None
        ),
        harbor_task=(
            HarborTaskSpec(
                path=message.harbor_task.path,
                archive=message.harbor_task.archive,
                digest=message.harbor_task.digest,
            )
            if message.HasField("harbor_task")
            else None
        ),
        labels=dict(message.labels),
        request_id=message.request_id,
        max_policy_lag=message.max_policy_lag if message.HasField("max_policy_lag") else None,
    )
    violations.raise_any()
    return spec


def _sandbox_from_proto(message: pb.SandboxSpec, violations: _Violations) -> SandboxSpec:
    r = message.resources
    network = _enum(
        message.network,
        pb.NetworkPolicy.DESCRIPTOR,
        NetworkPolicy,
        "spec.sandbox.network",
        violations,
    )
    verifier_network = _enum(
        message.verifier_network,
        pb.NetworkPolicy.DESCRIPTOR,
        NetworkPolicy,
        "spec.sandbox.verifier_network",
        violations,
    )
    return SandboxSpec(
        backend=message.backend,
        template=message.template,
        image=message.image,
        network=network or NetworkPolicy.NONE,
        verifier_network=verifier_network,
        resources=Resources(
            memory_mb=r.memory_mb,
            cpu_seconds=r.cpu_seconds,
            max_processes=r.max_processes,
            max_file_size_mb=r.max_file_size_mb,
            cpu_count=r.cpu_count,
            disk_mb=r.disk_mb,
        ),
    )


def _capture_from_proto(
    message: pb.Capture, sampling: pb.Sampling, violations: _Violations
) -> CaptureSpec:
    mode = _enum(
        message.mode, pb.CaptureMode.DESCRIPTOR, CaptureMode, "spec.capture.mode", violations
    )
    return CaptureSpec(
        mode=mode or CaptureMode.TRANSPARENT_PROXY,
        max_tokens_cap=message.max_tokens_cap,
        top_logprobs=message.top_logprobs if message.HasField("top_logprobs") else 1,
        disable_thinking=message.disable_thinking,
        sampling=_sampling_from_proto(sampling),
    )


def _sampling_from_proto(message: pb.Sampling) -> Sampling:
    """Each field the caller set (an unset one is not sent upstream at all)."""
    return Sampling(
        **{name: getattr(message, name) for name in Sampling.model_fields if message.HasField(name)}
    )


def group_deadline_from_proto(message: pb.GroupSpec) -> float | None:
    """The group's deadline in seconds (None: unset); a malformed Duration is a SpecError."""
    if not message.HasField("deadline"):
        return None
    violations = _Violations()
    seconds = _seconds(message.deadline, "spec.deadline", violations)
    violations.raise_any()
    return seconds


def statuses_from_proto(values: Iterable[int]) -> list[RolloutStatus]:
    """A status filter; UNSPECIFIED and undefined numbers are refused, not read as QUEUED."""
    return _status_filter(values, pb.RolloutStatus.DESCRIPTOR, RolloutStatus)


def group_statuses_from_proto(values: Iterable[int]) -> list[GroupStatus]:
    """A group status filter, refusing what `statuses_from_proto` refuses."""
    return _status_filter(values, pb.GroupStatus.DESCRIPTOR, GroupStatus)


def _status_filter(values: Iterable[int], descriptor: EnumDescriptor, domain: type[E]) -> list[E]:
    violations = _Violations()
    statuses = []
    for index, number in enumerate(values):
        field = f"statuses[{index}]"
        status = _enum(number, descriptor, domain, field, violations)
        if status is None and number == 0:
            unspecified = descriptor.values_by_number[0].name
            violations.add(field, f"{unspecified} is no status to filter by")
        if status is not None:
            statuses.append(status)
    violations.raise_any()
    return statuses


def slim_view(view: int, *, default_slim: bool) -> bool:
    """Whether a ResultView asks for the slim form; an undefined number is refused."""
    if view == pb.RESULT_VIEW_UNSPECIFIED:
        return default_slim
    if view not in pb.ResultView.DESCRIPTOR.values_by_number:
        raise SpecError([FieldViolation("view", f"{view} is not a rollout.v1.ResultView value")])
    return view == pb.RESULT_VIEW_SLIM


def label_filter_from_proto(labels: Mapping[str, str]) -> dict[str, str]:
    """A label filter, held to the rules of the labels a spec may carry."""
    violations = _Violations(label_violations("labels", labels))
    violations.raise_any()
    return dict(labels)


def after_seq_from_proto(after_seq: int) -> int:
    if after_seq > _MAX_SEQ:
        raise SpecError([FieldViolation("after_seq", f"must be at most {_MAX_SEQ}")])
    return after_seq


def rollout_id_from_proto(rollout_id: str) -> str:
    return id_from_proto(rollout_id, "rollout_id")


def id_from_proto(value: str, field: str) -> str:
    """A required id (a rollout's, a session's), held to 256 characters."""
    if not value:
        raise SpecError([FieldViolation(field, "is required")])
    if len(value) > _MAX_ROLLOUT_ID_CHARS:
        raise SpecError([FieldViolation(field, f"exceeds {_MAX_ROLLOUT_ID_CHARS} characters")])
    return value


def duration_from_proto(message: duration_pb2.Duration, field: str) -> float | None:
    """Seconds of an optional Duration (None when zero: unset), refused when not valid."""
    violations = _Violations()
    seconds = _seconds(message, field, violations)
    violations.raise_any()
    return seconds or None


def cancel_reason_from_proto(reason: str) -> str:
    violations = _Violations(text_violations("reason", reason, _MAX_REASON_BYTES))
    violations.raise_any()
    return reason
