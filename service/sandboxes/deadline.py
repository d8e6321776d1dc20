"""Waiting for a sandboxed process to a deadline: the one rule every caller shares."""

from __future__ import annotations

import asyncio
import contextlib

from service.sandboxes.base import BackgroundProcess, ExecResult

__all__ = ["wait_or_kill"]


async def wait_or_kill(process: BackgroundProcess, timeout_s: float) -> ExecResult | None:
    """The process's result, or None once it has been killed at the deadline.

    Cancelling the wait (or any error) kills it too. What a timed-out process leaves is
    the caller's to report: a local one can be waited for again, a remote sandbox may be
    gone.
    """
    try:
        return await asyncio.wait_for(process.wait(), timeout_s)
    except TimeoutError:
        await _kill(process)
        return None
    except BaseException:
        await _kill(process)
        raise


async def _kill(process: BackgroundProcess) -> None:
    # Shielded, so that a second cancel cannot leave the process running; a failing kill
    # must not hide why we stopped waiting.
    with contextlib.suppress(Exception):
        await asyncio.shield(process.kill())
