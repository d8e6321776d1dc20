"""Running a task's setup or verify commands, one at a time, in order."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from service.models import CommandResult, CommandStage
from service.sandboxes.base import Sandbox

__all__ = ["run_commands"]


async def run_commands(
    sandbox: Sandbox,
    commands: Sequence[str],
    *,
    stage: CommandStage,
    timeout_s: float,
    on_result: Callable[[CommandResult], None],
    stop_on_failure: bool,
) -> list[CommandResult]:
    """Run each command with its own budget; report each result as it finishes."""
    results: list[CommandResult] = []
    for index, command in enumerate(commands):
        outcome = await sandbox.exec(command, timeout_s=timeout_s)
        result = CommandResult(
            stage=stage,
            index=index,
            command=command,
            exit_code=outcome.exit_code,
            stdout=outcome.stdout,
            stderr=outcome.stderr,
            stdout_bytes=outcome.stdout_bytes,
            stderr_bytes=outcome.stderr_bytes,
            duration_s=outcome.duration_s,
            timed_out=outcome.timed_out,
        )
        results.append(result)
        on_result(result)
        if stop_on_failure and not result.passed:
            break
    return results
