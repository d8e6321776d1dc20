"""Sampling as the upstream receives it through the real proxy, and as the turn records it:
the rollout's values set, every sampling field of the agent's stripped (chat completions;
the other dialects are in tests/proxy/dialects/test_sampling_boundary.py)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from service.models import CaptureSpec, Sampling
from testing.fakes.llm_upstream import FakeUpstream
from tests.proxy.capture.test_rewrite import sent_upstream
from tests.proxy.conftest import OpenRollout, chat

TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
AGENT_SAMPLING: dict[str, Any] = {
    "temperature": 0.01,
    "top_p": 0.1,
    "top_k": 1,
    "min_p": 0.9,
    "seed": 1234,
    "n": 4,
    "best_of": 4,
    "use_beam_search": True,
    "presence_penalty": 2.0,
    "frequency_penalty": -2.0,
    "repetition_penalty": 0.5,
    "logit_bias": {"42": 100},
    "allowed_token_ids": [1, 2, 3],
    "bad_words": ["FAIL"],
    "stop": ["\n"],
    "stop_token_ids": [2],
    "min_tokens": 500,
    "ignore_eos": True,
    "echo": True,
    "prompt_logprobs": 5,
    "response_format": {"type": "json_object"},
    "guided_json": {"type": "object"},
    "guided_regex": "PASS",
    "guided_choice": ["PASS"],
    "structured_outputs": {"choice": ["PASS"]},
    "logits_processors": ["my.processor"],
    "vllm_xargs": {"boost": 1},
    "extra_body": {"temperature": 0.0, "top_k": 1},
    "tool_choice": "required",
}
"""What a policy might send to pick its own distribution: each must stay out of the request."""


async def test_sampling_replaces_the_agents_values_and_the_turn_records_it(
    open_rollout: OpenRollout, agent: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    sampling = Sampling(seed=77, temperature=0.3, top_p=0.9, top_k=40, repetition_penalty=1.1)
    rollout = open_rollout(capture=CaptureSpec(sampling=sampling))
    body = {**chat("hi"), "seed": 1, "temperature": 1.5, "top_p": 1.0, "top_k": 1}
    response = await agent.post(rollout.chat_url, json=body, headers=rollout.headers)
    assert response.status_code == 200, response.text
    received = upstream.requests[-1].body
    assert received is not None
    assert {key: received[key] for key in ("seed", "temperature", "top_p", "top_k")} == {
        "seed": 77,
        "temperature": 0.3,
        "top_p": 0.9,
        "top_k": 40,
    }
    assert received["repetition_penalty"] == 1.1
    [turn] = rollout.route.turns
    assert turn.sampling == sampling
    assert turn.sampling_stripped == ["seed", "temperature", "top_p", "top_k"]


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
async def test_every_sampling_field_of_the_agents_is_stripped(
    open_rollout: OpenRollout, agent: httpx.AsyncClient, upstream: FakeUpstream, stream: bool
) -> None:
    """With no sampling in the spec the agent still sets none: the upstream's defaults
    apply, one choice (`n` never sent), no bias, no stop, no guided decoding."""
    rollout = open_rollout()
    body = {**chat("hi", stream=stream), "tools": TOOLS, **AGENT_SAMPLING}
    if stream:
        async with agent.stream(
            "POST", rollout.chat_url, json=body, headers=rollout.headers
        ) as response:
            assert response.status_code == 200
            await response.aread()
    else:
        response = await agent.post(rollout.chat_url, json=body, headers=rollout.headers)
        assert response.status_code == 200, response.text
    received = upstream.requests[-1].body
    assert received is not None
    assert not set(AGENT_SAMPLING) & set(received)
    assert received["tools"] == TOOLS
    [turn] = rollout.route.turns
    assert turn.sampling == Sampling()
    assert turn.sampling_stripped == list(AGENT_SAMPLING)


async def test_the_agent_cannot_turn_logprobs_off(
    open_rollout: OpenRollout, agent: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    """Fields the proxy sets itself are replaced, not reported as stripped."""
    body = chat("hi", logprobs=False, top_logprobs=0, return_token_ids=False)
    received = await sent_upstream(open_rollout, agent, upstream, body, CaptureSpec(top_logprobs=2))
    assert (received["logprobs"], received["top_logprobs"]) == (True, 2)
    assert received["return_token_ids"] is True


@pytest.mark.parametrize("choice", ["auto", "none"])
async def test_a_free_tool_choice_passes(
    open_rollout: OpenRollout, agent: httpx.AsyncClient, upstream: FakeUpstream, choice: str
) -> None:
    body = chat("hi", tools=TOOLS, tool_choice=choice)
    assert (await sent_upstream(open_rollout, agent, upstream, body))["tool_choice"] == choice


async def test_a_forced_tool_choice_is_stripped(
    open_rollout: OpenRollout, agent: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    """A named or required tool is decoding constrained to a schema (vLLM's guided JSON)."""
    named = {"type": "function", "function": {"name": "bash"}}
    for choice in ("required", named):
        body = chat("hi", tools=TOOLS, tool_choice=choice)
        assert "tool_choice" not in await sent_upstream(open_rollout, agent, upstream, body)


async def test_stripped_names_are_bounded_and_scrubbed(
    open_rollout: OpenRollout, agent: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    """The agent names the fields: a thousand of them, or its route token as one, do not
    make a turn large or carry a secret."""
    rollout = open_rollout()
    junk = {f"x{n}": 0 for n in range(1000)}
    token = rollout.route.token
    body = {**chat("hi"), token: 1, "z" * 30 + token: 1, "y" * 500: 1, **junk}
    response = await agent.post(rollout.chat_url, json=body, headers=rollout.headers)
    assert response.status_code == 200, response.text
    received = upstream.requests[-1].body
    assert received is not None
    assert not set(junk) & set(received)
    [turn] = rollout.route.turns
    assert len(turn.sampling_stripped) == 32
    assert turn.sampling_stripped[:3] == ["[redacted]", "z" * 30 + "[redacted]", "y" * 64]
    assert token not in repr(turn)
