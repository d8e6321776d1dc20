"""Translated dialects read by the vendors' own SDKs: claude-code's and codex's wire, with
the upstream's exact token ids and logprobs on every turn."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai
import pytest

from service.models import Dialect, Turn
from service.proxy import MAIN_MODEL_ALIAS
from testing.fakes.llm_upstream import FakeUpstream, Reply, ToolCallReply, has_tools
from tests.proxy.conftest import UPSTREAM_KEY, OpenRollout, Rollout

WRITE = ToolCallReply("write", '{"path": "a.txt", "content": "hello"}', id="call_w1")
TOOL_REPLY = Reply(text="Writing it.", reasoning="A file is needed.", tool_calls=[WRITE])
ANTHROPIC_TOOL = {
    "name": "write",
    "description": "Write a file",
    "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
}
OPENAI_TOOL = {
    "type": "function",
    "name": "write",
    "description": "Write a file",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
}


def anthropic_client(rollout: Rollout) -> anthropic.AsyncAnthropic:
    root = rollout.base_url.removesuffix("/v1")
    return anthropic.AsyncAnthropic(base_url=root, api_key=rollout.route.token, max_retries=0)


def openai_client(rollout: Rollout) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=rollout.base_url, api_key=rollout.route.token, max_retries=0)


def assert_exact_tokens(turn: Turn, upstream: FakeUpstream) -> None:
    sent = upstream.sent[-1]
    assert turn.translated
    assert turn.token_ids_present
    assert turn.logprobs_present
    assert turn.completion_token_ids == sent.completion_token_ids
    assert turn.prompt_token_ids == sent.prompt_token_ids
    assert turn.logprobs == sent.logprobs


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
async def test_messages_tool_use_through_the_anthropic_sdk(
    open_rollout: OpenRollout, upstream: FakeUpstream, stream: bool
) -> None:
    upstream.script(TOOL_REPLY, Reply(text="Done."), match=has_tools)
    rollout = open_rollout()
    client = anthropic_client(rollout)
    request: dict[str, Any] = {
        "model": MAIN_MODEL_ALIAS,
        "max_tokens": 256,
        "system": "You write files.",
        "tools": [ANTHROPIC_TOOL],
        "messages": [{"role": "user", "content": "write a.txt"}],
    }
    if stream:
        async with client.messages.stream(**request) as events:
            kinds = [event.type async for event in events]
            message = await events.get_final_message()
        assert kinds[0] == "message_start"
        assert kinds[-1] == "message_stop"
    else:
        message = await client.messages.create(**request)
    assert [block.type for block in message.content] == ["thinking", "text", "tool_use"]
    tool_use = message.content[2]
    assert isinstance(tool_use, anthropic.types.ToolUseBlock)
    assert (tool_use.id, tool_use.name) == ("call_w1", "write")
    assert tool_use.input == {"path": "a.txt", "content": "hello"}
    assert message.stop_reason == "tool_use"
    assert message.usage.output_tokens == len(upstream.sent[-1].tokens)
    [turn] = rollout.route.turns
    assert turn.dialect is Dialect.MESSAGES
    assert turn.tool_calls[0].arguments == WRITE.arguments
    assert turn.request_messages[0] == {"role": "system", "content": "You write files."}
    assert_exact_tokens(turn, upstream)

    # The tool_result turn: the echoed call goes upstream as the model's own text.
    follow_up = {
        **request,
        "messages": [
            *request["messages"],
            {"role": "assistant", "content": [block.model_dump() for block in message.content]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "call_w1", "content": "ok"}],
            },
        ],
    }
    reply = await client.messages.create(**follow_up)
    assert reply.content[0].type == "text"
    assert reply.stop_reason == "end_turn"
    sent_messages = upstream.requests[-1].body["messages"]  # type: ignore[index]
    assert sent_messages[2]["tool_calls"][0]["function"]["arguments"] == WRITE.arguments
    assert sent_messages[3] == {"role": "tool", "tool_call_id": "call_w1", "content": "ok"}
    assert upstream.requests[-1].headers["authorization"] == f"Bearer {UPSTREAM_KEY}"
    assert_exact_tokens(rollout.route.turns[1], upstream)


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
async def test_responses_function_call_through_the_openai_sdk(
    open_rollout: OpenRollout, upstream: FakeUpstream, stream: bool
) -> None:
    upstream.script(TOOL_REPLY, Reply(text="Done."), match=has_tools)
    rollout = open_rollout()
    client = openai_client(rollout)
    request: dict[str, Any] = {
        "model": MAIN_MODEL_ALIAS,
        "instructions": "You write files.",
        "input": [{"role": "user", "content": "write a.txt"}],
        "tools": [OPENAI_TOOL],
        "store": False,
    }
    if stream:
        async with client.responses.stream(**request) as events:
            kinds = [event.type async for event in events]
            response = await events.get_final_response()
        assert kinds[:2] == ["response.created", "response.in_progress"]
        assert kinds[-1] == "response.completed"
    else:
        response = await client.responses.create(**request)
    assert [item.type for item in response.output] == ["reasoning", "message", "function_call"]
    call = response.output[2]
    assert isinstance(call, openai.types.responses.ResponseFunctionToolCall)
    assert (call.call_id, call.name, call.arguments) == ("call_w1", "write", WRITE.arguments)
    assert response.output_text == "Writing it."
    [turn] = rollout.route.turns
    assert turn.dialect is Dialect.RESPONSES
    assert_exact_tokens(turn, upstream)

    follow_up = {
        **request,
        "input": [
            *request["input"],
            *[item.model_dump(exclude_none=True) for item in response.output],
            {"type": "function_call_output", "call_id": "call_w1", "output": "ok"},
        ],
    }
    reply = await client.responses.create(**follow_up)
    assert reply.output_text == "Done."
    sent_messages = upstream.requests[-1].body["messages"]  # type: ignore[index]
    assert sent_messages[2]["tool_calls"][0]["id"] == "call_w1"
    assert sent_messages[3] == {"role": "tool", "tool_call_id": "call_w1", "content": "ok"}
    assert json.loads(sent_messages[2]["tool_calls"][0]["function"]["arguments"])["path"] == "a.txt"
