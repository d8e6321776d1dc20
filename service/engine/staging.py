"""Where a task's files land in the sandbox, with their modes, and where commands run.

A key of `files` or `verifier_files` is relative to the task's workdir (`Task.workdir`,
else WORKDIR), or absolute ("/tests/test.sh", image sandboxes); a key of `solution_files`
is relative to SOLUTION_DIR. A file with a `file_modes` entry is chmod-ed once written.
"""

from __future__ import annotations

import shlex
from collections import defaultdict
from collections.abc import Mapping

from service.engine.task_extras import file_mode
from service.errors import SandboxError
from service.models import TaskSpec
from service.sandboxes import SOLUTION_DIR, WORKDIR, Sandbox

__all__ = ["make_workdir", "stage", "staged_path", "task_workdir"]

_CHMOD_TIMEOUT_S = 60.0


def task_workdir(task: TaskSpec) -> str:
    return task.workdir or WORKDIR


def staged_path(task: TaskSpec, key: str, *, solution: bool = False) -> str:
    """The absolute sandbox path of a file key."""
    if solution:
        return f"{SOLUTION_DIR}/{key}"
    return key if key.startswith("/") else f"{task_workdir(task).rstrip('/')}/{key}"


async def stage(
    sandbox: Sandbox, task: TaskSpec, files: Mapping[str, bytes], *, solution: bool = False
) -> None:
    """Write `files` (a map of `task`) into the sandbox, then apply their modes."""
    if not files:
        return
    await sandbox.write_files(
        {staged_path(task, key, solution=solution): data for key, data in files.items()}
    )
    by_mode: dict[int, list[str]] = defaultdict(list)
    for key in files:
        if key in task.file_modes:
            by_mode[file_mode(task, key)].append(staged_path(task, key, solution=solution))
    for mode, paths in sorted(by_mode.items()):
        quoted = " ".join(shlex.quote(path) for path in paths)
        result = await sandbox.exec(f"chmod {mode:o} -- {quoted}", timeout_s=_CHMOD_TIMEOUT_S)
        if result.exit_code != 0:
            raise SandboxError(f"could not set mode {mode:o} of staged files: {result.stderr}")


async def make_workdir(sandbox: Sandbox, task: TaskSpec) -> None:
    """Make the task's own workdir (WORKDIR always exists), so commands can enter it."""
    if task.workdir:
        command = f"mkdir -p -- {shlex.quote(task.workdir)}"
        result = await sandbox.exec(command, timeout_s=_CHMOD_TIMEOUT_S)
        if result.exit_code != 0:
            raise SandboxError(f"could not make the workdir {task.workdir}: {result.stderr}")
