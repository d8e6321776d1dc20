"""Parse a route's chat requests, reusing the messages and tools it already parsed.

An agent resends its whole conversation and its tool schemas with every call, serialised
the same way, so a request starts with the same bytes as the previous one up to its
newest messages. Parsing those ~50 KB again was a quarter of the proxy's CPU. A
`RequestParser` keeps the previous request's bytes, its parsed messages with the offset
where each one ends, and its parsed tools with their offset. For a new request it cuts
out of the bytes the messages that lie wholly inside the shared byte prefix, and the
tools if the same bytes are there again, each replaced by a placeholder value; it parses
the (small) rest and puts the kept objects back in place of the placeholders.

Why that is exact: the cut bytes are whole JSON values (a run of array elements, or one
array) replaced by one value, so the rest is valid JSON exactly when the request is. A
JSON prefix fixes its own meaning, so a message that ends inside the shared prefix is the
same element of the same array; the placeholders are unguessable strings, and finding
them under the top-level "messages" and "tools" after parsing proves the cuts were those
values (not a nested or duplicate key). Offsets are only learned from compact JSON (each
value byte-identical to orjson's serialisation of it, as from JavaScript's
`JSON.stringify`); anything else takes the full parse, and after a serialiser mismatch
the route stops trying.
"""

from __future__ import annotations

import bisect
import secrets
from typing import Any

import orjson

from service.proxy.capture.history import KEPT_REQUEST_BYTES
from service.proxy.capture.prompt_ids import shared_prefix_bytes

__all__ = ["RequestParser"]

_TOOLS_KEY = b'"tools":'
_MIN_TOOLS_BYTES = 64
"""Smaller tool lists are cheap to parse again and not worth a cut."""


class _Tools:
    """The previous request's tools: parsed, as bytes, and where they were."""

    def __init__(self, tools: list[Any], encoded: bytes, at: int, raw_length: int) -> None:
        self.tools, self.encoded, self.at = tools, encoded, at
        self.from_end = raw_length - at

    def find(self, raw: bytes) -> int:
        """Where the same tool bytes are in `raw` (same offset, or same distance from the
        end), as a "tools" value; -1 if not."""
        for at in (self.at, len(raw) - self.from_end):
            if (
                at >= len(_TOOLS_KEY)
                and raw.startswith(self.encoded, at)
                and raw.startswith(_TOOLS_KEY, at - len(_TOOLS_KEY))
            ):
                return at
        return -1


class RequestParser:
    """Parses one route's requests (a JSON object with a `messages` list, else None).
    `list_key` names the list another dialect resends instead (Responses: "input")."""

    def __init__(self, list_key: str = "messages") -> None:
        self._key = list_key
        self._key_bytes = b'"%s":[' % list_key.encode()
        self._raw = b""
        self._messages: list[Any] = []
        self._start = 0
        """Offset of the first message in `_raw`."""
        self._ends: list[int] = []
        """Offset just past each of `_messages` in `_raw`."""
        self._tools: _Tools | None = None
        self._enabled = True
        self._nonces = [f"rollout-proxy-{secrets.token_hex(16)}" for _ in range(2)]
        self._placeholders = [orjson.dumps(nonce) for nonce in self._nonces]

    def parse(self, raw: bytes) -> dict[str, Any] | None:
        body, kept, tools_at = self._parse_reusing(raw)
        if body is None:
            try:
                body = orjson.loads(raw)
            except orjson.JSONDecodeError:
                return None
            kept, tools_at = 0, -1
        if not isinstance(body, dict) or not isinstance(body.get(self._key), list):
            return None
        # A larger request's bytes would stay resident between calls (a 60 MiB body per
        # dialect a route was called in) to save a parse that costs milliseconds.
        if self._enabled and len(raw) <= KEPT_REQUEST_BYTES:
            self._remember(raw, body, kept, tools_at)
        else:
            self._forget()
        return body

    def _parse_reusing(self, raw: bytes) -> tuple[dict[str, Any] | None, int, int]:
        """(body, messages kept, offset of the kept tools or -1); body None: parse whole."""
        kept = bisect.bisect_right(self._ends, shared_prefix_bytes(raw, self._raw))
        tools_at = self._tools.find(raw) if self._tools is not None else -1
        cuts = []
        if kept:
            cuts.append((self._start, self._ends[kept - 1], 0))
        if tools_at >= 0 and self._tools is not None:
            cuts.append((tools_at, tools_at + len(self._tools.encoded), 1))
        cuts.sort()
        if not cuts or (len(cuts) == 2 and cuts[0][1] > cuts[1][0]):
            return None, 0, -1
        pieces, done = [], 0
        for begin, end, which in cuts:
            pieces += [raw[done:begin], self._placeholders[which]]
            done = end
        try:
            body = orjson.loads(b"".join([*pieces, raw[done:]]))
        except orjson.JSONDecodeError:
            return None, 0, -1
        if not isinstance(body, dict) or not self._restore(body, kept, tools_at >= 0):
            return None, 0, -1
        return body, kept, tools_at

    def _restore(self, body: dict[str, Any], kept: int, tools: bool) -> bool:
        """Put the kept objects back in place of the placeholders; False if one is missing."""
        messages = body.get(self._key)
        if not isinstance(messages, list):
            return False
        if kept:
            if not messages or messages[0] != self._nonces[0]:
                return False
            messages[0:1] = self._messages[:kept]
        if tools:
            if body.get("tools") != self._nonces[1] or self._tools is None:
                return False
            body["tools"] = self._tools.tools
        return True

    def _remember(self, raw: bytes, body: dict[str, Any], kept: int, tools_at: int) -> None:
        """Learn where each message of `raw` ends (the first `kept` are known), and where
        its tools are. With more than one "messages" key, this finds the first and
        `_ends_of` checks it is the one."""
        key = raw.find(self._key_bytes)
        ends = None
        if key >= 0:
            ends = self._ends_of(raw, body[self._key], kept, key + len(self._key_bytes))
            # Another serialiser (spaces, other escapes): this route always parses whole.
            self._enabled = ends is not None
        if ends is None:
            self._forget()
            return
        self._raw, self._messages, self._ends = raw, body[self._key], ends
        self._start = key + len(self._key_bytes)
        self._tools = self._tools_of(raw, body.get("tools"), tools_at)

    def _forget(self) -> None:
        self._raw, self._messages, self._ends, self._tools = b"", [], [], None

    def _ends_of(self, raw: bytes, messages: list[Any], kept: int, start: int) -> list[int] | None:
        """Where each message ends, if every new one is orjson's compact form of itself."""
        ends = self._ends[:kept]
        position = ends[-1] + 1 if ends else start  # past the "," after the last kept one
        for message in messages[kept:]:
            encoded = orjson.dumps(message)
            if not raw.startswith(encoded, position):
                return None
            position += len(encoded)
            ends.append(position)
            position += 1
        return ends

    def _tools_of(self, raw: bytes, tools: object, kept_at: int) -> _Tools | None:
        if kept_at >= 0 and self._tools is not None:
            return _Tools(self._tools.tools, self._tools.encoded, kept_at, len(raw))
        if not isinstance(tools, list):
            return None
        encoded = orjson.dumps(tools)
        if len(encoded) < _MIN_TOOLS_BYTES:
            return None
        found = raw.find(_TOOLS_KEY + encoded)
        return _Tools(tools, encoded, found + len(_TOOLS_KEY), len(raw)) if found >= 0 else None
