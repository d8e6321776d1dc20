"""What a turn records of a call: its bodies cut to a bound, and no secret in any of it.

The agent chooses what it sends and an upstream echoes what it likes, so what a turn keeps
of them is bounded, the same for every dialect (chat completions, Responses, Messages):

    bound                      default   what happens past it
    RecordBounds.turn_bytes      2 MiB   the turn's bodies are cut to it
    RecordBounds.rollout_bytes  16 MiB   later turns record no bodies (token data only)

A turn's bodies are, in the order they get the room: `completion_text`, `reasoning_text`,
`tool_calls` (what the model produced), then `request_messages`, `tools`, `raw_request`
(what the agent sent). A cut keeps the structure in order: strings are shortened (on a
UTF-8 boundary) and the values past the bound left out. The turn says so (`body_cut`,
`body_bytes_dropped`). Size is counted as a Rollout message would carry it: the UTF-8 bytes
of each string (keys included) plus `_VALUE_BYTES` per value, so 16 MiB of bodies stay
well under gRPC's 64 MiB message beside the spec and files. Never cut: token ids,
logprobs, usage, timings, status; the upstream's context window bounds those, and they
are what a trainer learns from. The call itself is relayed whole.

Every recorded string (bodies, tokens, finish reason, model, errors) is scrubbed of the
route's secrets (`Route.secrets`: the upstream key, the route token) whatever the status,
before any cut, so no prefix of a secret survives a cut either. It runs on the assembled
turn, so a key split across SSE chunks is caught as well.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["BODY_FIELDS", "REDACTED", "RecordBounds", "Recorder", "scrub_bytes", "scrub_text"]

REDACTED = "[redacted]"
_REDACTED_BYTES = REDACTED.encode()
_FIRST_BYTE_PROBES = 8
"""Places of a secret's first byte tried one by one before searching for it whole."""
_MIB = 1024 * 1024
_VALUE_BYTES = 12
"""Counted per value on top of its text: a protobuf Struct value's tags and lengths."""
_MAX_DEPTH = 200
"""Values nested deeper are left out (cut): the walk must stay inside Python's recursion
limit, and protobuf's parsers refuse a Struct nested ~100 deep anyway."""

BODY_FIELDS = (
    "completion_text",
    "reasoning_text",
    "tool_calls",
    "request_messages",
    "tools",
    "raw_request",
)
"""The Turn fields a cut applies to, in the order they get the room."""


@dataclass(frozen=True)
class RecordBounds:
    """How much of the bodies a turn, and a rollout's turns together, record."""

    turn_bytes: int = 2 * _MIB
    """Bodies one turn records; the rest is cut."""
    rollout_bytes: int = 16 * _MIB
    """Bodies one rollout's turns record together; later turns record none."""


def scrub_text(text: str, secrets: Iterable[str]) -> str:
    """`text` with every secret replaced by `REDACTED`."""
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


def scrub_bytes(
    data: bytes, secrets: Iterable[bytes], quiet: tuple[int, int] | None = None
) -> bytes:
    """`data` with every secret replaced by `REDACTED`. `quiet`: a span of `data` (vLLM's
    prompt ids, digits and commas) where no secret is expected to begin: only its first
    byte is looked for there, with a one-byte find, before the rest is searched."""
    for secret in secrets:
        if secret and _contains(data, secret, quiet or (0, 0)):
            data = data.replace(secret, _REDACTED_BYTES)
    return data


def _contains(data: bytes, secret: bytes, quiet: tuple[int, int]) -> bool:
    """`secret in data`: no occurrence begins in the `quiet` span without its first byte."""
    start, end = quiet
    if data.find(secret[:1], start, end) >= 0:
        start = end = 0  # the span holds the first byte: search it like the rest
    return _begins_in(data, secret, 0, start) or _begins_in(data, secret, end, len(data))


def _begins_in(data: bytes, secret: bytes, start: int, stop: int) -> bool:
    """Whether an occurrence of `secret` begins in `data[start:stop]`, found from the places
    of its first byte while they are few.

    `bytes.find` of a longer needle reads ~1-4 ns a byte where its skip table collides
    with the text (a key's letters against vLLM's 60 KB of prompt ids: ~40 us an event
    here), a single byte is a memchr (~1 us); a stream's ids event has no letter at all."""
    first = secret[:1]
    at = data.find(first, start, stop)
    for _ in range(_FIRST_BYTE_PROBES):
        if at < 0:
            return False
        if data.startswith(secret, at):
            return True
        at = data.find(first, at + 1, stop)
    return at >= 0 and data.find(secret, at, stop + len(secret) - 1) >= 0


