"""Running a harness's process to a deadline: the one piece every agent shares."""

from __future__ import annotations

from service.agents.base import AgentOutcome
from service.sandboxes.base import BackgroundProcess
from service.sandboxes.deadline import wait_or_kill

__all__ = ["wait_with_deadline"]


async def wait_with_deadline(
    process: BackgroundProcess, timeout_s: float, *, log_tail: str = ""
) -> AgentOutcome:
    """Wait for `process` up to `timeout_s`; kill it (and its children) on timeout or cancel."""
    result = await wait_or_kill(process, timeout_s)
    if result is None:
        return AgentOutcome(exit_code=None, timed_out=True, log_tail=log_tail)
    tail = log_tail or (result.stdout + result.stderr)
    return AgentOutcome(exit_code=result.exit_code, timed_out=False, log_tail=tail)
