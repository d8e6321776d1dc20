"""What is new in a request, so a turn records only that and not the whole history.

Agents resend the whole conversation on every call. A route keeps, per requested model
(a "lane": the main loop and auxiliary calls such as titles are separate conversations),
the messages and tools of its latest request. A new request is recorded as
`request_message_offset` (the length of the prefix it shares with that latest request)
plus the messages after it, and its tools only when they changed. The full history of a
turn is therefore `history(previous turn of the same lane)[:offset] + request_messages`,
following turns of one `requested_model` in index order.

What a route keeps is bounded, since the agent picks the model names and the sizes: the
`LANES_KEPT` most recently used lanes, and of each only a request under
`KEPT_REQUEST_BYTES` (before, eight 32 MiB calls under eight model names held 260 MiB
until the rollout ended). A lane forgotten, or whose latest request was larger, records
its next request whole (offset 0, its tools in full), which reads the same way.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import orjson

__all__ = ["KEPT_REQUEST_BYTES", "LANES_KEPT", "LaneHistory", "RequestDelta"]

KEPT_REQUEST_BYTES = 8 * 1024 * 1024
"""A larger request is not kept for the next one to be compared with (nor, by
`request_parse`, parsed against): no real conversation is this large (~2M tokens)."""
LANES_KEPT = 8
"""Lanes a route remembers: the main loop, titles, summaries, a few subagents."""


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

    def delta(
        self, lane_name: str, messages: list[Any], tools: list[Any], *, keep: bool = True
    ) -> RequestDelta:
        """Record a request and return what is new in it for its lane; `keep=False` for a
        request over `KEPT_REQUEST_BYTES` (the lane then forgets it)."""
        lane = self._lanes.pop(lane_name, None) or _Lane()
        offset = _shared_prefix(lane.messages, messages)
        changed = tools != lane.tools or (tools and not lane.tools_hash)
        if changed:
            lane.tools_hash = tools_hash(tools)
        delta = RequestDelta(offset, messages[offset:], tools if changed else [], lane.tools_hash)
        if keep:
            lane.messages, lane.tools = messages, tools
            self._lanes[lane_name] = lane  # the most recently used, last
        while len(self._lanes) > LANES_KEPT:
            del self._lanes[next(iter(self._lanes))]
        return delta
