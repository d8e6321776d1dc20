"""Parsing requests by reusing the previous request's messages gives the plain parse."""

from __future__ import annotations

import json
import random
import sys
from typing import Any

import orjson
import pytest

from service.proxy.capture.prompt_ids import shared_prefix_bytes
from service.proxy.capture.request_parse import RequestParser

TRICKY = ['"messages":[', "],[{", '\\"', "é ✓", "\n\t", "messages", "}", ""]


def message(generator: random.Random) -> dict[str, Any]:
    text = "".join(generator.choice(TRICKY) for _ in range(generator.randint(0, 6)))
    body: dict[str, Any] = {"role": generator.choice(["user", "assistant", "tool"])}
    body["content"] = text * generator.randint(1, 300)
    if generator.random() < 0.3:
        body["tool_calls"] = [{"id": "c", "function": {"name": "read", "arguments": "{}"}}]
    return body


def next_history(generator: random.Random, messages: list[Any]) -> list[Any]:
    """Mostly appends, as agents do; sometimes rewrites from some point on."""
    keep = len(messages) if generator.random() < 0.7 else generator.randint(0, len(messages))
    return messages[:keep] + [message(generator) for _ in range(generator.randint(0, 3))]


def tools(generator: random.Random) -> list[Any]:
    names = generator.choice([["read"], ["read", "write"], ["x" * 100]])
    return [{"type": "function", "function": {"name": n, "parameters": {}}} for n in names]


def request(generator: random.Random, messages: list[Any]) -> dict[str, Any]:
    """Tools, when there are any, before or after the messages (serialisers differ)."""
    body: dict[str, Any] = {"model": generator.choice(["a", "b"])}
    listed = tools(generator) if generator.random() < 0.8 else None
    if listed is not None and generator.random() < 0.3:
        body["tools"] = listed
    body["messages"] = messages
    if listed is not None and "tools" not in body:
        body["tools"] = listed
    body["stream"] = generator.random() < 0.5
    return body


def test_a_conversation_parses_as_a_plain_parse_would() -> None:
    generator = random.Random(3)
    parser = RequestParser()
    messages: list[Any] = []
    previous: list[Any] = []
    reused = 0
    for _ in range(300):
        messages = next_history(generator, messages)
        raw = orjson.dumps(request(generator, messages))
        body = parser.parse(raw)
        assert body == orjson.loads(raw)
        assert body is not None
        reused += bool(previous and body["messages"] and body["messages"][0] is previous[0])
        previous = body["messages"]
    assert reused > 50  # the shared messages were not parsed again


def test_unchanged_tools_are_reused_and_changed_ones_parsed() -> None:
    parser = RequestParser()
    listed = [{"type": "function", "function": {"name": "read", "description": "d" * 200}}]
    first = parser.parse(orjson.dumps({"messages": [], "tools": listed, "stream": True}))
    assert first is not None
    again = parser.parse(orjson.dumps({"messages": [{"c": 1}], "tools": listed, "stream": True}))
    assert again == {"messages": [{"c": 1}], "tools": listed, "stream": True}
    assert again is not None
    assert again["tools"] is first["tools"]
    changed = [{**listed[0], "type": "other"}]
    assert parser.parse(orjson.dumps({"messages": [{"c": 1}], "tools": changed})) == {
        "messages": [{"c": 1}],
        "tools": changed,
    }
    nested = {"messages": [{"c": 1}, {"tools": listed}], "tools": []}
    assert parser.parse(orjson.dumps(nested)) == nested


def test_appended_messages_reuse_the_parsed_ones() -> None:
    parser = RequestParser()
    first = parser.parse(orjson.dumps({"model": "m", "messages": [{"content": "a" * 5000}]}))
    assert first is not None
    grown = {"model": "m", "messages": [{"content": "a" * 5000}, {"content": "b"}], "x": 1}
    second = parser.parse(orjson.dumps(grown))
    assert second == grown
    assert second is not None
    assert second["messages"][0] is first["messages"][0]


def test_a_request_over_the_kept_size_is_parsed_and_not_kept() -> None:
    """Kept, a 60 MiB body stayed resident between calls, per dialect a route was called in."""
    parser = RequestParser()
    parser.parse(orjson.dumps({"messages": [{"content": "small"}]}))
    content = "a" * (9 * 1024 * 1024)
    big = orjson.dumps({"messages": [{"content": content}]})
    references = sys.getrefcount(big)
    first = parser.parse(big)
    assert first == {"messages": [{"content": content}]}
    assert sys.getrefcount(big) == references
    grown = {"messages": [{"content": content}, {"content": "b"}]}
    second = parser.parse(orjson.dumps(grown))
    assert second == grown
    assert second is not None
    assert second["messages"][0] is not first["messages"][0]  # parsed again, as it should


@pytest.mark.parametrize(
    "dumps",
    [
        lambda body: json.dumps(body).encode(),  # ", " and ": " separators, \u escapes
        lambda body: json.dumps(body, ensure_ascii=False, indent=1).encode(),
    ],
)
def test_another_serialiser_still_parses_correctly(dumps: Any) -> None:
    generator = random.Random(5)
    parser = RequestParser()
    messages: list[Any] = []
    for _ in range(30):
        messages = next_history(generator, messages)
        raw = dumps(request(generator, messages))
        assert parser.parse(raw) == orjson.loads(raw)


def test_a_duplicate_messages_key_parses_as_the_plain_parse() -> None:
    parser = RequestParser()
    one = b'{"messages":[{"content":"' + b"x" * 3000 + b'"}]'
    assert parser.parse(one + b"}") == orjson.loads(one + b"}")
    duplicate = one + b',"messages":[{"content":"y"}]}'
    assert parser.parse(duplicate) == {"messages": [{"content": "y"}]}
    nested = one + b',"n":{"messages":[{"content":"z"}]}}'
    assert parser.parse(nested) == orjson.loads(nested)


@pytest.mark.parametrize(
    "raw",
    [b"", b"[1]", b'{"messages":{}}', b'{"model":"m"}', b'{"messages":[{"a":1},]}'],
)
def test_bad_requests_are_none(raw: bytes) -> None:
    parser = RequestParser()
    assert parser.parse(b'{"messages":[{"a":1},{"b":2}]}') is not None
    assert parser.parse(raw) is None


def test_a_truncated_request_after_a_good_one_is_none() -> None:
    parser = RequestParser()
    good = orjson.dumps({"messages": [{"content": "a" * 100}, {"content": "b"}], "z": 1})
    assert parser.parse(good) is not None
    assert parser.parse(good[: good.index(b'"b"')]) is None
    assert parser.parse(good[:-1]) is None


def test_shared_prefix_bytes_matches_a_plain_scan() -> None:
    generator = random.Random(9)
    for _ in range(500):
        size = generator.choice([0, 1, 4095, 4096, 4097, 9000])
        a = bytes(generator.randrange(3) for _ in range(size))
        b = a[: generator.randint(0, size)] + bytes(generator.randrange(3) for _ in range(50))
        plain = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
        assert shared_prefix_bytes(a, b) == (min(len(a), len(b)) if plain is None else plain)
