"""opencode's JSON event lines -> live AgentOutput events (lines shaped as 1.18.33 prints them)."""

from __future__ import annotations

import json
from collections.abc import Mapping

import pytest

from service.agents import opencode_events
from service.agents.opencode_events import OpencodeEventStream
from service.models import AgentOutput, AgentOutputKind

SESSION = {"timestamp": 1795307989614, "sessionID": "ses_dff4e276dffemDIDVCTLgrdZVl"}
STEP_START = {"type": "step_start", **SESSION, "part": {"type": "step-start", "id": "prt_1"}}
TEXT = {"type": "text", **SESSION, "part": {"type": "text", "text": "I'll write it."}}
TOOL_USE = {
    "type": "tool_use",
    **SESSION,
    "part": {
        "type": "tool",
        "tool": "write",
        "callID": "call_1",
        "state": {
            "status": "completed",
            "input": {"filePath": "hello.txt", "content": "hi there\n"},
            "output": "Wrote file successfully.",
        },
    },
}
FAILED_TOOL = {
    "type": "tool_use",
    **SESSION,
    "part": {
        "type": "tool",
        "tool": "bash",
        "state": {"status": "error", "input": {"command": "false"}, "error": "exit 1"},
    },
}
STEP_FINISH = {"type": "step_finish", **SESSION, "part": {"type": "step-finish", "reason": "stop"}}
ERROR = {
    "type": "error",
    **SESSION,
    "error": {
        "name": "APIError",
        "data": {"message": "Cannot connect to API", "isRetryable": True},
    },
}


def _lines(*events: Mapping[str, object]) -> bytes:
    return b"".join(json.dumps(event).encode() + b"\n" for event in events)


def _collect() -> tuple[OpencodeEventStream, list[AgentOutput]]:
    outputs: list[AgentOutput] = []
    return OpencodeEventStream(outputs.append), outputs


def test_a_run_becomes_text_tool_call_and_error_events() -> None:
    stream, outputs = _collect()

    stream.feed(_lines(STEP_START, TEXT, TOOL_USE, FAILED_TOOL, STEP_FINISH, ERROR))

    assert [(o.kind, o.tool_name) for o in outputs] == [
        (AgentOutputKind.TEXT, ""),
        (AgentOutputKind.TOOL_CALL, "write"),
        (AgentOutputKind.TOOL_CALL, "bash"),
        (AgentOutputKind.ERROR, ""),
    ]
    assert outputs[0].text == "I'll write it."
    assert json.loads(outputs[1].text) == {"filePath": "hello.txt", "content": "hi there\n"}
    assert outputs[2].text.endswith("error: exit 1")
    assert outputs[3].text == "Cannot connect to API"


def test_lines_split_across_chunks_are_reassembled() -> None:
    stream, outputs = _collect()
    data = _lines(TEXT, TOOL_USE)

    for i in range(0, len(data), 7):
        stream.feed(data[i : i + 7])

    assert [o.kind for o in outputs] == [AgentOutputKind.TEXT, AgentOutputKind.TOOL_CALL]


def test_lines_that_are_not_events_are_published_raw() -> None:
    stream, outputs = _collect()

    stream.feed(b"! permission requested: bash; auto-rejecting\n[1, 2]\n")
    stream.feed(b'{"type": "future_kind", "x": 1}\nno newline at the end')
    stream.close()

    assert [o.kind for o in outputs] == [AgentOutputKind.STDOUT] * 4
    assert outputs[0].text == "! permission requested: bash; auto-rejecting"
    assert json.loads(outputs[2].text) == {"type": "future_kind", "x": 1}
    assert outputs[3].text == "no newline at the end"


def test_stderr_is_published_as_stderr() -> None:
    stream, outputs = _collect()

    stream.stderr(b"Error: boom\n")

    assert outputs == [AgentOutput(kind=AgentOutputKind.STDERR, text="Error: boom\n")]


def test_large_tool_input_is_cut() -> None:
    stream, outputs = _collect()
    big = {
        "type": "tool_use",
        "part": {"tool": "write", "state": {"status": "completed", "input": {"c": "x" * 100_000}}},
    }

    stream.feed(_lines(big))

    assert len(outputs[0].text) < opencode_events.MAX_TEXT_CHARS + 100
    assert "chars cut" in outputs[0].text


def test_an_endless_line_costs_bounded_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(opencode_events, "MAX_LINE_BYTES", 1000)
    stream, outputs = _collect()

    for _ in range(100):
        stream.feed(b"y" * 500)
    stream.feed(b"\n" + _lines(TEXT))

    assert [o.kind for o in outputs] == [AgentOutputKind.STDOUT, AgentOutputKind.TEXT]
    assert outputs[0].text.endswith("[... line cut]")


def test_events_beyond_the_cap_are_announced_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(opencode_events, "MAX_EVENTS", 3)
    stream, outputs = _collect()

    stream.feed(_lines(*[TEXT] * 10))

    assert [o.kind for o in outputs] == [AgentOutputKind.TEXT] * 3 + [AgentOutputKind.TRUNCATED]
