"""What a real inference server does to a turn (issue 13): calls that matter, incomplete
streams, missing logprobs and usage, the service's log, and bodies the turn model cannot read.
Each case is what llama.cpp's server did to real rollouts, replayed by the fake upstream."""

from __future__ import annotations

import json
import logging

import httpx
import pytest

from service.models import CaptureSpec, Turn
from service.proxy import AUX_MODEL_ALIAS
from testing.fakes.llm_upstream import FakeUpstream, Reply, TokenShape, ToolCallReply, has_tools
from tests.proxy.conftest import UPSTREAM_KEY, OpenRollout, Rollout, chat, stream_events

LOGPROBS = CaptureSpec(top_logprobs=1)


def only_turn(rollout: Rollout) -> Turn:
    [turn] = rollout.route.turns
    return turn


async def test_every_trainable_call_failed_though_the_title_call_succeeded(
    open_rollout: OpenRollout, agent: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    upstream.script(Reply(status=400, error_message="context exceeded"), match=has_tools)
    rollout = open_rollout()
    title = chat("name this", model=AUX_MODEL_ALIAS)
    assert (await agent.post(rollout.chat_url, json=title, headers=rollout.headers)).is_success
    main = chat("fix it", tools=[{"type": "function", "function": {"name": "bash"}}])
    response = await agent.post(rollout.chat_url, json=main, headers=rollout.headers)
    assert response.status_code == 400
    assert [t.trainable for t in rollout.route.turns] == [False, True]
    assert rollout.route.all_failed
    assert (rollout.route.calls.trainable, rollout.route.calls.trainable_failed) == (1, 1)


async def test_some_trainable_calls_failed_is_counted_not_all_failed(
    open_rollout: OpenRollout, agent: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    upstream.script(Reply(status=500), Reply(text="ok"))
    rollout = open_rollout()
    for _ in range(2):
        await agent.post(rollout.chat_url, json=chat("hi"), headers=rollout.headers)
    assert not rollout.route.all_failed
    assert (rollout.route.calls.trainable, rollout.route.calls.trainable_failed) == (2, 1)


async def test_done_without_a_finish_reason_is_an_incomplete_turn(
    open_rollout: OpenRollout, agent: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    upstream.script(Reply(text="half an ans", omit_finish_reason=True))
    rollout = open_rollout()
    events = await stream_events(agent, rollout, chat("hi", stream=True))
    turn = only_turn(rollout)
    assert turn.incomplete
    assert turn.failed
    assert "without a finish reason" in turn.upstream_error
    assert turn.finish_reason == ""
    assert events[-1] == "[DONE]"
    assert "without a finish reason" in json.loads(events[-2])["error"]["message"]
    assert rollout.route.all_failed


async def test_unary_without_a_finish_reason_is_incomplete(
    open_rollout: OpenRollout, agent: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    upstream.script(Reply(text="half", omit_finish_reason=True))
    rollout = open_rollout()
    await agent.post(rollout.chat_url, json=chat("hi"), headers=rollout.headers)
    turn = only_turn(rollout)
    assert turn.incomplete
    assert "without a finish reason" in turn.upstream_error


async def test_ping_then_close_is_an_incomplete_turn(
    open_rollout: OpenRollout, agent: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    upstream.script(Reply(ping_then_close=True))
    rollout = open_rollout()
    events = await stream_events(agent, rollout, chat("hi", stream=True))
    turn = only_turn(rollout)
    assert turn.incomplete
    assert turn.upstream_status == 200
    assert "before it finished" in turn.upstream_error
    assert "error" in json.loads(events[-2])


async def test_a_body_cut_short_is_incomplete(
    open_rollout: OpenRollout, agent: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    upstream.script(Reply(text="a b c d e", close_after_chunks=3))
    rollout = open_rollout()
    await stream_events(agent, rollout, chat("hi", stream=True))
    turn = only_turn(rollout)
    assert turn.incomplete
    assert turn.failed


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
async def test_null_logprobs_on_tool_calls_mark_logprobs_missing(
    open_rollout: OpenRollout, agent: httpx.AsyncClient, upstream: FakeUpstream, stream: bool
) -> None:
    call = ToolCallReply("bash", '{"command": "ls"}')
    upstream.script(Reply(text="Let me look.", tool_calls=[call], tool_call_logprobs=False))
    upstream.script(Reply(text="Let me look.", tool_calls=[call]))
    rollout = open_rollout(capture=LOGPROBS)
    for _ in range(2):
        body = chat("hi", stream=stream, logprobs=True)
        if stream:
            await stream_events(agent, rollout, body)
        else:
            await agent.post(rollout.chat_url, json=body, headers=rollout.headers)
    missing, complete = rollout.route.turns
    assert missing.tool_calls
    assert not missing.failed
    assert not missing.logprobs_present
    assert complete.logprobs_present
    assert len(complete.logprobs) == len(upstream.sent[1].logprobs)


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
async def test_usage_is_counted_by_the_service_when_the_server_sends_none(
    open_rollout: OpenRollout, agent: httpx.AsyncClient, upstream: FakeUpstream, stream: bool
) -> None:
    upstream.script(Reply(text="one two three", usage=False), Reply(text="one two three"))
    rollout = open_rollout()
    for _ in range(2):
        body = chat("hi", stream=stream, return_token_ids=True)
        body["stream_options"] = {"include_usage": True}
        if stream:
            await stream_events(agent, rollout, body)
        else:
            await agent.post(rollout.chat_url, json=body, headers=rollout.headers)
    counted, reported = rollout.route.turns
    sent = upstream.sent[0]
    assert counted.usage_counted
    assert not reported.usage_counted
    assert counted.usage.completion_tokens == len(sent.completion_token_ids) == 3
    assert counted.usage.prompt_tokens == len(sent.prompt_token_ids)
    assert counted.usage == reported.usage


async def test_no_usage_and_no_tokens_counts_nothing(
    open_rollout: OpenRollout, agent: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    call = ToolCallReply("bash", '{"command": "ls"}')
    reply = Reply(tool_calls=[call], usage=False, tool_call_logprobs=False, shape=TokenShape.NONE)
    upstream.script(reply)
    rollout = open_rollout()
    await agent.post(rollout.chat_url, json=chat("hi"), headers=rollout.headers)
    turn = only_turn(rollout)
    assert turn.tool_calls
    assert not turn.logprobs
    assert not turn.completion_token_ids
    assert not turn.usage_counted
    assert turn.usage.completion_tokens == 0


async def test_each_failed_upstream_call_is_a_warning_without_secrets(
    open_rollout: OpenRollout,
    agent: httpx.AsyncClient,
    upstream: FakeUpstream,
    caplog: pytest.LogCaptureFixture,
) -> None:
    message = f"bad key {UPSTREAM_KEY}\nsecond line"
    upstream.script(Reply(status=401, error_message=message), Reply(text="fine"))
    rollout = open_rollout("rollout-logged")
    with caplog.at_level(logging.WARNING, logger="service.proxy"):
        for _ in range(2):
            await agent.post(rollout.chat_url, json=chat("hi"), headers=rollout.headers)
    [record] = [r for r in caplog.records if r.name == "service.proxy.capture.route"]
    line = record.getMessage()
    assert record.levelno == logging.WARNING
    assert "rollout-logged" in line
    assert "status=401" in line
    assert "bad key" in line
    assert "second line" not in line
    assert UPSTREAM_KEY not in line
    assert rollout.route.token not in line


@pytest.mark.parametrize(
    "body",
    [
        {"messages": [1, None, "x"]},
        {"messages": [{"role": "user", "content": "hi"}], "tools": ["not a tool"]},
    ],
    ids=["messages", "tools"],
)
async def test_a_relayed_body_the_turn_model_cannot_read_is_a_raw_turn(
    open_rollout: OpenRollout,
    agent: httpx.AsyncClient,
    upstream: FakeUpstream,
    body: dict[str, object],
) -> None:
    rollout = open_rollout()
    response = await agent.post(rollout.chat_url, json=body, headers=rollout.headers)
    assert response.status_code == 200
    assert len(upstream.requests) == 1
    turn = only_turn(rollout)
    assert rollout.published == [turn]
    assert turn.unparsed
    assert turn.request_messages == []
    assert json.loads(turn.raw_request) == body
    assert turn.completion_text == "Done."
