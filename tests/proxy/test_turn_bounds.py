"""Through the real proxy at its default bounds: a big body is relayed whole and recorded cut
in every dialect, and an upstream echoing the key in a 200 answer gets it recorded nowhere."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from service.proxy import MAIN_MODEL_ALIAS
from service.proxy.capture.record import REDACTED, RecordBounds
from testing.fakes.llm_upstream import FakeUpstream, Reply
from tests.proxy.conftest import UPSTREAM_KEY, OpenRollout, chat, stream_events

MIB = 1024 * 1024
CAP = RecordBounds().turn_bytes
BIG = "b" * (3 * MIB)


def request(path: str, content: str) -> dict[str, Any]:
    message = {"role": "user", "content": content}
    if path == "responses":
        return {"model": MAIN_MODEL_ALIAS, "input": [message]}
    if path == "messages":
        return {"model": MAIN_MODEL_ALIAS, "max_tokens": 64, "messages": [message]}
    return {"model": MAIN_MODEL_ALIAS, "messages": [message]}


@pytest.mark.parametrize("path", ["chat/completions", "responses", "messages"])
async def test_a_body_over_the_cap_is_relayed_whole_and_recorded_cut(
    open_rollout: OpenRollout, agent: httpx.AsyncClient, upstream: FakeUpstream, path: str
) -> None:
    rollout = open_rollout()
    url = f"{rollout.base_url}/{path}"
    response = await agent.post(url, json=request(path, BIG), headers=rollout.headers)
    assert response.status_code == 200, response.text
    sent = upstream.requests[-1].body
    assert sent is not None
    assert sent["messages"][-1]["content"] == BIG  # the upstream got all of it
    (turn,) = rollout.route.turns
    assert turn.body_cut
    kept = turn.request_messages[-1]["content"]
    assert BIG.startswith(kept)
    assert CAP - 200 < len(kept) < CAP
    assert turn.body_bytes_dropped == len(BIG) - len(kept)
    assert turn.completion_text == "Done."
    assert turn.completion_token_ids
    assert rollout.published[0].body_cut  # what the engine gets is the cut copy


async def test_a_small_call_is_not_marked_cut(
    open_rollout: OpenRollout, agent: httpx.AsyncClient
) -> None:
    rollout = open_rollout()
    response = await agent.post(rollout.chat_url, json=chat("hi"), headers=rollout.headers)
    assert response.status_code == 200
    (turn,) = rollout.route.turns
    assert not turn.body_cut
    assert turn.body_bytes_dropped == 0
    assert turn.request_messages == [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize("path", ["chat/completions", "responses", "messages"])
async def test_a_key_echoed_in_a_200_answer_is_recorded_nowhere(
    open_rollout: OpenRollout, agent: httpx.AsyncClient, upstream: FakeUpstream, path: str
) -> None:
    upstream.script(Reply(text=f"your key is {UPSTREAM_KEY} ok", reasoning=f"I saw {UPSTREAM_KEY}"))
    rollout = open_rollout()
    url = f"{rollout.base_url}/{path}"
    response = await agent.post(url, json=request(path, "echo"), headers=rollout.headers)
    assert response.status_code == 200, response.text
    assert UPSTREAM_KEY not in response.text  # nor does the agent get it
    (turn,) = rollout.route.turns
    recorded = turn.model_dump_json() + rollout.published[0].model_dump_json()
    assert UPSTREAM_KEY not in recorded
    assert f"your key is {REDACTED} ok" in turn.completion_text


async def test_a_key_split_across_stream_chunks_is_scrubbed_from_the_assembled_turn(
    open_rollout: OpenRollout, agent: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    upstream.script(Reply(text=f"key {UPSTREAM_KEY} end", token_chars=4))
    rollout = open_rollout()
    events = await stream_events(agent, rollout, chat("hi", stream=True, logprobs=True))
    pieces = [UPSTREAM_KEY[at : at + 4] for at in range(3, len(UPSTREAM_KEY), 4)]
    assert all(any(f'"{piece}"' in event for event in events) for piece in pieces[:-1])
    (turn,) = rollout.route.turns
    assert turn.completion_text == f"key {REDACTED} end"
    assert UPSTREAM_KEY not in turn.model_dump_json()
    assert len(turn.completion_tokens) > 5
