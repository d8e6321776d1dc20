"""Messages and Responses requests as the chat-completions requests the upstream gets."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from service.errors import DialectRequestError
from service.proxy.capture.request_parse import RequestParser
from service.proxy.dialects.messages_in import ArgumentsMemory, ConversionMemo, messages_to_chat
from service.proxy.dialects.responses_in import responses_to_chat


def test_messages_blocks_become_chat_messages() -> None:
    body: dict[str, Any] = {
        "model": "m",
        "max_tokens": 10,
        "system": [
            {"type": "text", "text": "x-anthropic-billing-header: cc_version=1; cch=abc;"},
            {"type": "text", "text": "You are Claude Code."},
        ],
        "tools": [
            {"name": "Bash", "input_schema": {"type": "object"}},
            {"type": "web_search_20250305", "name": "web_search"},
        ],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
        "thinking": {"type": "disabled"},
        "stop_sequences": ["END"],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "list files"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "use ls", "signature": "s"},
                    {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "content": [{"type": "text", "text": "a.txt"}],
                        "is_error": False,
                    },
                    {"type": "text", "text": "now read it", "cache_control": {"type": "ephemeral"}},
                ],
            },
        ],
    }
    chat = messages_to_chat(body, ArgumentsMemory(), self_hosted=True)
    assert chat["messages"] == [
        {"role": "system", "content": "You are Claude Code."},
        {"role": "user", "content": "list files"},
        {
            "role": "assistant",
            "content": None,
            "reasoning": "use ls",
            "tool_calls": [
                {
                    "id": "t1",
                    "type": "function",
                    "function": {"name": "Bash", "arguments": '{"command": "ls"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "t1", "content": "a.txt"},
        {"role": "user", "content": "now read it"},
    ]
    assert chat["tools"] == [
        {"type": "function", "function": {"name": "Bash", "parameters": {"type": "object"}}}
    ]
    assert chat["tool_choice"] == "required"
    assert chat["parallel_tool_calls"] is False
    assert chat["chat_template_kwargs"] == {"enable_thinking": False}
    assert (chat["max_tokens"], chat["stop"]) == (10, ["END"])


def test_a_remembered_call_goes_back_as_the_models_own_text() -> None:
    memory = ArgumentsMemory()
    memory.remember("t1", '{ "command" :"ls"}')
    use = {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}}
    body = {"messages": [{"role": "assistant", "content": [use]}]}
    chat = messages_to_chat(body, memory, self_hosted=True)
    assert chat["messages"][0]["tool_calls"][0]["function"]["arguments"] == '{ "command" :"ls"}'
    # An input the agent changed is serialised anew.
    changed = {**use, "input": {"command": "pwd"}}
    chat = messages_to_chat(
        {"messages": [{"role": "assistant", "content": [changed]}]}, memory, self_hosted=True
    )
    assert chat["messages"][0]["tool_calls"][0]["function"]["arguments"] == '{"command": "pwd"}'


def test_responses_items_become_chat_messages() -> None:
    body: dict[str, Any] = {
        "model": "m",
        "instructions": "You are codex.",
        "max_output_tokens": 99,
        "reasoning": {"effort": "low"},
        "tools": [
            {"type": "function", "name": "shell", "parameters": {"type": "object"}},
            {"type": "web_search"},
        ],
        "tool_choice": "auto",
        "input": [
            {
                "type": "message",
                "role": "developer",
                "content": [{"type": "input_text", "text": "rules"}],
            },
            {"role": "user", "content": "list files"},
            {
                "type": "reasoning",
                "id": "rs",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": "ls"}],
            },
            {
                "type": "function_call",
                "call_id": "c1",
                "name": "shell",
                "arguments": '{"cmd":"ls"}',
            },
            {
                "type": "function_call",
                "call_id": "c2",
                "name": "shell",
                "arguments": '{"cmd":"pwd"}',
            },
            {"type": "function_call_output", "call_id": "c1", "output": "a.txt"},
            {
                "type": "function_call_output",
                "call_id": "c2",
                "output": [{"type": "input_text", "text": "/w"}],
            },
        ],
    }
    chat = responses_to_chat(body)
    calls = [
        {
            "id": "c1",
            "type": "function",
            "function": {"name": "shell", "arguments": '{"cmd":"ls"}'},
        },
        {
            "id": "c2",
            "type": "function",
            "function": {"name": "shell", "arguments": '{"cmd":"pwd"}'},
        },
    ]
    assert chat["messages"] == [
        {"role": "system", "content": "You are codex."},
        {"role": "system", "content": "rules"},
        {"role": "user", "content": "list files"},
        {"role": "assistant", "content": None, "reasoning": "ls", "tool_calls": calls},
        {"role": "tool", "tool_call_id": "c1", "content": "a.txt"},
        {"role": "tool", "tool_call_id": "c2", "content": "/w"},
    ]
    assert [tool["function"]["name"] for tool in chat["tools"]] == ["shell"]
    assert (chat["max_tokens"], chat["reasoning_effort"], chat["tool_choice"]) == (
        99,
        "low",
        "auto",
    )


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (
            {"messages": [{"role": "user", "content": [{"type": "tool_result"}]}]},
            "messages[0].content[0].tool_use_id",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "x" * 500}]}]},
            "messages[0].content[0].type",
        ),
        ({"messages": [], "system": 5}, "system"),
        ({"messages": [], "tools": [{"input_schema": {}}]}, "tools[0].name"),
    ],
)
def test_a_bad_messages_request_names_the_field(body: dict[str, Any], field: str) -> None:
    with pytest.raises(DialectRequestError) as raised:
        messages_to_chat(body, ArgumentsMemory(), self_hosted=True)
    assert raised.value.field == field
    assert len(str(raised.value)) < 200  # the agent's input is quoted cut short


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"input": [{"type": "function_call", "name": "f"}]}, "input[0].call_id"),
        ({"input": [{"role": "tool", "content": "x"}]}, "input[0].role"),
        ({"input": [{"role": "user", "content": 5}]}, "input[0].content"),
    ],
)
def test_a_bad_responses_request_names_the_field(body: dict[str, Any], field: str) -> None:
    with pytest.raises(DialectRequestError) as raised:
        responses_to_chat(body)
    assert raised.value.field == field


def test_reused_conversions_equal_fresh_ones() -> None:
    parser, memory, memo = RequestParser("messages"), ArgumentsMemory(), ConversionMemo()
    use = {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}}
    result = {"type": "tool_result", "tool_use_id": "t1", "content": "a.txt " * 40}
    conversation: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": "list files " * 40}]},
        {"role": "assistant", "content": [use]},
        {"role": "user", "content": [result]},
    ]
    for step in range(3):
        tools = [{"name": "Bash", "description": "Run a command. " * 8, "input_schema": {}}]
        raw = orjson.dumps({"model": "m", "system": "s", "messages": conversation, "tools": tools})
        body = parser.parse(raw)
        assert body is not None
        reused = messages_to_chat(body, memory, self_hosted=True, memo=memo)
        fresh = messages_to_chat(orjson.loads(raw), memory, self_hosted=True)
        assert reused == fresh
        conversation = [*conversation, {"role": "assistant", "content": f"step {step}"}]
    # An earlier message changed: it is converted again, not taken from the memo.
    conversation[0] = {"role": "user", "content": "something else"}
    raw = orjson.dumps({"model": "m", "messages": conversation})
    body = parser.parse(raw)
    assert body is not None
    reused = messages_to_chat(body, memory, self_hosted=True, memo=memo)
    assert reused["messages"][0] == {"role": "user", "content": "something else"}
    assert reused == messages_to_chat(orjson.loads(raw), memory, self_hosted=True)
