"""Running a harness's process to a deadline: the one piece every agent shares."""

from __future__ import annotations

import asyncio
import contextlib

from service.agents.base import AgentOutcome
from service.sandboxes.base import BackgroundProcess

__all__ = ["wait_with_deadline"]


async def wait_with_deadline(
    process: BackgroundProcess, timeout_s: float, *, log_tail: str = ""
) -> AgentOutcome:
    """Wait for `process` up to `timeout_s`; kill it (and its children) on timeout or cancel."""
    try:
        result = await asyncio.wait_for(process.wait(), timeout_s)
    except TimeoutError:
        await _kill(process)
        return AgentOutcome(exit_code=None, timed_out=True, log_tail=log_tail)
    except BaseException:
        await _kill(process)
        raise
    tail = log_tail or (result.stdout + result.stderr)
    return AgentOutcome(exit_code=result.exit_code, timed_out=False, log_tail=tail)


async def _kill(process: BackgroundProcess) -> None:
    # Shielded so that a second cancel cannot leave the agent running.
    with contextlib.suppress(Exception):
        await asyncio.shield(process.kill())
