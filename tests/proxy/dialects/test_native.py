"""Native dialects: forwarded as they are to an upstream serving them, read into turns."""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

from service.models import CaptureSpec, Dialect, DialectMode, Sampling
from service.proxy import MAIN_MODEL_ALIAS
from testing.fakes.llm_upstream import FakeUpstream, Reply, TokenShape, ToolCallReply
from tests.proxy.conftest import UPSTREAM_KEY, UPSTREAM_MODEL
from tests.proxy.dialects.conftest import OpenDialectRoute, anthropic_client, openai_client

WRITE = ToolCallReply("write", '{"path": "a.txt"}', id="toolu_1")
MESSAGES: dict[str, Any] = {
    "model": MAIN_MODEL_ALIAS,
    "max_tokens": 4000,
    "messages": [{"role": "user", "content": "write a.txt"}],
}


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
async def test_native_messages_reach_the_sdk_unchanged_and_the_turn_has_no_token_data(
    open_route: OpenDialectRoute, upstream: FakeUpstream, stream: bool
) -> None:
    upstream.script(Reply(text="Writing.", tool_calls=[WRITE]))
    rollout = open_route(DialectMode.NATIVE, capture=CaptureSpec(max_tokens_cap=100))
    client = anthropic_client(rollout)
    if stream:
        async with client.messages.stream(**MESSAGES) as events:
            message = await events.get_final_message()
    else:
        message = await client.messages.create(**MESSAGES)
    assert [block.type for block in message.content] == ["text", "tool_use"]
    assert message.stop_reason == "tool_use"
    request = upstream.requests[-1]
    assert request.path == "/v1/messages"
    assert request.headers["x-api-key"] == UPSTREAM_KEY
    assert request.body is not None
    assert request.body["model"] == UPSTREAM_MODEL
    assert request.body["max_tokens"] == 100
    [turn] = rollout.route.turns
    assert (turn.dialect, turn.translated) == (Dialect.MESSAGES, False)
    assert turn.completion_text == "Writing."
    assert [(c.id, c.name) for c in turn.tool_calls] == [("toolu_1", "write")]
    assert turn.finish_reason == "tool_calls"
    assert turn.usage.completion_tokens == len(upstream.sent[-1].tokens)
    assert not turn.token_ids_present
    assert not turn.logprobs_present
    assert turn.request_messages == [{"role": "user", "content": "write a.txt"}]


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
async def test_native_responses_carry_text_logprobs_and_spelled_ids(
    open_route: OpenDialectRoute, upstream: FakeUpstream, stream: bool
) -> None:
    upstream.script(Reply(text="All done here.", shape=TokenShape.TOKEN_ID_STRINGS))
    rollout = open_route(DialectMode.NATIVE)
    client = openai_client(rollout)
    request = {"model": MAIN_MODEL_ALIAS, "input": "finish", "max_output_tokens": 50}
    if stream:
        async with client.responses.stream(**request) as events:  # type: ignore[call-overload]
            response = await events.get_final_response()
    else:
        response = await client.responses.create(**request)  # type: ignore[call-overload]
    assert response.output_text == "All done here."
    sent = upstream.requests[-1]
    assert sent.body is not None
    assert sent.path == "/v1/responses"
    assert "message.output_text.logprobs" in sent.body["include"]
    [turn] = rollout.route.turns
    assert (turn.dialect, turn.translated) == (Dialect.RESPONSES, False)
    assert turn.completion_text == "All done here."
    assert turn.finish_reason == "stop"
    assert turn.logprobs_present
    assert turn.logprobs == upstream.sent[-1].logprobs
    assert turn.completion_token_ids == upstream.sent[-1].completion_token_ids


async def test_native_count_tokens_is_forwarded_and_untrainable(
    open_route: OpenDialectRoute, upstream: FakeUpstream
) -> None:
    rollout = open_route(DialectMode.NATIVE)
    count = await anthropic_client(rollout).messages.count_tokens(
        model=MAIN_MODEL_ALIAS, messages=MESSAGES["messages"]
    )
    assert count.input_tokens == 1
    assert upstream.requests[-1].path == "/v1/messages/count_tokens"
    [turn] = rollout.route.turns
    assert not turn.trainable
    assert turn.usage.prompt_tokens == 1


async def test_native_upstream_error_keeps_the_dialect_shape(
    open_route: OpenDialectRoute, upstream: FakeUpstream
) -> None:
    upstream.script(Reply(status=503, error_message="overloaded"))
    rollout = open_route(DialectMode.NATIVE)
    with pytest.raises(anthropic.APIStatusError) as raised:
        await anthropic_client(rollout).messages.create(**MESSAGES)
    assert raised.value.status_code == 503
    assert raised.value.body == {
        "type": "error",
        "error": {"type": "api_error", "message": "upstream HTTP 503: overloaded"},
    }
    [turn] = rollout.route.turns
    assert turn.failed
    assert rollout.route.all_failed


async def test_native_calls_carry_the_rollouts_sampling(
    open_route: OpenDialectRoute, upstream: FakeUpstream
) -> None:
    """A group member's seed (and any temperature/top_p override) reaches the upstream in
    native mode too, replacing the agent's, as it does for chat and translated calls."""
    sampling = Sampling(seed=77, temperature=0.3, top_p=0.9)
    rollout = open_route(DialectMode.NATIVE, capture=CaptureSpec(sampling=sampling))
    upstream.script(Reply(text="ok"), Reply(text="ok"))
    await anthropic_client(rollout).messages.create(**MESSAGES)
    request = {"model": MAIN_MODEL_ALIAS, "input": "finish", "temperature": 1.0}
    await openai_client(rollout).responses.create(**request)  # type: ignore[call-overload]
    for sent in upstream.requests[-2:]:
        assert sent.body is not None
        assert (sent.body["seed"], sent.body["temperature"], sent.body["top_p"]) == (77, 0.3, 0.9)