class Recorder:
    """One route's recording: its secrets and what is left of its rollout's budget."""

    def __init__(self, bounds: RecordBounds, secrets: tuple[str, ...]) -> None:
        self.bounds = bounds
        self.secrets = secrets
        self.left_bytes = bounds.rollout_bytes
        """Budget left for the bodies of this rollout's turns to come."""

    def record(self, turn: dict[str, Any]) -> dict[str, Any]:
        """`turn` (Turn fields, not yet validated) scrubbed, with its bodies cut to what is
        left of the per-turn cap and the rollout's budget; never mutates the values it was
        given (they are shared with the route's request history)."""
        turn = self._scrub_tokens(turn)
        room = min(self.bounds.turn_bytes, self.left_bytes)
        cut = _Cut(room, self.secrets)
        for name in BODY_FIELDS:
            if name in turn:
                turn[name] = cut.value(turn[name])
        self.left_bytes -= room - max(cut.left, 0)
        turn["body_cut"] = cut.dropped > 0
        turn["body_bytes_dropped"] = cut.dropped
        return turn

    def _scrub_tokens(self, turn: dict[str, Any]) -> dict[str, Any]:
        """Scrub the non-body strings; token lists are joined first and only walked when
        a secret is in them (thousands of tokens, almost never a secret)."""
        turn = dict(turn)
        for name in ("finish_reason", "requested_model", "upstream_error"):
            if isinstance(turn.get(name), str):
                turn[name] = scrub_text(turn[name], self.secrets)
        tokens = turn.get("completion_tokens")
        if tokens and self._has_secret("".join(tokens)):
            turn["completion_tokens"] = [scrub_text(token, self.secrets) for token in tokens]
        top = turn.get("top_logprobs")
        if top and self._has_secret("".join(alt["token"] for alts in top for alt in alts)):
            turn["top_logprobs"] = [
                [{**alt, "token": scrub_text(alt["token"], self.secrets)} for alt in alts]
                for alts in top
            ]
        return turn

    def _has_secret(self, text: str) -> bool:
        return any(secret in text for secret in self.secrets)


class _Cut:
    """One turn's cut: copies values that must change, keeps the others as they are."""

    def __init__(self, room: int, secrets: tuple[str, ...]) -> None:
        self.left = room
        self.dropped = 0
        self._secrets = secrets

    def value(self, value: Any) -> Any:
        """`value` scrubbed and cut to the room left (the same object when it fits and
        holds no secret)."""
        size, secret = _measure(value, self._secrets, 0)
        if size <= self.left and not secret:
            self.left -= size
            return value
        return self._rebuild(value, 0)

    def _rebuild(self, value: Any, depth: int) -> Any:
        if isinstance(value, str):
            return self._text(value)
        self.left -= _VALUE_BYTES
        if isinstance(value, dict):
            kept: dict[str, Any] = {}
            for key, item in value.items():
                if self._keeps(item, depth):
                    name = self._text(str(key))  # before its value takes the room
                    kept[name] = self._rebuild(item, depth + 1)
            return kept
        if isinstance(value, list):
            return [self._rebuild(item, depth + 1) for item in value if self._keeps(item, depth)]
        return value

    def _keeps(self, item: Any, depth: int) -> bool:
        """Whether a member of a container at `depth` has room; counts it dropped if not."""
        if self.left > 0 and depth < _MAX_DEPTH:
            return True
        self.dropped += _measure(item, (), depth + 1)[0]
        return False

    def _text(self, text: str) -> str:
        text = scrub_text(text, self._secrets)
        if text.isascii():  # its length is its size: no copy of a 60 MiB body to cut it
            if len(text) <= self.left:
                self.left -= len(text)
                return text
            kept = text[: max(self.left, 0)]
            self.dropped += len(text) - len(kept)
            self.left = 0
            return kept
        encoded = text.encode("utf-8", "surrogatepass")
        if len(encoded) <= self.left:
            self.left -= len(encoded)
            return text
        kept = encoded[: max(self.left, 0)].decode("utf-8", "ignore")
        self.dropped += len(encoded) - len(kept.encode("utf-8", "surrogatepass"))
        self.left = 0
        return kept


def _measure(value: Any, secrets: tuple[str, ...], depth: int) -> tuple[int, bool]:
    """(bytes `value` counts for, whether a string in it holds a secret); a value nested
    past `_MAX_DEPTH` counts as its own, unwalked, and as holding a secret (so it is cut)."""
    if isinstance(value, str):
        size = len(value) if value.isascii() else len(value.encode("utf-8", "surrogatepass"))
        return size, any(secret in value for secret in secrets)
    if depth > _MAX_DEPTH:
        return _VALUE_BYTES, True
    size, found = _VALUE_BYTES, False
    items: Iterable[Any] = ()
    if isinstance(value, dict):
        items = value.values()
        for key in value:
            key_size, key_secret = _measure(str(key), secrets, depth)
            size, found = size + key_size, found or key_secret
    elif isinstance(value, list):
        items = value
    for item in items:
        item_size, item_secret = _measure(item, secrets, depth + 1)
        size, found = size + item_size, found or item_secret
    return size, found
