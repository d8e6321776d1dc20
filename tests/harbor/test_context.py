"""`HarborTasks`' build context on disk: written aside and renamed into place, and nothing of
it left behind when writing fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.config import Settings
from service.harbor.source import TaskFile, TaskTree, tree_digest
from service.harbor.tasks import HarborTasks


def _tasks(tmp_path: Path) -> HarborTasks:
    return HarborTasks(Settings(state_dir=tmp_path / "state", cache_dir=tmp_path / "cache"))


def test_the_context_is_the_tasks_environment(tmp_path: Path) -> None:
    tree: TaskTree = {
        "instruction.md": TaskFile(b"do it\n", 0o644),
        "environment/Dockerfile": TaskFile(b"FROM rollout/base\n", 0o644),
        "environment/bin/run": TaskFile(b"#!/bin/sh\n", 0o755),
    }
    tasks = _tasks(tmp_path)
    digest = tree_digest(tree)
    tasks.contexts.write(tree, digest)
    tasks.contexts.write(tree, digest)  # a second admission of the same task: already there
    harbor = tmp_path / "state" / "harbor"
    assert [entry.name for entry in harbor.iterdir()] == [digest]
    context = harbor / digest / "environment"
    assert sorted(str(p.relative_to(context)) for p in context.rglob("*")) == [
        "Dockerfile",
        "bin",
        "bin/run",
    ]
    assert (context / "bin" / "run").stat().st_mode & 0o777 == 0o755


def test_a_context_that_cannot_be_written_leaves_nothing(tmp_path: Path) -> None:
    tree: TaskTree = {  # `x` a file and a directory: refused from an archive, written here
        "environment/x": TaskFile(b"z", 0o644),
        "environment/x/y": TaskFile(b"z", 0o644),
    }
    with pytest.raises(FileExistsError):
        _tasks(tmp_path).contexts.write(tree, tree_digest(tree))
    assert list((tmp_path / "state" / "harbor").iterdir()) == []
