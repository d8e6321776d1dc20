"""EventFeed: the shared feed of recent events holds at most its byte budget, and nothing
while nobody reads it."""

from __future__ import annotations

from datetime import UTC, datetime

from service.engine.feed import EventFeed, event_bytes
from service.models import AgentOutput, AgentOutputKind, RolloutEvent


def event(seq: int, text: str) -> RolloutEvent:
    payload = AgentOutput(kind=AgentOutputKind.STDOUT, text=text)
    return RolloutEvent(rollout_id="r", seq=seq, time=datetime.now(UTC), payload=payload)


def test_old_events_leave_once_the_budget_is_exceeded() -> None:
    size = event_bytes(event(1, "x" * 1000))
    feed = EventFeed(budget_bytes=10 * size)

    with feed.reading():
        for seq in range(1, 101):
            feed.append(event(seq, "x" * 1000))

        assert (feed.start, feed.end) == (90, 100)
        assert feed.held_bytes == 10 * size
        assert [feed.at(position).seq for position in range(feed.start, feed.end)] == list(
            range(91, 101)
        )


def test_the_newest_event_stays_even_when_larger_than_the_budget() -> None:
    feed = EventFeed(budget_bytes=100)

    with feed.reading():
        feed.append(event(1, "small"))
        feed.append(event(2, "y" * 10_000))

        assert (feed.start, feed.end) == (1, 2)
        assert feed.at(1).seq == 2


def test_nothing_is_held_while_nobody_reads() -> None:
    feed = EventFeed(budget_bytes=1024 * 1024)

    for seq in range(1, 51):
        feed.append(event(seq, "unread"))
    assert (feed.start, feed.end, feed.held_bytes) == (50, 50, 0)

    with feed.reading(), feed.reading():
        feed.append(event(51, "read"))
        assert [feed.at(position).seq for position in range(feed.start, feed.end)] == [51]
    assert (feed.start, feed.end, feed.held_bytes) == (51, 51, 0)


def test_an_event_is_measured_by_its_content() -> None:
    assert event_bytes(event(1, "z" * 100_000)) - event_bytes(event(1, "")) == 100_000
