"""The per-rollout bound on agent output published as events."""

from __future__ import annotations

from service.engine.output_cap import OutputCap
from service.models import AgentOutput, AgentOutputKind


def test_output_past_the_limit_is_dropped_with_one_notice_and_still_tailed() -> None:
    published: list[AgentOutput] = []
    cap = OutputCap(published.append, limit_bytes=10, tail_bytes=4)
    for text in ("12345", "67890", "abc", "def"):
        cap(AgentOutput(kind=AgentOutputKind.STDOUT, text=text))
    assert [o.text for o in published[:2]] == ["12345", "67890"]
    assert [o.kind for o in published[2:]] == [AgentOutputKind.TRUNCATED]
    assert cap.dropped_bytes == 6
    assert cap.tail().endswith("cdef")
