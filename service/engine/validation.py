"""Admission checks of a RolloutSpec: every violation found, each naming its proto field.

A spec that passes runs to a terminal state whose error, if any, is about the task, the
agent or the caller's endpoint, never SANDBOX or INTERNAL for something the spec said. So
everything a sandbox, a shell, an environment variable or an HTTP header cannot hold is
refused here: NUL in text (argv, environ and C strings end at it), sizes past what the
kernel takes (one argv string: 128 KiB), file paths (`task_paths`), resources outside the
server's minimum..maximum, an `api_key` with nowhere to go. Endpoint URLs and keys are
checked where they are resolved (`service.proxy.endpoints`), but where a caller's `base_url`
may lead (metadata, link-local, private ranges) here, with the server's settings
(`service.proxy.transport.addresses`). Messages quote input only as a short excerpt.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping

from service.config import Settings
from service.engine.task_extras import task_extras_violations
from service.engine.task_paths import carried_path_violations, path_violations
from service.errors import FieldViolation, SpecError, excerpt
from service.models import (
    SESSION_LABEL,
    CaptureMode,
    NetworkPolicy,
    RewardSource,
    RolloutSpec,
    Sampling,
    TaskSpec,
)
from service.proxy import url_problem
from service.registry import AGENTS, BACKENDS

__all__ = [
    "RESOURCE_MINIMUMS",
    "label_violations",
    "resolved_timeouts",
    "text_violations",
    "validate_spec",
]

_MAX_INSTRUCTION_BYTES = 1024 * 1024
_MAX_COMMANDS = 256
_MAX_COMMAND_BYTES = 64 * 1024
_MAX_OPTIONS_BYTES = 64 * 1024
_MAX_FILES = 4096
_MAX_LABELS = 64
_MAX_LABEL_BYTES = 256
_MAX_NAME_BYTES = 256
_MAX_URL_BYTES = 2048
_MAX_KEY_BYTES = 4096
_MAX_TOP_LOGPROBS = 20

RESOURCE_MINIMUMS = {
    "memory_mb": 64,
    "cpu_seconds": 1,
    "max_processes": 16,
    "max_file_size_mb": 1,
    "cpu_count": 1,
    "disk_mb": 64,
}
"""Smallest non-zero value of each Resources field: what a sandbox needs to start and run a
shell, Python and the model forwarder (memory_mb=1 killed the sandbox's own spawner, a
SANDBOX failure caused by the spec); a smaller disk is no filesystem worth making."""


def validate_spec(spec: RolloutSpec, settings: Settings) -> None:
    """Raise SpecError listing every problem of `spec`; return quietly when it is valid."""
    violations = [
        *_task(spec),
        *_agent(spec),
        *_endpoint(spec, settings),
        *_sandbox(spec),
        *_resources(spec, settings),
        *_timeouts(spec, settings),
        *task_extras_violations(spec, settings),
        *_bookkeeping(spec),
        *_size(spec, settings),
    ]
    if violations:
        raise SpecError(violations)


def resolved_timeouts(spec: RolloutSpec, settings: Settings) -> tuple[float, float, float]:
    """(agent budget, per-setup-command budget, per-verify-command budget) in seconds,
    server defaults filled in."""
    agent = spec.agent_timeout_s or settings.agent_timeout_default_s
    command = spec.command_timeout_s or settings.command_timeout_default_s
    return agent, command, spec.verify_timeout_s or command


def text_violations(field: str, value: str, max_bytes: int) -> list[FieldViolation]:
    """A text field longer than `max_bytes` (UTF-8), or holding NUL (where argv, environ and
    C strings end)."""
    if len(value) > max_bytes or len(value.encode()) > max_bytes:
        return [FieldViolation(field, f"exceeds {max_bytes} bytes")]
    if "\x00" in value:
        return [FieldViolation(field, "must not contain NUL characters")]
    return []


def label_violations(field: str, labels: Mapping[str, str]) -> list[FieldViolation]:
    """The rules of a label set, for a spec's labels and for List/Watch filters alike."""
    if len(labels) > _MAX_LABELS:
        return [FieldViolation(field, f"has {len(labels)} labels; at most {_MAX_LABELS}")]
    violations = []
    for key, value in labels.items():
        named = f"{field}[{excerpt(key)}]"
        if not key:
            violations.append(FieldViolation(named, "keys must not be empty"))
        violations += text_violations(named, key, _MAX_LABEL_BYTES)
        violations += text_violations(named, value, _MAX_LABEL_BYTES)
    return violations


