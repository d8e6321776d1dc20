"""What a turn records: bodies cut to the per-turn cap and the rollout's budget (at the real
defaults), and no secret anywhere in it."""

from __future__ import annotations

import tracemalloc
from typing import Any

import orjson

from service.models import Turn
from service.proxy.capture.record import REDACTED, RecordBounds, Recorder, scrub_bytes

MIB = 1024 * 1024
KEY = "sk-record-secret-51aa"
DEFAULTS = RecordBounds()


def call(content: str, completion: str = "ok", **extra: Any) -> dict[str, Any]:
    return {
        "index": 0,
        "request_messages": [{"role": "user", "content": content}],
        "completion_text": completion,
        "completion_token_ids": [1, 2, 3],
        "logprobs": [-0.1, -0.2, -0.3],
        "prompt_token_ids": [7, 8],
        **extra,
    }


def test_the_defaults_keep_a_rollout_well_under_grpcs_message_limit() -> None:
    assert DEFAULTS.turn_bytes == 2 * MIB
    assert DEFAULTS.rollout_bytes == 16 * MIB  # of 64 MiB, beside a 32 MiB spec and files


def test_a_turn_within_the_cap_is_recorded_whole_and_not_copied() -> None:
    recorder = Recorder(DEFAULTS, (KEY,))
    fields = call("hello")
    recorded = recorder.record(fields)
    assert recorded["request_messages"] is fields["request_messages"]
    assert recorded["body_cut"] is False
    assert recorded["body_bytes_dropped"] == 0
    assert recorder.left_bytes < DEFAULTS.rollout_bytes


def test_a_body_over_the_default_cap_is_cut_to_it_and_marked() -> None:
    recorder = Recorder(DEFAULTS, ())
    big = "x" * (60 * MIB)
    fields = call(big, completion="done")
    recorded = recorder.record(fields)
    turn = Turn.model_validate(recorded)
    content = turn.request_messages[0]["content"]
    assert 2 * MIB - 200 < len(content) < 2 * MIB
    assert big.startswith(content)
    assert turn.request_messages[0]["role"] == "user"  # the structure stays, in order
    assert turn.completion_text == "done"  # the model's output gets the room first
    assert turn.body_cut
    assert turn.body_bytes_dropped == len(big) - len(content)
    assert (turn.completion_token_ids, turn.prompt_token_ids) == ([1, 2, 3], [7, 8])
    assert fields["request_messages"][0]["content"] is big  # the route's history untouched
    wire = len(orjson.dumps(recorded["request_messages"]))
    assert wire <= DEFAULTS.turn_bytes


def test_past_the_rollout_budget_turns_keep_token_data_and_no_bodies() -> None:
    recorder = Recorder(DEFAULTS, ())
    body = "y" * (3 * MIB)
    turns = [Turn.model_validate(recorder.record(call(body, "z" * 100))) for _ in range(9)]
    kept = [len(t.request_messages[0]["content"]) if t.request_messages else 0 for t in turns]
    assert all(t.body_cut for t in turns)
    assert sum(kept) + sum(len(t.completion_text) for t in turns) <= DEFAULTS.rollout_bytes
    assert kept[:8] == [kept[0]] * 8
    assert kept[0] > 2 * MIB - 200
    last = turns[-1]
    assert last.request_messages == []
    assert last.completion_text == ""
    assert last.body_bytes_dropped >= 3 * MIB + 100
    assert last.logprobs == [-0.1, -0.2, -0.3]
    assert last.completion_token_ids == [1, 2, 3]


def test_a_cut_never_splits_a_utf8_character() -> None:
    recorder = Recorder(RecordBounds(turn_bytes=101), ())
    recorded = recorder.record({"completion_text": "é" * 100})
    assert recorded["completion_text"] == "é" * 50
    assert recorded["body_bytes_dropped"] == 100


def test_values_past_the_room_are_left_out_and_counted() -> None:
    recorder = Recorder(RecordBounds(turn_bytes=200), ())
    messages = [{"role": "user", "content": "m" * 50} for _ in range(100)]
    recorded = recorder.record({"request_messages": messages, "completion_text": ""})
    assert 0 < len(recorded["request_messages"]) < 5
    assert recorded["body_cut"]
    assert len(orjson.dumps(recorded["request_messages"])) <= 200


