"""A batch's output directory, the record that makes `--resume` possible:

    batch.json              the batch's id (its request ids derive from it) and group size
    results.jsonl           one line per finished rollout, appended and fsync'd as each ends
    trajectories/ID.*.json  one trajectory per rollout: ATIF (`.atif.json`) when
                            `rollout_client.export.atif` is installed, else the full rollout
                            as proto JSON (`.rollout.json`)
    summary.json            written when the batch ends (see `summary`)

A task is done when results.jsonl holds a line for each of its members. Resuming keeps those
lines, drops the lines of a task that was cut off mid-group (it runs again, whole), and a
torn last line (a crash mid-write).
"""

from __future__ import annotations

import importlib
import json
import os
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from rollout.v1 import rollout_pb2 as pb

from rollout_client.batch.results import BatchResult
from rollout_client.errors import SpecError

__all__ = ["BatchOutput", "open_output", "write_trajectory"]

BATCH_FILE = "batch.json"
RESULTS_FILE = "results.jsonl"
SUMMARY_FILE = "summary.json"
TRAJECTORIES = "trajectories"


@dataclass
class BatchOutput:
    """An open output directory: its batch id and the results it already holds."""

    directory: Path
    batch_id: str
    group_size: int
    done: list[BatchResult]
    """Results of tasks finished before (on --resume), in file order."""

    def done_tasks(self) -> set[str]:
        return {result.task for result in self.done}

    def append(self, result: BatchResult) -> None:
        """Add a line to results.jsonl, on disk before this returns."""
        with (self.directory / RESULTS_FILE).open("a", encoding="utf-8") as out:
            out.write(result.to_json() + "\n")
            out.flush()
            os.fsync(out.fileno())

    def write_summary(self, summary: dict[str, Any]) -> None:
        _write_atomically(self.directory / SUMMARY_FILE, json.dumps(summary, indent=2) + "\n")


def open_output(directory: Path, group_size: int, *, resume: bool) -> BatchOutput:
    """A new output directory, or (resume) the one an earlier run of this batch left."""
    batch_file = directory / BATCH_FILE
    if not resume:
        if batch_file.exists() or (directory / RESULTS_FILE).exists():
            raise SpecError(f"--output {directory}: holds a batch already; pass --resume")
        directory.mkdir(parents=True, exist_ok=True)
        batch_id = uuid.uuid4().hex[:16]
        document = {"batch_id": batch_id, "group_size": group_size}
        _write_atomically(batch_file, json.dumps(document, indent=2) + "\n")
        return BatchOutput(directory, batch_id, group_size, [])
    try:
        document = json.loads(batch_file.read_text(encoding="utf-8"))
        batch_id = str(document["batch_id"])
        before = int(document["group_size"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SpecError(f"--resume: {batch_file} is missing or unreadable ({exc})") from exc
    if before != group_size:
        raise SpecError(f"--group-size {group_size}: the batch in {directory} ran with {before}")
    done = _complete_results(directory / RESULTS_FILE, group_size)
    return BatchOutput(directory, batch_id, group_size, done)


def _complete_results(path: Path, group_size: int) -> list[BatchResult]:
    """The lines of finished tasks; the file is rewritten without any other line."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    results = []
    lines = text.split("\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            results.append(BatchResult.from_json(json.loads(line)))
        except (ValueError, TypeError) as exc:
            if number == len(lines):  # a torn last line: written when the run was killed
                continue
            raise SpecError(f"--resume: {path} line {number} is not a result ({exc})") from exc
    members = Counter(result.task for result in results)
    kept = [result for result in results if members[result.task] >= group_size]
    if len(kept) != len(results) or (text and not text.endswith("\n")):
        _write_atomically(path, "".join(result.to_json() + "\n" for result in kept))
    return kept


def write_trajectory(directory: Path, rollout: pb.Rollout) -> str:
    """The rollout's trajectory file (path relative to `directory`)."""
    try:
        # Imported when used: the exporter is optional and heavier than the client.
        atif = importlib.import_module("rollout_client.export.atif")
    except ModuleNotFoundError:
        name = f"{TRAJECTORIES}/{rollout.id}.rollout.json"
        text = json_format.MessageToJson(rollout, preserving_proto_field_name=True)
    else:
        name = f"{TRAJECTORIES}/{rollout.id}.atif.json"
        text = json.dumps(atif.to_atif(rollout), indent=2)
    (directory / TRAJECTORIES).mkdir(exist_ok=True)
    _write_atomically(directory / name, text + "\n")
    return name


def _write_atomically(path: Path, text: str) -> None:
    scratch = path.with_name(f".{path.name}.tmp")
    with scratch.open("w", encoding="utf-8") as out:
        out.write(text)
        out.flush()
        os.fsync(out.fileno())
    scratch.replace(path)
