"""The sampling boundary in the Messages and Responses dialects, translated and native: the
upstream gets the rollout's sampling and none of the agent's, and the turn records both
(names as the agent's dialect spells them)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from service.models import CaptureSpec, Dialect, DialectMode, Sampling
from service.proxy import MAIN_MODEL_ALIAS
from testing.fakes.llm_upstream import FakeUpstream
from tests.proxy.dialects.conftest import OpenDialectRoute

SAMPLING = Sampling(seed=9, temperature=0.6, min_p=0.05)
MESSAGES: dict[str, Any] = {
    "model": MAIN_MODEL_ALIAS,
    "max_tokens": 100,
    "messages": [{"role": "user", "content": "write a.txt"}],
    "tools": [{"name": "bash", "input_schema": {"type": "object"}}],
    "temperature": 0.0,
    "top_p": 0.1,
    "top_k": 1,
    "stop_sequences": ["\n"],
    "tool_choice": {"type": "any"},
    "output_format": {"type": "json_schema", "schema": {"type": "object"}},
    "extra_body": {"temperature": 0.0},
}
MESSAGES_STRIPPED = [
    "temperature",
    "top_p",
    "top_k",
    "stop_sequences",
    "tool_choice",
    "output_format",
    "extra_body",
]
RESPONSES: dict[str, Any] = {
    "model": MAIN_MODEL_ALIAS,
    "input": "finish",
    "tools": [{"type": "function", "name": "bash", "parameters": {"type": "object"}}],
    "temperature": 0.0,
    "top_p": 0.1,
    "top_logprobs": 0,
    "text": {"verbosity": "low", "format": {"type": "json_schema", "schema": {}}},
    "tool_choice": "required",
    "seed": 1,
    "extra_body": {"top_k": 1},
}
RESPONSES_STRIPPED = ["temperature", "top_p", "text.format", "tool_choice", "seed", "extra_body"]
CASES = [
    (Dialect.MESSAGES, "messages", MESSAGES, MESSAGES_STRIPPED),
    (Dialect.RESPONSES, "responses", RESPONSES, RESPONSES_STRIPPED),
]
AGENT_FIELDS = {
    "top_p",
    "top_k",
    "stop",
    "stop_sequences",
    "tool_choice",
    "output_format",
    "response_format",
    "extra_body",
}
"""Names the agent's values could reach a chat or native upstream under."""


@pytest.mark.parametrize("mode", [DialectMode.TRANSLATED, DialectMode.NATIVE])
@pytest.mark.parametrize(
    ("dialect", "path", "body", "stripped"), CASES, ids=["messages", "responses"]
)
async def test_the_agents_sampling_never_reaches_the_upstream(
    open_route: OpenDialectRoute,
    upstream: FakeUpstream,
    mode: DialectMode,
    dialect: Dialect,
    path: str,
    body: dict[str, Any],
    stripped: list[str],
) -> None:
    rollout = open_route(mode, capture=CaptureSpec(sampling=SAMPLING, top_logprobs=2))
    async with httpx.AsyncClient(timeout=10.0) as agent:
        response = await agent.post(f"{rollout.base_url}/{path}", json=body)
    assert response.status_code == 200, response.text
    sent = upstream.requests[-1]
    assert sent.body is not None
    native = mode is DialectMode.NATIVE
    assert sent.path == (f"/v1/{path}" if native else "/v1/chat/completions")
    assert not AGENT_FIELDS & set(sent.body)
    assert (sent.body["seed"], sent.body["temperature"], sent.body["min_p"]) == (9, 0.6, 0.05)
    if "top_logprobs" in body or not native:
        assert sent.body["top_logprobs"] == 2
    if native and dialect is Dialect.RESPONSES:
        assert sent.body["text"] == {"verbosity": "low"}
    [turn] = rollout.route.turns
    assert (turn.dialect, turn.translated) == (dialect, not native)
    assert turn.sampling == SAMPLING
    assert turn.sampling_stripped == stripped


@pytest.mark.parametrize(
    ("path", "choice"),
    [("messages", {"type": "auto", "disable_parallel_tool_use": True}), ("responses", "none")],
)
async def test_a_free_tool_choice_reaches_a_native_upstream(
    open_route: OpenDialectRoute, upstream: FakeUpstream, path: str, choice: object
) -> None:
    rollout = open_route(DialectMode.NATIVE)
    body = {**(MESSAGES if path == "messages" else RESPONSES), "tool_choice": choice}
    async with httpx.AsyncClient(timeout=10.0) as agent:
        response = await agent.post(f"{rollout.base_url}/{path}", json=body)
    assert response.status_code == 200, response.text
    sent = upstream.requests[-1].body
    assert sent is not None
    assert sent["tool_choice"] == choice
    [turn] = rollout.route.turns
    assert "tool_choice" not in turn.sampling_stripped
    assert turn.sampling == Sampling()
