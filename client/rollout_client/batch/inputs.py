"""What a batch runs: a list of `BatchTask`s read from its input.

The input is one of:

- a Harbor dataset: a directory whose subdirectories are tasks (each with an instruction.md,
  as Harbor lays its datasets out); other entries are ignored;
- a single Harbor task directory (it has an instruction.md itself);
- a JSONL file: one RolloutSpec per line, in the proto JSON shape a spec file takes (bare or
  under "spec"); its `task_id` names the task, else `line-N`.

Task directories are packed as `rollout run --harbor-dir` packs them, and the command's
flags (agent, endpoint, sandbox, labels) are set over every spec as `rollout run` sets them.
A bad input is a SpecError naming the path or the line.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from rollout.v1 import rollout_pb2 as pb

from rollout_client.errors import SpecError
from rollout_client.messages import SpecLike, to_spec
from rollout_client.specfile import SpecOverrides, apply_overrides, build_spec

__all__ = ["BatchTask", "read_input", "tasks_of_specs"]

_INSTRUCTION = "instruction.md"


@dataclass(frozen=True)
class BatchTask:
    """One task of a batch: its id (unique in the batch) and the spec each member runs."""

    task_id: str
    spec: pb.RolloutSpec


def read_input(path: Path, overrides: SpecOverrides | None = None) -> list[BatchTask]:
    """The tasks of a dataset directory, a task directory or a JSONL file of specs, with
    `overrides` (the command's flags) set over each spec."""
    overrides = overrides or SpecOverrides()
    if path.is_dir():
        return _unique(_harbor_tasks(path, overrides), path)
    if path.is_file():
        return _unique(_jsonl_tasks(path, overrides), path)
    raise SpecError(f"batch input {path}: no such file or directory")


def tasks_of_specs(specs: Iterable[SpecLike]) -> list[BatchTask]:
    """Specs given in code: each named by its task_id, else `spec-N` (its position)."""
    tasks = []
    for number, given in enumerate(specs):
        spec = to_spec(given)
        tasks.append(BatchTask(spec.task_id or f"spec-{number}", spec))
    return _unique(tasks, None)


def _harbor_tasks(directory: Path, overrides: SpecOverrides) -> list[BatchTask]:
    if (directory / _INSTRUCTION).is_file():
        task_dirs = [directory]
    else:
        task_dirs = sorted(
            entry
            for entry in directory.iterdir()
            if entry.is_dir() and (entry / _INSTRUCTION).is_file()
        )
    if not task_dirs:
        raise SpecError(
            f"batch input {directory}: no Harbor task in it (no subdirectory has an "
            f"{_INSTRUCTION}, and neither has the directory itself)"
        )
    return [_harbor_task(task_dir, overrides) for task_dir in task_dirs]


def _harbor_task(task_dir: Path, overrides: SpecOverrides) -> BatchTask:
    spec = build_spec(None, replace(overrides, harbor_dir=task_dir))
    spec.task_id = spec.task_id or task_dir.name
    return BatchTask(task_dir.name, spec)


def _jsonl_tasks(path: Path, overrides: SpecOverrides) -> list[BatchTask]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"batch input {path}: cannot read it: {exc}") from exc
    tasks = []
    for number, line in enumerate(lines, start=1):
        if line.strip():
            spec = _jsonl_spec(path, number, line)
            apply_overrides(spec, overrides)
            tasks.append(BatchTask(spec.task_id or f"line-{number}", spec))
    if not tasks:
        raise SpecError(f"batch input {path}: no spec in it (an empty JSONL file)")
    return tasks


def _jsonl_spec(path: Path, number: int, line: str) -> pb.RolloutSpec:
    where = f"batch input {path} line {number}"
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise SpecError(f"{where}: not JSON: {exc.msg}") from exc
    if isinstance(data, dict) and set(data) == {"spec"}:
        data = data["spec"]
    if not isinstance(data, dict):
        raise SpecError(f"{where}: expected a spec object, found {type(data).__name__}")
    try:
        return to_spec(data)
    except SpecError as exc:
        raise SpecError(f"{where}: {exc}") from exc


def _unique(tasks: list[BatchTask], path: Path | None) -> list[BatchTask]:
    twice = sorted(name for name, count in Counter(t.task_id for t in tasks).items() if count > 1)
    if twice:
        where = f"batch input {path}" if path is not None else "batch specs"
        raise SpecError(f"{where}: task ids must be unique; repeated: {', '.join(twice)}")
    return tasks
