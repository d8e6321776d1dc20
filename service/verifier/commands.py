"""Running a task's setup or verify commands, one at a time, in order."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from service.models import CommandResult, CommandStage
from service.sandboxes import Sandbox

__all__ = ["run_commands"]


async def run_commands(
    sandbox: Sandbox,
    commands: Sequence[str],
    *,
    stage: CommandStage,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    wrap: Callable[[str], str] | None = None,
    display: Sequence[str] = (),
    on_result: Callable[[CommandResult], None],
    stop_on_failure: bool,
) -> list[CommandResult]:
    """Run each command with its own budget (`wrap`ped, e.g. to enter the task's workdir,
    with `env` added to the sandbox's); report each result as it finishes. `display` is how
    each command is shown, where it differs from the command."""
    results: list[CommandResult] = []
    for index, command in enumerate(commands):
        run = command if wrap is None else wrap(command)
        outcome = await sandbox.exec(run, timeout_s=timeout_s, env=env or None)
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
            display_command=display[index] if index < len(display) else "",
        )
        results.append(result)
        on_result(result)
        if stop_on_failure and not result.passed:
            break
    return results
