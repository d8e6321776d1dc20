"""Waiting for a sandboxed process to a deadline: the one rule every caller shares."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

from service.sandboxes.base import BackgroundProcess, ExecResult

__all__ = ["wait_or_kill"]


async def wait_or_kill(
    process: BackgroundProcess,
    timeout_s: float,
    *,
    paused_s: Callable[[], float] | None = None,
) -> ExecResult | None:
    """The process's result, or None once it has been killed at the deadline.

    With `paused_s` (seconds not to count so far, e.g. while the process's model calls were
    paused), the deadline moves by it. Cancelling the wait (or any error) kills it too. What
    a timed-out process leaves is the caller's to report: a local one can be waited for
    again, a remote sandbox may be gone.
    """
    try:
        if paused_s is None:
            return await asyncio.wait_for(process.wait(), timeout_s)
        return await _wait_extended(process, timeout_s, paused_s)
    except TimeoutError:
        await _kill(process)
        return None
    except BaseException:
        await _kill(process)
        raise


async def _wait_extended(
    process: BackgroundProcess, timeout_s: float, paused_s: Callable[[], float]
) -> ExecResult:
    """Wait to `timeout_s` plus whatever `paused_s` has grown to by then, checking again at
    each deadline (a pause under way keeps moving it)."""
    began = time.monotonic()
    waiter = asyncio.ensure_future(process.wait())
    try:
        while True:
            remaining = began + timeout_s + paused_s() - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            done, _ = await asyncio.wait({waiter}, timeout=remaining)
            if done:
                return waiter.result()
    finally:
        waiter.cancel()


async def _kill(process: BackgroundProcess) -> None:
    # Shielded, so that a second cancel cannot leave the process running; a failing kill
    # must not hide why we stopped waiting.
    with contextlib.suppress(Exception):
        await asyncio.shield(process.kill())
