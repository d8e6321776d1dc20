"""Admission checks of a RolloutSpec: every violation found, each naming its proto field."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import PurePosixPath

from service.config import Settings
from service.errors import FieldViolation, SpecError
from service.models import CaptureMode, NetworkPolicy, RolloutSpec
from service.registry import AGENTS, BACKENDS

__all__ = ["resolved_timeouts", "validate_spec"]

_MAX_INSTRUCTION_BYTES = 1024 * 1024
_MAX_COMMANDS = 256
_MAX_COMMAND_BYTES = 64 * 1024
_MAX_FILES = 4096
_MAX_LABELS = 64
_MAX_LABEL_CHARS = 256
_MAX_ID_CHARS = 256
_MAX_TOP_LOGPROBS = 20
_MIN_DISK_MB = 64
"""The smallest filesystem worth making for a sandbox."""


def validate_spec(spec: RolloutSpec, settings: Settings) -> None:
    """Raise SpecError listing every problem of `spec`; return quietly when it is valid."""
    violations = [
        *_task(spec),
        *_agent(spec),
        *_sandbox(spec),
        *_disk(spec, settings),
        *_timeouts(spec, settings),
        *_bookkeeping(spec),
        *_size(spec, settings),
    ]
    if violations:
        raise SpecError(violations)


def resolved_timeouts(spec: RolloutSpec, settings: Settings) -> tuple[float, float]:
    """(agent budget, per-command budget) in seconds, server defaults filled in."""
    agent = spec.agent_timeout_s or settings.agent_timeout_default_s
    command = spec.command_timeout_s or settings.command_timeout_default_s
    return agent, command


def _task(spec: RolloutSpec) -> Iterator[FieldViolation]:
    task = spec.task
    if not task.instruction.strip():
        yield FieldViolation("spec.task.instruction", "is required")
    elif len(task.instruction.encode()) > _MAX_INSTRUCTION_BYTES:
        yield FieldViolation("spec.task.instruction", f"exceeds {_MAX_INSTRUCTION_BYTES} bytes")
    for name in ("setup", "verify"):
        commands = getattr(task, name)
        if len(commands) > _MAX_COMMANDS:
            yield FieldViolation(f"spec.task.{name}", f"has more than {_MAX_COMMANDS} commands")
        for i, command in enumerate(commands):
            if not command.strip():
                yield FieldViolation(f"spec.task.{name}[{i}]", "is empty")
            elif len(command.encode()) > _MAX_COMMAND_BYTES:
                yield FieldViolation(
                    f"spec.task.{name}[{i}]", f"exceeds {_MAX_COMMAND_BYTES} bytes"
                )
    yield from _files("spec.task.files", task.files)
    yield from _files("spec.task.verifier_files", task.verifier_files)


def _files(field: str, files: Mapping[str, bytes]) -> Iterator[FieldViolation]:
    if len(files) > _MAX_FILES:
        yield FieldViolation(field, f"has more than {_MAX_FILES} files")
    for path in files:
        parts = PurePosixPath(path).parts
        if not path or path.startswith("/") or ".." in parts or "\x00" in path:
            yield FieldViolation(f"{field}[{path!r}]", "must be a relative path inside the workdir")


def _agent(spec: RolloutSpec) -> Iterator[FieldViolation]:
    agent = spec.agent
    if agent.name not in AGENTS:
        known = ", ".join(sorted(AGENTS))
        yield FieldViolation("spec.agent.name", f"unknown agent {agent.name!r} (known: {known})")
    if agent.name == "command" and not agent.command.strip():
        yield FieldViolation("spec.agent.command", "is required for the command agent")
    if not 0 <= spec.capture.top_logprobs <= _MAX_TOP_LOGPROBS:
        yield FieldViolation("spec.capture.top_logprobs", f"must be 0..{_MAX_TOP_LOGPROBS}")


def _sandbox(spec: RolloutSpec) -> Iterator[FieldViolation]:
    endpoint = spec.endpoint
    black_box = spec.capture.mode is CaptureMode.BLACK_BOX and (endpoint.base_url or endpoint.kind)
    if black_box and spec.sandbox.network is NetworkPolicy.NONE:
        yield FieldViolation(
            "spec.sandbox.network",
            "BLACK_BOX capture calls the endpoint from the sandbox: it needs NETWORK_POLICY_FULL",
        )
    backend = spec.sandbox.backend
    if backend and backend not in BACKENDS:
        known = ", ".join(sorted(BACKENDS))
        yield FieldViolation(
            "spec.sandbox.backend", f"unknown backend {backend!r} (known: {known})"
        )


def _disk(spec: RolloutSpec, settings: Settings) -> Iterator[FieldViolation]:
    disk_mb = spec.sandbox.resources.disk_mb
    if disk_mb and not _MIN_DISK_MB <= disk_mb <= settings.sandbox_disk_max_mb:
        yield FieldViolation(
            "spec.sandbox.resources.disk_mb",
            f"must be {_MIN_DISK_MB}..{settings.sandbox_disk_max_mb} (MiB), or 0 for the default",
        )


def _timeouts(spec: RolloutSpec, settings: Settings) -> Iterator[FieldViolation]:
    bounds = (
        ("spec.agent_timeout", spec.agent_timeout_s, settings.agent_timeout_max_s),
        ("spec.command_timeout", spec.command_timeout_s, settings.command_timeout_max_s),
    )
    for field, value, maximum in bounds:
        if value is None:
            continue
        if value <= 0:
            yield FieldViolation(field, "must be positive")
        elif value > maximum:
            yield FieldViolation(field, f"must be at most {maximum:g} seconds")


def _size(spec: RolloutSpec, settings: Settings) -> Iterator[FieldViolation]:
    task = spec.task
    total = sum(len(data) for data in (*task.files.values(), *task.verifier_files.values()))
    total += sum(len(command) for command in (*task.setup, *task.verify)) + len(task.instruction)
    if total > settings.max_spec_bytes:
        yield FieldViolation("spec.task", f"{total} bytes exceeds {settings.max_spec_bytes}")


def _bookkeeping(spec: RolloutSpec) -> Iterator[FieldViolation]:
    for field, value in (("spec.task_id", spec.task_id), ("spec.request_id", spec.request_id)):
        if len(value) > _MAX_ID_CHARS:
            yield FieldViolation(field, f"exceeds {_MAX_ID_CHARS} characters")
    if len(spec.labels) > _MAX_LABELS:
        yield FieldViolation("spec.labels", f"has more than {_MAX_LABELS} labels")
    for key, value in spec.labels.items():
        if not key or len(key) > _MAX_LABEL_CHARS or len(value) > _MAX_LABEL_CHARS:
            yield FieldViolation(
                f"spec.labels[{key!r}]", f"keys must be 1..{_MAX_LABEL_CHARS} chars, values at most"
            )
