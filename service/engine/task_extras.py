"""Admission rules for a task's environment, file modes, solution files and workdir.

| field                      | rule                                                      |
| -------------------------- | --------------------------------------------------------- |
| env, verifier_env, ...     | shell names; not HOME nor OPENAI_* (the service's own)    |
| file_modes[path]           | octal 000..777 (no setuid/setgid/sticky), of a staged file |
| solution_files             | the workdir path rules (`task_paths`), under /solution    |
| workdir                    | absolute and canonical, e.g. "/app"                        |

Solution files (at /solution), absolute file keys and a workdir outside HOME need a root of
the sandbox's own: a local sandbox on an image, or an E2B sandbox on a Harbor task's template
(built with root as its user). On `host` or another E2B template they are refused here
rather than failing as SANDBOX at staging.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

from service.config import Settings
from service.engine.task_paths import map_violations
from service.errors import FieldViolation, excerpt
from service.harbor import task_template_name
from service.models import RolloutSpec, TaskSpec
from service.registry import backend_capabilities
from service.sandboxes import HOME, SOLUTION_DIR

__all__ = ["file_mode", "task_extras_violations"]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MODE = re.compile(r"0?[0-7]{3}")
_RESERVED = re.compile(r"HOME|OPENAI_.*")
_MAX_VARIABLES = 256
_MAX_VALUE_BYTES = 64 * 1024
_MAX_WORKDIR_BYTES = 1024
_DEFAULT_MODE = 0o644


def file_mode(task: TaskSpec, path: str) -> int:
    """The mode a staged file gets: its `file_modes` entry, else 644."""
    mode = task.file_modes.get(path)
    return int(mode, 8) if mode else _DEFAULT_MODE


def task_extras_violations(spec: RolloutSpec, settings: Settings) -> Iterator[FieldViolation]:
    task = spec.task
    for name in ("env", "verifier_env", "solution_env"):
        yield from _env_violations(f"spec.task.{name}", getattr(task, name))
    yield from _mode_violations(task)
    yield from map_violations("spec.task.solution_files", task.solution_files)
    yield from _workdir_violations(task.workdir)
    if not _has_own_root(spec, settings):
        yield from _root_violations(task)


def _has_own_root(spec: RolloutSpec, settings: Settings) -> bool:
    """Whether the sandbox has a root of its own: a local sandbox on an image, or an E2B
    sandbox on the template built from a Harbor task's Dockerfile (its user is root)."""
    backend = backend_capabilities(spec.sandbox.backend or settings.default_backend)
    if backend.task_templates:
        harbor = spec.harbor_task
        return harbor is not None and spec.sandbox.template == task_template_name(harbor.digest)
    return backend.store_images and (spec.sandbox.image or settings.sandbox_image) != "host"


def _root_violations(task: TaskSpec) -> Iterator[FieldViolation]:
    """What needs a root of the sandbox's own: elsewhere it is the host's (read-only) or E2B's."""
    why = "needs a local sandbox on an image (spec.sandbox.image not 'host')"
    if task.solution_files:
        yield FieldViolation("spec.task.solution_files", f"are staged at {SOLUTION_DIR}: {why}")
    for field in ("files", "verifier_files"):
        for key in getattr(task, field):
            if key.startswith("/"):
                yield FieldViolation(f"spec.task.{field}[{excerpt(key)}]", f"is absolute: {why}")
                break
    if task.workdir and not task.workdir.startswith(f"{HOME}/"):
        yield FieldViolation("spec.task.workdir", f"is outside {HOME}: {why}")


def _env_violations(field: str, env: Mapping[str, str]) -> Iterator[FieldViolation]:
    if len(env) > _MAX_VARIABLES:
        yield FieldViolation(field, f"has more than {_MAX_VARIABLES} variables")
        return
    for name, value in env.items():
        named = f"{field}[{excerpt(name)}]"
        if not _NAME.fullmatch(name):
            yield FieldViolation(named, "must be a shell name ([A-Za-z_][A-Za-z0-9_]*)")
        elif _RESERVED.fullmatch(name):
            yield FieldViolation(named, "is set by the service (HOME, OPENAI_*)")
        if "\x00" in value or len(value.encode()) > _MAX_VALUE_BYTES:
            yield FieldViolation(named, f"must hold no NUL and at most {_MAX_VALUE_BYTES} bytes")


def _mode_violations(task: TaskSpec) -> Iterator[FieldViolation]:
    staged = {*task.files, *task.verifier_files, *task.solution_files}
    for path, mode in task.file_modes.items():
        named = f"spec.task.file_modes[{excerpt(path)}]"
        if path not in staged:
            yield FieldViolation(named, "names no file of files, verifier_files or solution_files")
        elif not _MODE.fullmatch(mode):
            yield FieldViolation(named, f"must be an octal mode 000..777; got {excerpt(mode)}")


def _workdir_violations(workdir: str) -> Iterator[FieldViolation]:
    if workdir in ("", "/"):
        return
    field = "spec.task.workdir"
    parts = workdir.split("/")[1:]
    if not workdir.startswith("/") or any(part in ("", ".", "..") for part in parts):
        yield FieldViolation(field, "must be an absolute canonical path, e.g. /app")
    elif len(workdir.encode()) > _MAX_WORKDIR_BYTES or any(ord(c) < 0x20 for c in workdir):
        yield FieldViolation(field, f"must be at most {_MAX_WORKDIR_BYTES} bytes, no controls")
