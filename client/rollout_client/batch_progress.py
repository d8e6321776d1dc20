"""The live line `rollout batch` shows while it runs (on stderr, redrawn in place).

12/80 done, 8 running, 60 queued | mean reward 0.583 | infra retries 1 | tokens 10432
    | 41s, ~3m11s left
"""

from __future__ import annotations

import time

from rich.console import Console
from rich.live import Live
from rich.text import Text

from rollout_client.batch.runner import Tally
from rollout_client.render import figure

__all__ = ["live_progress", "progress_line"]


def _duration(seconds_left: float) -> str:
    minutes, secs = divmod(int(seconds_left), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def progress_line(tally: Tally, now: float | None = None) -> Text:
    """The batch so far, with a remaining-time estimate from the pace of finished rollouts."""
    elapsed = (time.monotonic() if now is None else now) - tally.started
    mean = "-" if tally.mean_reward is None else figure(tally.mean_reward)
    left = ""
    if tally.done and tally.total > tally.done:
        left = f", ~{_duration(elapsed / tally.done * (tally.total - tally.done))} left"
    tokens = tally.prompt_tokens + tally.completion_tokens
    return Text(
        f"{tally.done}/{tally.total} done, {tally.running} running, {tally.queued} queued"
        f" | mean reward {mean} | infra retries {tally.infra_retries} | tokens {tokens}"
        f" | {_duration(elapsed)}{left}"
    )


class _Line:
    """A renderable read afresh at each redraw, so the clock ticks between results."""

    def __init__(self, tally: Tally) -> None:
        self._tally = tally

    def __rich__(self) -> Text:
        return progress_line(self._tally)


def live_progress(tally: Tally, console: Console) -> Live:
    """The progress line, redrawn twice a second while the returned Live is entered."""
    return Live(_Line(tally), console=console, refresh_per_second=2)
