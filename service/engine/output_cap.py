"""Bounds the agent output a rollout publishes as events, keeping a tail for the result."""

from __future__ import annotations

from collections.abc import Callable

from service.models import AgentOutput, AgentOutputKind
from service.sandboxes import HeadTailBuffer

__all__ = ["OutputCap"]

_RAW = frozenset({AgentOutputKind.STDOUT, AgentOutputKind.STDERR})


class OutputCap:
    """Passes agent output on until `limit_bytes`, then announces the drop once and counts."""

    def __init__(
        self, publish: Callable[[AgentOutput], None], *, limit_bytes: int, tail_bytes: int
    ) -> None:
        self._publish = publish
        self._limit = limit_bytes
        self._sent = 0
        self.dropped_bytes = 0
        self._tail = HeadTailBuffer(0, tail_bytes)

    def __call__(self, output: AgentOutput) -> None:
        data = output.text.encode()
        size = len(data)
        if output.kind in _RAW:
            self._tail.feed(data)
        if self._sent + size <= self._limit:
            self._sent += size
            self._publish(output)
            return
        if self.dropped_bytes == 0:
            self._publish(
                AgentOutput(
                    kind=AgentOutputKind.TRUNCATED,
                    text=f"agent output beyond {self._limit} bytes is not published as events",
                )
            )
        self.dropped_bytes += size

    def tail(self) -> str:
        """The end of the raw output seen so far."""
        return self._tail.text()
