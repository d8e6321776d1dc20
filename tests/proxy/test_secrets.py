"""The upstream key reaches the upstream and nothing else: no turn, no log, no agent."""

from __future__ import annotations

import logging

import httpx
import pytest

from testing.fakes.llm_upstream import FakeUpstream, Reply
from tests.proxy.conftest import UPSTREAM_KEY, OpenRollout, chat, stream_events


async def test_the_key_leaks_nowhere(
    open_rollout: OpenRollout,
    agent: httpx.AsyncClient,
    upstream: FakeUpstream,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    upstream.script(
        Reply(text="ok"),
        Reply(status=401, error_message=f"Incorrect API key provided: {UPSTREAM_KEY}"),
        Reply(text="streamed"),
        Reply(text="a b", stream_error_after_chunks=1, error_message=f"bad key {UPSTREAM_KEY}"),
    )
    rollout = open_rollout()
    seen_by_agent = ""
    for _ in range(2):
        response = await agent.post(rollout.chat_url, json=chat("hi"), headers=rollout.headers)
        seen_by_agent += repr(response.headers) + response.text
    for _ in range(2):
        seen_by_agent += "".join(await stream_events(agent, rollout, chat("hi", stream=True)))
    assert any(
        r.headers.get("authorization") == f"Bearer {UPSTREAM_KEY}" for r in upstream.requests
    )
    assert UPSTREAM_KEY not in seen_by_agent
    assert "[redacted]" in seen_by_agent
    recorded = "".join(t.model_dump_json() for t in rollout.route.turns + rollout.published)
    assert len(rollout.route.turns) == 4
    assert UPSTREAM_KEY not in recorded
    assert "[redacted]" in recorded
    # Everything but the agent's own HTTP client (whose URLs carry its route token).
    ours = [r for r in caplog.records if not r.name.startswith(("httpx", "httpcore"))]
    logged = "".join(f"{r.getMessage()} {r.args}" for r in ours)
    assert any(r.name.startswith("service.proxy") for r in caplog.records)
    assert UPSTREAM_KEY not in logged
    assert rollout.route.token not in logged
    assert UPSTREAM_KEY not in repr(rollout.route) + repr(rollout.route.upstream) + repr(
        rollout.route.target
    )