def test_deep_nesting_is_cut_not_raised() -> None:
    deep: Any = "bottom"
    for _ in range(1000):
        deep = [deep]
    recorded = Recorder(DEFAULTS, ()).record({"request_messages": [{"content": deep}]})
    assert recorded["body_cut"]
    orjson.dumps(recorded["request_messages"])  # shallow enough to serialise


def test_the_key_is_scrubbed_from_every_recorded_string() -> None:
    recorder = Recorder(DEFAULTS, (KEY,))
    fields = call(
        f"user pasted {KEY}",
        completion=f"the key is {KEY}",
        reasoning_text=f"think {KEY}",
        tool_calls=[{"id": KEY, "name": "n", "arguments": f'{{"{KEY}": 1}}'}],
        tools=[{"type": "function", "function": {"name": "f", KEY: "v"}}],
        raw_request=f"raw {KEY}",
        finish_reason=KEY,
        requested_model=KEY,
        upstream_error=f"echo {KEY}",
        completion_tokens=["a", KEY],
        top_logprobs=[[{"token": KEY, "token_id": 1, "logprob": -1.0}]],
    )
    turn = Turn.model_validate(recorder.record(fields))
    dumped = turn.model_dump_json()
    assert KEY not in dumped
    assert dumped.count(REDACTED) >= 11
    assert not turn.body_cut  # scrubbing is not a cut
    assert KEY in fields["completion_text"]  # the input is never mutated


def test_cutting_a_big_ascii_body_copies_only_what_is_kept() -> None:
    """Measuring it by its UTF-8 encoding held a whole second copy of a 60 MiB body."""
    content = "x" * (32 * MIB)
    recorder = Recorder(DEFAULTS, (KEY,))
    tracemalloc.start()
    try:
        recorded = recorder.record(call(content))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    kept = recorded["request_messages"][0]["content"]
    assert len(kept) + recorded["body_bytes_dropped"] == len(content)
    assert DEFAULTS.turn_bytes - 1024 < len(kept) < DEFAULTS.turn_bytes
    assert peak < 2 * DEFAULTS.turn_bytes, f"{peak / MIB:.1f} MiB allocated to cut"


def test_scrub_bytes_finds_a_key_wherever_its_first_byte_is_common() -> None:
    """Past the few places of the key's first byte it tries one by one, it searches whole:
    a key after many near misses, or after none of its first byte, is replaced all the same."""
    key = KEY.encode()
    redacted = REDACTED.encode()
    ids = b'{"prompt_token_ids":[' + b",".join(b"%d" % i for i in range(12000)) + b"]}"
    near_misses = b"sk-recordsk-" * 40
    for data in (ids, ids + key, key + ids, near_misses + key + b"s", b"s" * 9 + key):
        expected = data.replace(key, redacted)
        assert scrub_bytes(data, [key, b"other-secret"]) == expected
    assert scrub_bytes(b"no secret here", [key]) == b"no secret here"
    assert scrub_bytes(b"sk", [b""]) == b"sk"  # an empty secret is no secret


def test_scrub_bytes_with_a_quiet_span_is_exact() -> None:
    """Around vLLM's prompt ids (the `quiet` span) a key is found wherever it begins: before
    the span and running into it, inside it (its first byte is there), after it."""
    head, ids, tail = b'{"a":"x","prompt_token_ids":[', b"1,2,3,4,5,6,7,8,9,10", b'],"b":1}'
    for key in (b"1-secret-key", b"sk-secret-key"):  # the first begins as an id does
        for data in (
            head + ids + tail,
            head + key + ids + tail,
            head + ids[:4] + key + ids[4:] + tail,
            head + ids + key + tail,
            key + head + ids + tail,
        ):
            quiet = (len(head), len(data) - len(tail))
            if data.startswith(key):
                quiet = (quiet[0] + len(key), quiet[1])
            expected = data.replace(key, REDACTED.encode())
            assert scrub_bytes(data, [key], quiet) == expected
            assert scrub_bytes(data, [key], (quiet[0] - 2, quiet[0] + 2)) == expected
