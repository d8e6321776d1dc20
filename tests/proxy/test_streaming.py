"""Streams are forwarded as they arrive, and an agent that leaves mid-stream hangs nothing."""

from __future__ import annotations

import asyncio

import httpx

from testing.fakes.llm_upstream import FakeUpstream, Reply
from tests.proxy.conftest import OpenRollout, chat


async def test_chunks_reach_the_agent_before_the_upstream_finishes(
    open_rollout: OpenRollout, agent: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    upstream.script(Reply(text="one two three", hold_after_first=True))
    rollout = open_rollout()
    request = agent.stream(
        "POST", rollout.chat_url, json=chat("hi", stream=True), headers=rollout.headers
    )
    async with request as response:
        lines = response.aiter_lines()
        first = await anext(lines)
        # The upstream is still holding its stream open: nothing has completed yet.
        assert first.startswith('data: {"id"')
        assert '"role":"assistant"' in first
        assert rollout.route.turn_count == 0
        upstream.release()
        rest = [line async for line in lines if line]
    assert rest[-1] == "data: [DONE]"
    [turn] = rollout.route.turns
    assert turn.completion_text == "one two three"


async def test_an_agent_leaving_mid_stream_still_records_the_turn(
    open_rollout: OpenRollout, agent: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    upstream.script(Reply(text="never finished", hold_after_first=True))
    rollout = open_rollout()
    request = agent.stream(
        "POST", rollout.chat_url, json=chat("hi", stream=True), headers=rollout.headers
    )
    async with request as response:
        await anext(response.aiter_lines())
    # Leaving the block closed the connection mid-stream.
    await asyncio.wait_for(rollout.completed.get(), 5)
    [turn] = rollout.published
    assert "disconnected" in turn.upstream_error
    assert turn.upstream_status == 200
    assert not rollout.route.all_failed  # the agent left; the upstream did not fail
    upstream.release()
    response = await agent.post(rollout.chat_url, json=chat("again"), headers=rollout.headers)
    assert response.status_code == 200


async def test_an_agent_leaving_a_unary_call_cancels_it(
    open_rollout: OpenRollout, agent: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    upstream.script(Reply(text="slow", delay_s=0.8))
    rollout = open_rollout()
    call = asyncio.create_task(
        agent.post(rollout.chat_url, json=chat("hi"), headers=rollout.headers)
    )
    await asyncio.sleep(0.2)
    call.cancel()
    await asyncio.wait_for(rollout.completed.get(), 5)
    assert "disconnected" in rollout.route.turns[0].upstream_error
