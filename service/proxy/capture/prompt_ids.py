"""Prompt token ids at the cost of what is new in them.

vLLM returns the whole prompt's ids (`prompt_token_ids`) with every response: tens of
thousands of ints late in a rollout, nearly all of them the same as in the previous
call. Parsing them into Python ints every time cost more than everything else the proxy
does (about 1 ms per 12k ids here). So the proxy cuts the array out of the response
bytes before parsing the rest (`cut_prompt_ids`), and a per-lane `PromptIdCache`
compares it with the previous prompt's bytes: the shared prefix reuses the previous
list's int objects and only the new tail is parsed.
"""

from __future__ import annotations

import orjson

__all__ = ["PromptIdCache", "cut_prompt_ids", "cut_span", "prompt_ids_span", "shared_prefix_bytes"]

_KEY = b'"prompt_token_ids"'


def prompt_ids_span(data: bytes) -> tuple[int, int] | None:
    """(start, end) of the `prompt_token_ids` array's inner bytes in `data`; None when it
    has no such array."""
    key = data.find(_KEY)
    if key < 0:
        return None
    start = data.find(b"[", key)
    end = data.find(b"]", start)
    if start < 0 or end < 0 or data[key + len(_KEY) : start].strip() != b":":
        return None
    return start + 1, end


def cut_prompt_ids(data: bytes) -> tuple[bytes, bytes | None]:
    """(`data` with the `prompt_token_ids` array replaced by null, the array's inner bytes);
    `data` unchanged and None when it has no such array."""
    return cut_span(data, prompt_ids_span(data))


def cut_span(data: bytes, span: tuple[int, int] | None) -> tuple[bytes, bytes | None]:
    """`cut_prompt_ids` for a `span` its caller has already found."""
    if span is None:
        return data, None
    start, end = span
    return data[: start - 1] + b"null" + data[end + 1 :], data[start:end]


def shared_prefix_bytes(a: bytes, b: bytes) -> int:
    """Length of the common prefix of `a` and `b`, by binary search; each step compares
    only the bytes not yet known equal, through a view (no copies)."""
    view = memoryview(b)
    low, high = 0, min(len(a), len(b))
    while low < high:
        middle = (low + high + 1) // 2
        if a.startswith(view[low:middle], low):
            low = middle
        else:
            high = middle - 1
    return low


class PromptIdCache:
    """The latest prompt of one lane, as bytes and as ints."""

    def __init__(self) -> None:
        self._raw = b""
        self._ids: list[int] = []

    def raw_of(self, ids: list[int]) -> bytes | None:
        """The bytes `ids` were decoded from, if `ids` is the latest list `decode` returned."""
        return self._raw if ids is self._ids and ids else None

    def decode(self, raw: bytes) -> list[int] | None:
        """The ids in `raw` (an array's inner bytes, e.g. b"1,2,3"); None if they are not ints."""
        if raw == self._raw:
            return self._ids
        shared_bytes = shared_prefix_bytes(raw, self._raw)
        # Ids fully inside the shared bytes and ended by a comma in both are the same ids.
        comma = raw.rfind(b",", 0, shared_bytes)
        shared = raw.count(b",", 0, comma + 1) if comma >= 0 else 0
        try:
            tail: list[int] = orjson.loads(b"[" + raw[comma + 1 :] + b"]")
        except orjson.JSONDecodeError:
            return None
        if not all(type(value) is int for value in tail):
            return None
        ids = self._ids[:shared] + tail
        self._raw, self._ids = raw, ids
        return ids
