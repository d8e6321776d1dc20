"""Each request rewrite rule, as the upstream receives it through the real proxy."""

from __future__ import annotations

from typing import Any

import httpx

from service.models import CaptureSpec
from service.proxy import AUX_MODEL_ALIAS
from service.proxy.capture.rewrite import rewrite_request
from service.proxy.endpoints import ResolvedEndpoint
from testing.fakes.llm_upstream import FakeUpstream
from tests.proxy.conftest import UPSTREAM_KEY, UPSTREAM_MODEL, OpenRollout, chat, stream_events


async def sent_upstream(
    open_rollout: OpenRollout,
    agent: httpx.AsyncClient,
    upstream: FakeUpstream,
    body: dict[str, Any],
    capture: CaptureSpec | None = None,
) -> dict[str, Any]:
    rollout = open_rollout(capture=capture)
    if body.get("stream"):
        await stream_events(agent, rollout, body)
    else:
        response = await agent.post(rollout.chat_url, json=body, headers=rollout.headers)
        assert response.status_code == 200, response.text
    received = upstream.requests[-1].body
    assert received is not None
    return received


async def test_model_is_overridden_for_both_aliases(
    open_rollout: OpenRollout, agent: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    assert (await sent_upstream(open_rollout, agent, upstream, chat("hi")))[
        "model"
    ] == UPSTREAM_MODEL
    aux = chat("title?", model=AUX_MODEL_ALIAS)
    assert (await sent_upstream(open_rollout, agent, upstream, aux))["model"] == UPSTREAM_MODEL


async def test_logprobs_and_top_logprobs_are_asked_for(
    open_rollout: OpenRollout, agent: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    received = await sent_upstream(
        open_rollout, agent, upstream, chat("hi"), CaptureSpec(top_logprobs=3)
    )
    assert received["logprobs"] is True
    assert received["top_logprobs"] == 3


async def test_top_logprobs_is_at_least_one(
    open_rollout: OpenRollout, agent: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    received = await sent_upstream(
        open_rollout, agent, upstream, chat("hi"), CaptureSpec(top_logprobs=0)
    )
    assert received["top_logprobs"] == 1


async def test_max_tokens_are_capped(
    open_rollout: OpenRollout, agent: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    body = chat("hi", max_tokens=50_000, max_completion_tokens=100)
    received = await sent_upstream(
        open_rollout, agent, upstream, body, CaptureSpec(max_tokens_cap=4096)
    )
    assert received["max_tokens"] == 4096
    assert received["max_completion_tokens"] == 100


async def test_a_cap_is_set_when_the_agent_asks_for_no_limit(
    open_rollout: OpenRollout, agent: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    received = await sent_upstream(
        open_rollout, agent, upstream, chat("hi"), CaptureSpec(max_tokens_cap=512)
    )
    assert received["max_tokens"] == 512


async def test_no_cap_leaves_max_tokens_alone(
    open_rollout: OpenRollout, agent: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    received = await sent_upstream(open_rollout, agent, upstream, chat("hi", max_tokens=50_000))
    assert received["max_tokens"] == 50_000
    assert "max_completion_tokens" not in received


async def test_disable_thinking_merges_into_chat_template_kwargs(
    open_rollout: OpenRollout, agent: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    body = chat("hi", chat_template_kwargs={"custom": 1})
    received = await sent_upstream(
        open_rollout, agent, upstream, body, CaptureSpec(disable_thinking=True)
    )
    assert received["chat_template_kwargs"] == {"custom": 1, "enable_thinking": False}
    untouched = await sent_upstream(open_rollout, agent, upstream, chat("hi"))
    assert "chat_template_kwargs" not in untouched


async def test_token_ids_are_asked_of_a_self_hosted_upstream(
    open_rollout: OpenRollout, agent: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    assert (await sent_upstream(open_rollout, agent, upstream, chat("hi")))[
        "return_token_ids"
    ] is True


def test_token_ids_are_not_asked_of_hosted_apis() -> None:
    body: dict[str, Any] = chat("hi")
    rewrite_request(
        body,
        ResolvedEndpoint("https://api.openai.com/v1", "k", "gpt"),
        CaptureSpec(max_tokens_cap=64),
    )
    assert "return_token_ids" not in body
    assert body["max_completion_tokens"] == 64
    assert "max_tokens" not in body


async def test_streams_ask_for_usage(
    open_rollout: OpenRollout, agent: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    body = chat("hi", stream=True, stream_options={"continuous_usage_stats": False})
    received = await sent_upstream(open_rollout, agent, upstream, body)
    assert received["stream_options"] == {"continuous_usage_stats": False, "include_usage": True}


async def test_upstream_gets_its_key_and_never_the_route_token(
    open_rollout: OpenRollout, agent: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    rollout = open_rollout()
    headers = {**rollout.headers, "X-Route": rollout.route.token}
    response = await agent.post(rollout.chat_url, json=chat("hi"), headers=headers)
    assert response.status_code == 200
    request = upstream.requests[-1]
    assert request.headers["authorization"] == f"Bearer {UPSTREAM_KEY}"
    assert request.path == "/v1/chat/completions"
    seen = repr(request.headers) + request.raw.decode()
    assert rollout.route.token not in seen
    assert "x-route" not in request.headers


async def test_the_rest_of_the_request_passes_unchanged(
    open_rollout: OpenRollout, agent: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    """What is the agent's to send (`service.proxy.capture.sampling`) goes as it was."""
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
    extra: dict[str, Any] = {"tool_choice": "auto", "parallel_tool_calls": False, "user": "u1"}
    body = chat("hi", "ok", "go on", tools=tools, reasoning_effort="low", **extra)
    received = await sent_upstream(open_rollout, agent, upstream, body)
    for key in ("messages", "tools", "reasoning_effort", *extra):
        assert received[key] == body[key]
