"""The proxy's guarantees in the Responses and Messages dialects, translated."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import openai
import pytest

from service.models import CaptureSpec, Dialect, DialectMode
from service.proxy import AUX_MODEL_ALIAS, MAIN_MODEL_ALIAS
from testing.fakes.llm_dialects import token_count
from testing.fakes.llm_upstream import FakeUpstream, Reply
from tests.proxy.conftest import UPSTREAM_KEY, UPSTREAM_MODEL
from tests.proxy.dialects.conftest import OpenDialectRoute, anthropic_client, openai_client

MESSAGES: dict[str, Any] = {
    "model": MAIN_MODEL_ALIAS,
    "max_tokens": 4000,
    "thinking": {"type": "enabled", "budget_tokens": 1024},
    "messages": [{"role": "user", "content": "hi"}],
}
RESPONSES: dict[str, Any] = {"model": MAIN_MODEL_ALIAS, "input": "hi", "max_output_tokens": 4000}


async def test_upstream_request_gets_model_caps_thinking_and_token_requests(
    open_route: OpenDialectRoute, upstream: FakeUpstream
) -> None:
    rollout = open_route(capture=CaptureSpec(max_tokens_cap=64, disable_thinking=True))
    await anthropic_client(rollout).messages.create(**MESSAGES)
    await openai_client(rollout).responses.create(**RESPONSES)
    for request in upstream.requests:
        assert request.path == "/v1/chat/completions"
        assert request.headers["authorization"] == f"Bearer {UPSTREAM_KEY}"
        assert request.body is not None
        assert request.body["model"] == UPSTREAM_MODEL
        assert request.body["max_tokens"] == 64
        assert request.body["chat_template_kwargs"] == {"enable_thinking": False}
        assert request.body["return_token_ids"] is True
        assert request.body["logprobs"] is True
    assert [turn.dialect for turn in rollout.published] == [Dialect.MESSAGES, Dialect.RESPONSES]


@pytest.mark.parametrize("dialect", ["messages", "responses"])
async def test_an_upstream_error_is_answered_in_the_dialect_without_the_key(
    open_route: OpenDialectRoute, upstream: FakeUpstream, dialect: str
) -> None:
    upstream.script(Reply(status=500, error_message=f"bad key {UPSTREAM_KEY}"))
    rollout = open_route()
    if dialect == "messages":
        with pytest.raises(anthropic.InternalServerError) as caught:
            await anthropic_client(rollout).messages.create(**MESSAGES)
        body: Any = caught.value.body
        assert body["type"] == "error"
        assert body["error"]["type"] == "api_error"
    else:
        with pytest.raises(openai.InternalServerError) as raised:
            await openai_client(rollout).responses.create(**RESPONSES)
        body = raised.value.body
    assert UPSTREAM_KEY not in str(body)
    assert "[redacted]" in str(body)
    [turn] = rollout.published
    assert turn.failed
    assert UPSTREAM_KEY not in turn.upstream_error
    assert rollout.route.all_failed


async def test_a_messages_stream_cut_short_ends_with_an_anthropic_error_event(
    open_route: OpenDialectRoute, upstream: FakeUpstream
) -> None:
    upstream.script(Reply(text="one two three four", close_after_chunks=3))
    rollout = open_route()
    with pytest.raises(anthropic.APIStatusError):
        async with anthropic_client(rollout).messages.stream(**MESSAGES) as events:
            [event async for event in events]
    [turn] = rollout.published
    assert turn.incomplete


async def test_a_responses_stream_cut_short_ends_with_response_failed(
    open_route: OpenDialectRoute, upstream: FakeUpstream
) -> None:
    upstream.script(Reply(text="one two three four", close_after_chunks=3))
    rollout = open_route()
    stream = await openai_client(rollout).responses.create(**RESPONSES, stream=True)
    kinds = [event.type async for event in stream]
    assert kinds[0] == "response.created"
    assert kinds[-1] == "response.failed"
    assert "response.completed" not in kinds
    [turn] = rollout.published
    assert turn.incomplete


@pytest.mark.parametrize("path", ["messages", "responses"])
async def test_the_stream_is_not_buffered(
    open_route: OpenDialectRoute, upstream: FakeUpstream, path: str
) -> None:
    upstream.script(Reply(text="one two three", hold_after_first=True))
    rollout = open_route()
    body = {**(MESSAGES if path == "messages" else RESPONSES), "stream": True}
    async with (
        httpx.AsyncClient(timeout=10) as agent,
        agent.stream("POST", f"{rollout.base_url}/{path}", json=body) as response,
    ):
        lines = response.aiter_lines()
        first = await anext(lines)
        # The upstream still holds its stream: the first event went out on its own.
        assert first in ("event: message_start", "event: response.created")
        assert rollout.route.turn_count == 0
        upstream.release()
        rest = [line async for line in lines if line.startswith("event:")]
    assert rest[-1] in ("event: message_stop", "event: response.completed")
    [turn] = rollout.published
    assert turn.completion_text == "one two three"
    assert turn.time_to_first_token_s is not None


async def test_count_tokens_is_counted_upstream_and_untrainable(
    open_route: OpenDialectRoute, upstream: FakeUpstream
) -> None:
    rollout = open_route()
    count = await anthropic_client(rollout).messages.count_tokens(
        model=MAIN_MODEL_ALIAS, system="Be brief.", messages=MESSAGES["messages"]
    )
    [request] = upstream.requests
    assert request.path == "/tokenize"
    assert request.body is not None
    assert count.input_tokens == token_count(request.body["messages"]) == 2
    [turn] = rollout.published
    assert not turn.trainable
    assert turn.translated
    assert turn.usage.prompt_tokens == 2
    assert not rollout.route.calls.trainable


async def test_side_calls_on_the_aux_model_are_untrainable(
    open_route: OpenDialectRoute, upstream: FakeUpstream
) -> None:
    rollout = open_route()
    await anthropic_client(rollout).messages.create(**{**MESSAGES, "model": AUX_MODEL_ALIAS})
    [turn] = rollout.published
    assert not turn.trainable
    assert turn.token_ids_present


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        (
            "messages",
            {"model": "m", "messages": [{"role": "robot", "content": "x"}]},
            "messages[0].role",
        ),
        ("messages", {"model": "m", "messages": "hi"}, "messages"),
        ("responses", {"model": "m", "input": 3}, "input"),
        (
            "responses",
            {"model": "m", "input": "x", "previous_response_id": "r"},
            "previous_response_id",
        ),
    ],
)
async def test_an_untranslatable_request_is_refused_naming_the_field(
    open_route: OpenDialectRoute, upstream: FakeUpstream, path: str, body: Any, field: str
) -> None:
    rollout = open_route()
    async with httpx.AsyncClient() as agent:
        response = await agent.post(f"{rollout.base_url}/{path}", json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["message"].startswith(f"{field}:")
    if path == "messages":
        assert error["type"] == "invalid_request_error"
    assert not upstream.requests
    [turn] = rollout.published
    assert turn.unparsed
    assert field in turn.upstream_error


@pytest.mark.parametrize("mode", [DialectMode.TRANSLATED, DialectMode.NATIVE])
@pytest.mark.parametrize("path", ["messages", "responses"])
async def test_an_in_band_stream_error_reaches_the_agent_without_the_key(
    open_route: OpenDialectRoute, upstream: FakeUpstream, path: str, mode: DialectMode
) -> None:
    upstream.script(
        Reply(text="one two three", stream_error_after_chunks=2, error_message=f"x {UPSTREAM_KEY}")
    )
    rollout = open_route(mode)
    body = {**(MESSAGES if path == "messages" else RESPONSES), "stream": True}
    async with httpx.AsyncClient(timeout=10) as agent:
        response = await agent.post(f"{rollout.base_url}/{path}", json=body)
    assert UPSTREAM_KEY not in response.text
    assert "[redacted]" in response.text
    last = [line for line in response.text.splitlines() if line.startswith("event:")][-1]
    assert last == ("event: error" if path == "messages" else "event: response.failed")
    [turn] = rollout.published
    assert turn.failed
    assert UPSTREAM_KEY not in turn.upstream_error
