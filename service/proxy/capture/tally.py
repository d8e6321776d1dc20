"""Counting a rollout's model calls by whether they matter to a trainer.

A rollout is an infrastructure failure (UPSTREAM_LLM) when every trainable call failed
upstream, whatever its untrainable calls (opencode's title) did: a title that succeeded
while every main-agent call failed is no task result. When only some trainable calls failed,
the rollout is scored and the count is on the result, for a trainer to filter on.
"""

from __future__ import annotations

from service.models import Turn

__all__ = ["CallTally"]


class CallTally:
    """Trainable calls seen and how many failed upstream."""

    def __init__(self) -> None:
        self.trainable = 0
        self.trainable_failed = 0

    def add(self, turn: Turn, *, upstream_failed: bool) -> None:
        """Count one completed call; `upstream_failed` False for failures the upstream is not
        to blame for (the agent hung up)."""
        if turn.trainable:
            self.trainable += 1
            self.trainable_failed += upstream_failed

    @property
    def all_failed(self) -> bool:
        """True when there was a trainable call and every one failed upstream."""
        return self.trainable > 0 and self.trainable_failed == self.trainable
