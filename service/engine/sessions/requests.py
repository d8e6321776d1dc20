"""What a session's caller asks for, and the rules it is held to (INVALID_ARGUMENT naming
the field: `SpecError`). The wire's own nonsense (bad Durations, undecodable bytes) is
refused at the edge (`api.session_inbound`)."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from service.config import Settings
from service.engine.staging import staged_path
from service.engine.validation import text_violations
from service.errors import FieldViolation, SpecError
from service.models import AgentSpec, RolloutSpec, TaskSpec
from service.sandboxes import in_workdir

__all__ = [
    "DEFAULT_FILE_BYTES",
    "DEFAULT_LIST_ENTRIES",
    "DEFAULT_OUTPUT_BYTES",
    "CommandRequest",
    "OpenRequest",
    "OpenTerms",
    "check_content",
    "checked_command",
    "checked_open",
    "file_bound",
    "list_bound",
    "session_path",
]

_MAX_COMMAND_BYTES = 64 * 1024
_MAX_PATH_BYTES = 4096
_MAX_ENV_VARS = 256
_MAX_ENV_BYTES = 64 * 1024
DEFAULT_OUTPUT_BYTES = 1024 * 1024
MAX_OUTPUT_BYTES = 16 * 1024 * 1024
DEFAULT_FILE_BYTES = 1024 * 1024
MAX_FILE_BYTES = 16 * 1024 * 1024
DEFAULT_LIST_ENTRIES = 1000
MAX_LIST_ENTRIES = 10_000
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class OpenRequest:
    """OpenSession: the spec (agent unset), how many copies, and how long they may live."""

    spec: RolloutSpec
    copies: int = 1
    idle_timeout_s: float | None = None
    """None: the server's default."""
    max_lifetime_s: float | None = None


@dataclass(frozen=True)
class OpenTerms:
    """An OpenRequest checked, server defaults filled in."""

    copies: int
    idle_timeout_s: float
    max_lifetime_s: float


@dataclass(frozen=True)
class CommandRequest:
    """Exec: one command line and how it runs."""

    command: str
    timeout_s: float | None = None
    """None: the spec's command timeout, else the server's default."""
    cwd: str = ""
    env: Mapping[str, str] = field(default_factory=dict)
    max_output_bytes: int = 0
    """0: DEFAULT_OUTPUT_BYTES."""


def checked_open(request: OpenRequest, settings: Settings) -> OpenTerms:
    """The terms of an OpenSession, or SpecError naming every field out of bounds."""
    violations: list[FieldViolation] = []
    if request.spec.agent != AgentSpec():
        violations.append(
            FieldViolation("spec.agent", "must be unset: a session's agent is its caller")
        )
    if request.spec.request_id:
        violations.append(FieldViolation("spec.request_id", "sessions take no request_id"))
    if not 0 <= request.copies <= settings.session_copies_max:
        violations.append(
            FieldViolation("copies", f"must be 0..{settings.session_copies_max} (0 means 1)")
        )
    idle = _within(
        "idle_timeout",
        request.idle_timeout_s,
        settings.session_idle_timeout_default_s,
        settings.session_idle_timeout_max_s,
        violations,
    )
    lifetime = _within(
        "max_lifetime",
        request.max_lifetime_s,
        settings.session_lifetime_default_s,
        min(settings.session_lifetime_max_s, settings.agent_timeout_max_s),
        violations,
    )
    if violations:
        raise SpecError(violations)
    return OpenTerms(copies=request.copies or 1, idle_timeout_s=idle, max_lifetime_s=lifetime)


def _within(
    name: str,
    value: float | None,
    default: float,
    maximum: float,
    violations: list[FieldViolation],
) -> float:
    if value is None:
        return min(default, maximum)
    if not 0 < value <= maximum:
        violations.append(FieldViolation(name, f"must be above 0 and at most {maximum:g}s"))
    return value


def checked_command(
    request: CommandRequest, task: TaskSpec, settings: Settings, spec_timeout_s: float | None
) -> tuple[str, float, dict[str, str], int]:
    """(the command line run in its directory, its timeout, its env, its output bound), or
    SpecError naming every field out of bounds."""
    violations = text_violations("command", request.command, _MAX_COMMAND_BYTES)
    if not request.command.strip():
        violations.append(FieldViolation("command", "is required"))
    timeout = request.timeout_s or spec_timeout_s or settings.command_timeout_default_s
    if not 0 < timeout <= settings.command_timeout_max_s:
        violations.append(
            FieldViolation("timeout", f"must be at most {settings.command_timeout_max_s:g}s")
        )
    violations += _env_violations(request.env)
    if not 0 <= request.max_output_bytes <= MAX_OUTPUT_BYTES:
        violations.append(FieldViolation("max_output_bytes", f"must be 0..{MAX_OUTPUT_BYTES}"))
    cwd = ""
    if request.cwd:
        try:
            cwd = session_path(task, request.cwd, "cwd")
        except SpecError as exc:
            violations += exc.violations
    if violations:
        raise SpecError(violations)
    directory = cwd or task.workdir
    line = in_workdir(directory, request.command)
    return line, timeout, dict(request.env), request.max_output_bytes or DEFAULT_OUTPUT_BYTES


def _env_violations(env: Mapping[str, str]) -> list[FieldViolation]:
    if len(env) > _MAX_ENV_VARS:
        return [FieldViolation("env", f"has {len(env)} variables; at most {_MAX_ENV_VARS}")]
    violations = []
    for name, value in env.items():
        named = f"env[{name[:64]!r}]"
        if not _ENV_NAME.fullmatch(name):
            violations.append(FieldViolation(named, "names must be shell names ([A-Za-z_]\\w*)"))
        violations += text_violations(named, value, _MAX_ENV_BYTES)
    return violations


def session_path(task: TaskSpec, path: str, name: str) -> str:
    """The absolute sandbox path a caller's path names (relative: to the task's workdir),
    or SpecError naming field `name`: no NUL, no `.` or `..` parts, at most 4 KiB."""
    violations = text_violations(name, path, _MAX_PATH_BYTES)
    if not violations and not path:
        violations.append(FieldViolation(name, "is required"))
    parts = [part for part in path.split("/") if part]
    if not violations and any(part in (".", "..") for part in parts):
        violations.append(FieldViolation(name, "must not have . or .. parts"))
    if violations:
        raise SpecError(violations)
    absolute = staged_path(task, path)
    return posixpath.normpath(absolute) if absolute != "/" else absolute


def file_bound(max_bytes: int) -> int:
    """ReadFile's byte bound (0: the default), or SpecError naming `max_bytes`."""
    if not 0 <= max_bytes <= MAX_FILE_BYTES:
        raise SpecError([FieldViolation("max_bytes", f"must be 0..{MAX_FILE_BYTES}")])
    return max_bytes or DEFAULT_FILE_BYTES


def list_bound(max_entries: int) -> int:
    """ListFiles' entry bound (0: the default), or SpecError naming `max_entries`."""
    if not 0 <= max_entries <= MAX_LIST_ENTRIES:
        raise SpecError([FieldViolation("max_entries", f"must be 0..{MAX_LIST_ENTRIES}")])
    return max_entries or DEFAULT_LIST_ENTRIES


def check_content(content: bytes) -> None:
    """WriteFile's content bound, or SpecError naming `content`."""
    if len(content) > MAX_FILE_BYTES:
        raise SpecError([FieldViolation("content", f"exceeds {MAX_FILE_BYTES} bytes")])
