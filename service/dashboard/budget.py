"""The bytes of request bodies the dashboard holds at once, across all its calls.

Each call's body is bounded (`inbound.REQUEST_MAX_BYTES`), but a client may open many
connections and send each a body to the bound and no further: without a shared bound, the
server holds a mebibyte per connection, as many as it accepts. A call's chunks are counted
in as they are read and out once its message is decoded; a chunk that would pass the
budget refuses its call with RESOURCE_EXHAUSTED (HTTP 429), at once rather than queued, so
that the bytes held never pass it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from connectrpc.code import Code
from connectrpc.errors import ConnectError

__all__ = ["BodyBudget", "Held"]


class Held:
    """One call's share of the budget."""

    def __init__(self, budget: BodyBudget) -> None:
        self._budget = budget
        self.size = 0

    def add(self, size: int) -> None:
        """Count `size` more bytes in; the call is refused if the budget cannot hold them."""
        self._budget.take(size)
        self.size += size


class BodyBudget:
    """At most `max_bytes` of request bodies held at once."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.held = 0

    @contextmanager
    def holding(self) -> Iterator[Held]:
        """A call's share, given back when the block ends."""
        share = Held(self)
        try:
            yield share
        finally:
            self.held -= share.size

    def take(self, size: int) -> None:
        if self.held + size > self.max_bytes:
            raise ConnectError(
                Code.RESOURCE_EXHAUSTED,
                f"the dashboard is reading {self.max_bytes} bytes of requests at once, its "
                "limit: retry when calls in flight end",
            )
        self.held += size