def _commands(field: str, commands: tuple[str, ...]) -> Iterator[FieldViolation]:
    if len(commands) > _MAX_COMMANDS:
        yield FieldViolation(field, f"has more than {_MAX_COMMANDS} commands")
        return
    for i, command in enumerate(commands):
        if not command.strip():
            yield FieldViolation(f"{field}[{i}]", "is empty")
        yield from text_violations(f"{field}[{i}]", command, _MAX_COMMAND_BYTES)


def _task(spec: RolloutSpec) -> Iterator[FieldViolation]:
    task = spec.task
    if not task.instruction.strip():
        yield FieldViolation("spec.task.instruction", "is required")
    yield from text_violations("spec.task.instruction", task.instruction, _MAX_INSTRUCTION_BYTES)
    yield from _commands("spec.task.setup", task.setup)
    yield from _commands("spec.task.verify", task.verify)
    for field, files in (
        ("spec.task.files", task.files),
        ("spec.task.verifier_files", task.verifier_files),
    ):
        if len(files) > _MAX_FILES:
            yield FieldViolation(field, f"has more than {_MAX_FILES} files")
    yield from path_violations(task.files, task.verifier_files)
    yield from carried_path_violations(task.carried_paths)
    yield from _reward(task)


def _reward(task: TaskSpec) -> Iterator[FieldViolation]:
    violations = text_violations("spec.task.reward_key", task.reward_key, _MAX_LABEL_BYTES)
    yield from violations
    if not violations and task.reward_key and task.reward_source is RewardSource.COMMANDS:
        yield FieldViolation(
            "spec.task.reward_key", "names a reward.json key, but reward_source COMMANDS reads none"
        )


def _agent(spec: RolloutSpec) -> Iterator[FieldViolation]:
    agent = spec.agent
    if agent.name not in AGENTS:
        known = ", ".join(sorted(AGENTS))
        yield FieldViolation(
            "spec.agent.name", f"unknown agent {excerpt(agent.name)} (known: {known})"
        )
    if agent.name == "command" and not agent.command.strip():
        yield FieldViolation("spec.agent.command", "is required for the command agent")
    yield from text_violations("spec.agent.command", agent.command, _MAX_COMMAND_BYTES)
    if len(json.dumps(agent.options).encode()) > _MAX_OPTIONS_BYTES:
        yield FieldViolation("spec.agent.options", f"exceeds {_MAX_OPTIONS_BYTES} bytes as JSON")
    if not 0 <= spec.capture.top_logprobs <= _MAX_TOP_LOGPROBS:
        yield FieldViolation("spec.capture.top_logprobs", f"must be 0..{_MAX_TOP_LOGPROBS}")
    yield from _sampling(spec)


_SAMPLING_BOUNDS: tuple[tuple[str, Callable[[float], bool], str], ...] = (
    ("seed", lambda v: 0 <= v < 2**63, "must be 0..2^63-1"),
    ("temperature", lambda v: 0 <= v <= 2, "must be 0..2"),
    ("top_p", lambda v: 0 < v <= 1, "must be above 0 and at most 1"),
    ("top_k", lambda v: v >= -1, "must be -1 or 0 (no limit), or at least 1"),
    ("min_p", lambda v: 0 <= v <= 1, "must be 0..1"),
    ("presence_penalty", lambda v: -2 <= v <= 2, "must be -2..2"),
    ("frequency_penalty", lambda v: -2 <= v <= 2, "must be -2..2"),
    ("repetition_penalty", lambda v: 0 < v <= 2, "must be above 0 and at most 2"),
)
"""Each sampling field's range (NaN is in none: every comparison with it is false)."""


def _sampling(spec: RolloutSpec) -> Iterator[FieldViolation]:
    sampling = spec.capture.sampling
    for name, within, message in _SAMPLING_BOUNDS:
        value = getattr(sampling, name)
        if value is not None and not within(value):
            yield FieldViolation(f"spec.sampling.{name}", message)
    overridden = sampling != Sampling()
    if overridden and spec.capture.mode is not CaptureMode.TRANSPARENT_PROXY:
        yield FieldViolation("spec.sampling", "needs capture mode TRANSPARENT_PROXY")


