"""Upstream failures are recorded on the turn and returned as OpenAI-style errors."""

from __future__ import annotations

import json

import httpx
import pytest

from service.models import Turn
from testing.fakes.llm_upstream import FakeUpstream, Reply
from tests.proxy.conftest import OpenRollout, chat, stream_events


async def failed_call(
    open_rollout: OpenRollout,
    agent: httpx.AsyncClient,
    *,
    stream: bool = False,
    base_url: str | None = None,
) -> tuple[httpx.Response, Turn]:
    rollout = open_rollout(base_url=base_url)
    response = await agent.post(
        rollout.chat_url, json=chat("hi", stream=stream), headers=rollout.headers
    )
    [turn] = rollout.route.turns
    assert rollout.published == [turn]
    assert turn.failed
    assert rollout.route.all_failed
    return response, turn


def error_message(response: httpx.Response) -> str:
    assert response.headers["content-type"].startswith("application/json")
    message: str = response.json()["error"]["message"]
    return message


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
async def test_upstream_http_error(
    open_rollout: OpenRollout, agent: httpx.AsyncClient, upstream: FakeUpstream, stream: bool
) -> None:
    upstream.script(Reply(status=500, error_message="engine overloaded"))
    response, turn = await failed_call(open_rollout, agent, stream=stream)
    assert response.status_code == 500
    assert "engine overloaded" in error_message(response)
    assert turn.upstream_status == 500
    assert "engine overloaded" in turn.upstream_error


@pytest.mark.upstream_timeout_s(1.0)
async def test_upstream_timeout(
    open_rollout: OpenRollout, agent: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    upstream.script(Reply(text="late", delay_s=3.0))
    response, turn = await failed_call(open_rollout, agent)
    assert response.status_code == 504
    assert "timed out" in error_message(response)
    assert turn.upstream_status == 0
    assert "timed out" in turn.upstream_error


async def test_upstream_refuses_the_connection(
    open_rollout: OpenRollout, agent: httpx.AsyncClient
) -> None:
    response, turn = await failed_call(open_rollout, agent, base_url="http://127.0.0.1:1/v1")
    assert response.status_code == 502
    assert "cannot connect" in error_message(response)
    assert turn.upstream_status == 0


async def test_upstream_closes_before_answering(
    open_rollout: OpenRollout, agent: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    upstream.script(Reply(close_after_chunks=0))
    response, turn = await failed_call(open_rollout, agent)
    assert response.status_code == 502
    assert "closed" in turn.upstream_error


async def test_malformed_json(
    open_rollout: OpenRollout, agent: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    upstream.script(Reply(garbage=True))
    response, turn = await failed_call(open_rollout, agent)
    assert response.status_code == 502
    assert "malformed JSON" in error_message(response)
    assert turn.upstream_status == 200


async def stream_failure(
    open_rollout: OpenRollout, agent: httpx.AsyncClient
) -> tuple[list[str], Turn]:
    rollout = open_rollout()
    events = await stream_events(agent, rollout, chat("hi", stream=True))
    [turn] = rollout.route.turns
    assert turn.failed
    assert rollout.route.all_failed
    assert events[-1] == "[DONE]"
    assert "error" in json.loads(events[-2])
    return events, turn


async def test_malformed_sse_event_ends_the_stream_with_an_error_event(
    open_rollout: OpenRollout, agent: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    upstream.script(Reply(text="a b c", garbage=True))
    events, turn = await stream_failure(open_rollout, agent)
    assert (
        len(events) == 3
    )  # the first chunk, the error, [DONE]; the garbage never reaches the agent
    assert "malformed SSE" in turn.upstream_error


async def test_upstream_closing_mid_stream(
    open_rollout: OpenRollout, agent: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    upstream.script(Reply(text="a b c d", close_after_chunks=2))
    events, turn = await stream_failure(open_rollout, agent)
    assert len(events) == 4
    assert json.loads(events[1])["choices"][0]["delta"]["content"] == "a"
    assert "closed" in turn.upstream_error
    assert turn.completion_text == "a"


async def test_in_band_stream_error_is_forwarded_and_recorded(
    open_rollout: OpenRollout, agent: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    upstream.script(Reply(text="a b c", stream_error_after_chunks=2, error_message="kv cache full"))
    events, turn = await stream_failure(open_rollout, agent)
    assert json.loads(events[-2])["error"]["message"] == "kv cache full"
    assert turn.upstream_error == "kv cache full"


async def test_one_success_means_not_all_failed(
    open_rollout: OpenRollout, agent: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    upstream.script(Reply(status=503), Reply(text="fine"))
    rollout = open_rollout()
    for expected in (503, 200):
        response = await agent.post(rollout.chat_url, json=chat("hi"), headers=rollout.headers)
        assert response.status_code == expected
    assert [t.failed for t in rollout.route.turns] == [True, False]
    assert not rollout.route.all_failed


@pytest.mark.upstream_timeout_s(1.0)
async def test_upstream_stalling_mid_stream_times_out_in_band(
    open_rollout: OpenRollout, agent: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    upstream.script(Reply(text="a b c", hold_after_first=True))
    events, turn = await stream_failure(open_rollout, agent)
    upstream.release()
    assert len(events) == 3  # the first chunk, the timeout error, [DONE]
    assert json.loads(events[-2])["error"]["code"] == 504
    assert "timed out" in turn.upstream_error
