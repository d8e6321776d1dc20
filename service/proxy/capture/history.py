"""What is new in a request, so a turn records only that and not the whole history.

Agents resend the whole conversation on every call. A route keeps, per requested model
(a "lane": the main loop and auxiliary calls such as titles are separate conversations),
the messages and tools of its latest request. A new request is recorded as
`request_message_offset` (the length of the prefix it shares with that latest request)
plus the messages after it, and its tools only when they changed. The full history of a
turn is therefore `history(previous turn of the same lane)[:offset] + request_messages`,
following turns of one `requested_model` in index order.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import orjson

__all__ = ["LaneHistory", "RequestDelta"]


@dataclass(frozen=True)
class RequestDelta:
    """The part of a request that a turn records."""

    offset: int
    messages: list[Any]
    tools: list[Any]
    """Full tool schemas, only when they differ from the lane's previous request."""
    tools_hash: str


def tools_hash(tools: list[Any]) -> str:
    """A stable short hash of tool schemas ("" for none)."""
    if not tools:
        return ""
    return hashlib.sha256(orjson.dumps(tools, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


@dataclass
class _Lane:
    messages: list[Any] = field(default_factory=list)
    tools: list[Any] = field(default_factory=list)
    tools_hash: str = ""


def _shared_prefix(previous: list[Any], current: list[Any]) -> int:
    count = 0
    for old, new in zip(previous, current, strict=False):
        if old is not new and old != new:
            break
        count += 1
    return count


class LaneHistory:
    """Latest request per lane of one route."""

    def __init__(self) -> None:
        self._lanes: dict[str, _Lane] = {}

    def delta(self, lane_name: str, messages: list[Any], tools: list[Any]) -> RequestDelta:
        """Record a request and return what is new in it for its lane."""
        lane = self._lanes.setdefault(lane_name, _Lane())
        offset = _shared_prefix(lane.messages, messages)
        changed = tools != lane.tools or (tools and not lane.tools_hash)
        if changed:
            lane.tools_hash = tools_hash(tools)
        delta = RequestDelta(offset, messages[offset:], tools if changed else [], lane.tools_hash)
        lane.messages, lane.tools = messages, tools
        return delta
