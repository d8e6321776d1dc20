"""Counting a rollout's model calls by whether they matter to a trainer.

A rollout is an infrastructure failure (UPSTREAM_LLM) when every trainable call failed
upstream, whatever its untrainable calls (opencode's title) did: a title that succeeded
while every main-agent call failed is no task result. When only some trainable calls failed,
the rollout is scored and the count is on the result, for a trainer to filter on.

A wrong endpoint is known at its first trainable call: the upstream cannot be reached
(connection refused, DNS, TLS) or refuses the call as such (401, 403, 404). The tally
then says so at once (`refused`), for the engine to stop the agent rather than let it
retry until its timeout; a refusal after a call went through is left to the counts above.
"""

from __future__ import annotations

import asyncio

from service.models import Turn

__all__ = ["REFUSED_STATUSES", "CallTally"]

REFUSED_STATUSES = frozenset({401, 403, 404})
"""Upstream answers that mean the endpoint itself is wrong (its key, URL or model)."""


class CallTally:
    """Trainable calls seen, how many failed upstream, and whether the endpoint refused."""

    def __init__(self) -> None:
        self.trainable = 0
        self.trainable_failed = 0
        self.refused = asyncio.Event()
        """Set when every trainable call so far failed and the last was refused or could
        not reach the upstream: a wrong endpoint."""
        self.refusal = ""
        """That call's error (status and the upstream's answer, scrubbed of secrets)."""

    def add(self, turn: Turn, *, upstream_failed: bool, unreachable: bool = False) -> None:
        """Count one completed call; `upstream_failed` False for failures the upstream is not
        to blame for (the agent hung up); `unreachable` when no connection was made."""
        if not turn.trainable:
            return
        self.trainable += 1
        self.trainable_failed += upstream_failed
        refused = unreachable or turn.upstream_status in REFUSED_STATUSES
        if self.all_failed and refused and not self.refused.is_set():
            self.refusal = turn.upstream_error or f"upstream HTTP {turn.upstream_status}"
            self.refused.set()

    @property
    def all_failed(self) -> bool:
        """True when there was a trainable call and every one failed upstream."""
        return self.trainable > 0 and self.trainable_failed == self.trainable