def _endpoint(spec: RolloutSpec, settings: Settings) -> Iterator[FieldViolation]:
    endpoint = spec.endpoint
    for name, value, limit in (
        ("kind", endpoint.kind, _MAX_NAME_BYTES),
        ("base_url", endpoint.base_url, _MAX_URL_BYTES),
        ("api_key", endpoint.api_key, _MAX_KEY_BYTES),
        ("model", endpoint.model, _MAX_NAME_BYTES),
    ):
        yield from text_violations(f"spec.endpoint.{name}", value, limit)
    if endpoint.api_key and not (endpoint.base_url or endpoint.kind):
        yield FieldViolation(
            "spec.endpoint.api_key", "is given with no base_url or kind to send it to"
        )
    allow_private = settings.allow_private_endpoints
    if problem := url_problem(endpoint.base_url, allow_private=allow_private):
        yield FieldViolation("spec.endpoint.base_url", f"may not be reached: {problem}")


def _sandbox(spec: RolloutSpec) -> Iterator[FieldViolation]:
    endpoint = spec.endpoint
    black_box = spec.capture.mode is CaptureMode.BLACK_BOX and (endpoint.base_url or endpoint.kind)
    if black_box and spec.sandbox.network is NetworkPolicy.NONE:
        yield FieldViolation(
            "spec.sandbox.network",
            "BLACK_BOX capture calls the endpoint from the sandbox: it needs NETWORK_POLICY_FULL",
        )
    network, verifier = spec.sandbox.network, spec.sandbox.verifier_network
    if network is NetworkPolicy.FULL and verifier is NetworkPolicy.NONE:
        yield FieldViolation(
            "spec.sandbox.verifier_network",
            "NONE under network FULL is not supported: a sandbox's network can be opened "
            "for its verifier, never closed (leave it unset to follow network)",
        )
    backend = spec.sandbox.backend
    if backend and backend not in BACKENDS:
        known = ", ".join(sorted(BACKENDS))
        yield FieldViolation(
            "spec.sandbox.backend", f"unknown backend {excerpt(backend)} (known: {known})"
        )
    yield from text_violations("spec.sandbox.template", spec.sandbox.template, _MAX_NAME_BYTES)
    yield from text_violations("spec.sandbox.image", spec.sandbox.image, _MAX_NAME_BYTES)


def _resources(spec: RolloutSpec, settings: Settings) -> Iterator[FieldViolation]:
    """Each limit 0 (the server default) or within minimum..the server's maximum."""
    maxima = settings.sandbox_resource_maxima
    for name, minimum in RESOURCE_MINIMUMS.items():
        asked, maximum = getattr(spec.sandbox.resources, name), maxima[name]
        if asked and not minimum <= asked <= maximum:
            yield FieldViolation(
                f"spec.sandbox.resources.{name}",
                f"must be 0 (server default) or {minimum}..{maximum}; got {asked}",
            )


def _timeouts(spec: RolloutSpec, settings: Settings) -> Iterator[FieldViolation]:
    bounds = (
        ("spec.agent_timeout", spec.agent_timeout_s, settings.agent_timeout_max_s),
        ("spec.command_timeout", spec.command_timeout_s, settings.command_timeout_max_s),
        ("spec.verify_timeout", spec.verify_timeout_s, settings.command_timeout_max_s),
    )
    for field, value, maximum in bounds:
        if value is None:
            continue
        if value <= 0:
            yield FieldViolation(field, "must be positive")
        elif value > maximum:
            yield FieldViolation(field, f"must be at most {maximum:g} seconds")


def spec_bytes(spec: RolloutSpec) -> int:
    """What `spec`'s files, commands and instruction weigh (bounded by max_spec_bytes)."""
    task = spec.task
    staged = (*task.files.values(), *task.verifier_files.values(), *task.solution_files.values())
    total = sum(len(data) for data in staged)
    total += sum(len(command) for command in (*task.setup, *task.verify)) + len(task.instruction)
    return total + len(spec.agent.command)


def _size(spec: RolloutSpec, settings: Settings) -> Iterator[FieldViolation]:
    total = spec_bytes(spec)
    if total > settings.max_spec_bytes:
        yield FieldViolation("spec.task", f"{total} bytes exceeds {settings.max_spec_bytes}")


def _bookkeeping(spec: RolloutSpec) -> Iterator[FieldViolation]:
    for field, value in (("spec.task_id", spec.task_id), ("spec.request_id", spec.request_id)):
        yield from text_violations(field, value, _MAX_NAME_BYTES)
    yield from label_violations("spec.labels", spec.labels)
    if SESSION_LABEL in spec.labels:
        yield FieldViolation(f"spec.labels[{SESSION_LABEL}]", "is reserved for sessions' records")
