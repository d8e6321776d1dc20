"""Routing by per-rollout token: isolation, concurrency, the models list."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from service.proxy import AUX_MODEL_ALIAS, MAIN_MODEL_ALIAS, CaptureProxy
from testing.fakes.llm_replies import prompt_ids_of
from testing.fakes.llm_upstream import FakeUpstream
from tests.proxy.conftest import UPSTREAM_MODEL, OpenRollout, chat, stream_events


@pytest.mark.parametrize(
    ("method", "path"),
    [("POST", "/chat/completions"), ("GET", "/models"), ("POST", "/completions")],
)
async def test_unknown_token_is_404(
    proxy: CaptureProxy, agent: httpx.AsyncClient, method: str, path: str
) -> None:
    response = await agent.request(method, f"{proxy.url}/r/not-a-token/v1{path}", json=chat("hi"))
    assert response.status_code == 404
    assert response.json()["error"]["message"] == "no such route"


async def test_a_closed_route_is_gone(
    proxy: CaptureProxy, open_rollout: OpenRollout, agent: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    rollout = open_rollout()
    proxy.close_route(rollout.route)
    response = await agent.post(rollout.chat_url, json=chat("hi"), headers=rollout.headers)
    assert response.status_code == 404
    assert upstream.requests == []


async def test_routes_have_unguessable_distinct_tokens(open_rollout: OpenRollout) -> None:
    tokens = {open_rollout(f"r{i}").route.token for i in range(50)}
    assert len(tokens) == 50
    assert all(len(token) >= 40 for token in tokens)


async def test_models_lists_the_aliases(
    open_rollout: OpenRollout, agent: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    rollout = open_rollout()
    response = await agent.get(f"{rollout.base_url}/models", headers=rollout.headers)
    assert [m["id"] for m in response.json()["data"]] == [
        MAIN_MODEL_ALIAS,
        AUX_MODEL_ALIAS,
        UPSTREAM_MODEL,
    ]
    assert upstream.requests == []
    assert rollout.route.turns == []


async def test_sixteen_concurrent_rollouts_never_mix(
    open_rollout: OpenRollout, agent: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    rollouts = [open_rollout(f"rollout-{i}") for i in range(16)]

    async def converse(number: int) -> None:
        rollout = rollouts[number]
        history = [f"task of rollout {number}"]
        for step in range(3):
            body = chat(*history, stream=(number + step) % 2 == 0)
            if body["stream"]:
                await stream_events(agent, rollout, body)
            else:
                response = await agent.post(rollout.chat_url, json=body, headers=rollout.headers)
                assert response.status_code == 200
            history += [f"reply {step} of {number}", f"output {step} of {number}"]

    await asyncio.gather(*(converse(n) for n in range(16)))
    for number, rollout in enumerate(rollouts):
        turns = sorted(rollout.route.turns, key=lambda t: t.index)
        assert [t.index for t in turns] == [0, 1, 2]
        history: list[dict[str, Any]] = []
        for turn in turns:
            history = history[: turn.request_message_offset] + turn.request_messages
            assert all(f"{number}" in m["content"].split()[-1] for m in history)
            assert turn.prompt_token_ids == prompt_ids_of(history)
        assert rollout.published == rollout.route.turns
