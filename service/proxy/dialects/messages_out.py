"""The upstream's chat completion as the Anthropic Messages answer the agent expects.

Unary: one `message` object. Stream: the event sequence Anthropic sends, each as
`event: <type>` + `data: <json>`:

    message_start                     on the upstream's first chunk (input_tokens from
                                      vLLM's prompt ids when it sent them)
    content_block_start / _delta / _stop
        thinking  (thinking_delta)    <- delta.reasoning_content / delta.reasoning
        text      (text_delta)        <- delta.content
        tool_use  (input_json_delta)  <- delta.tool_calls[i] (id and name on the first)
    message_delta                     stop_reason (stop -> end_turn, length -> max_tokens,
                                      tool_calls -> tool_use) and usage
    message_stop                      on the upstream's [DONE]

Errors are Anthropic's: `{"type": "error", "error": {"type": ..., "message": ...}}`, as a
body or as an `event: error` mid-stream. Each tool call's arguments text is remembered
(`ArgumentsMemory`) so that its echo in the next request goes upstream unchanged.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from service.proxy.capture.assembly import CompletionAssembler, first_choice, reasoning_of
from service.proxy.capture.json_shapes import as_dict, as_str
from service.proxy.dialects.messages_in import ArgumentsMemory

__all__ = ["MessagesCodec", "anthropic_error", "anthropic_stream_error", "stop_reason"]

_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def stop_reason(finish_reason: str, tool_called: bool) -> str:
    """Anthropic's stop reason for a chat finish reason."""
    if tool_called and finish_reason in ("stop", "tool_calls"):
        return "tool_use"
    return _STOP_REASONS.get(finish_reason, "end_turn")


def anthropic_error(message: str, status: int) -> bytes:
    """An Anthropic error body."""
    kind = _ERROR_TYPES.get(status, "api_error")
    return orjson.dumps({"type": "error", "error": {"type": kind, "message": message}})


def anthropic_stream_error(message: str, status: int) -> bytes:
    """An Anthropic in-band stream error (the SDKs raise it as an APIStatusError)."""
    return b"event: error\ndata: " + anthropic_error(message, status) + b"\n\n"


def _event(kind: str, data: dict[str, Any]) -> bytes:
    return b"event: %s\ndata: %s\n\n" % (kind.encode(), orjson.dumps({"type": kind, **data}))


def _tool_input(arguments: str) -> dict[str, Any]:
    try:
        value = json.loads(arguments) if arguments else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _prompt_count(raw: bytes | None) -> int:
    return 0 if not raw or not raw.strip() else raw.count(b",") + 1


class MessagesCodec:
    """Translated Messages: chat completions from the upstream, Messages to the agent."""

    def __init__(
        self,
        assembler: CompletionAssembler,
        model: str,
        memory: ArgumentsMemory,
        scrub: Callable[[str], str],
    ) -> None:
        self._assembler, self._model, self._memory = assembler, model, memory
        self._scrub = scrub
        """Takes the key out of an upstream's error text (`Exchange.scrub`)."""
        self._id = f"msg_{secrets.token_hex(12)}"
        self._started = self._failed = False
        self._block: object = None
        """The open content block: "thinking", "text", a tool call's index, or None."""
        self._index = -1
        self._tools: dict[int, tuple[str, list[str]]] = {}
        """Tool calls by chat index: their id and arguments so far."""
        self._usage: Mapping[str, Any] = {}

    def _message(self, content: list[dict[str, Any]], reason: str | None) -> dict[str, Any]:
        return {
            "id": self._id,
            "type": "message",
            "role": "assistant",
            "model": self._model,
            "content": content,
            "stop_reason": reason,
            "stop_sequence": None,
            "usage": self._usage_of(),
        }

    def _usage_of(self) -> dict[str, int]:
        prompt = self._usage.get("prompt_tokens")
        completion = self._usage.get("completion_tokens")
        return {
            "input_tokens": prompt
            if type(prompt) is int
            else _prompt_count(self._assembler.prompt_raw),
            "output_tokens": completion if type(completion) is int else 0,
        }

    # unary
    def add_unary(self, doc: Mapping[str, Any]) -> None:
        self._assembler.add_completion(doc)

    def unary_body(self, body: bytes, doc: Mapping[str, Any]) -> bytes:
        usage = doc.get("usage")
        self._usage = usage if isinstance(usage, dict) else {}
        choice = first_choice(doc)
        message = as_dict(choice.get("message"))
        content: list[dict[str, Any]] = []
        reasoning = reasoning_of(message)
        if reasoning:
            content.append({"type": "thinking", "thinking": reasoning, "signature": ""})
        if isinstance(message.get("content"), str) and message["content"]:
            content.append({"type": "text", "text": message["content"]})
        for call in message.get("tool_calls") or []:
            content.append(self._tool_use(call))
        reason = choice.get("finish_reason")
        tool_called = any(block["type"] == "tool_use" for block in content)
        return orjson.dumps(self._message(content, stop_reason(str(reason), tool_called)))

    def _tool_use(self, value: object) -> dict[str, Any]:
        call, function = as_dict(value), as_dict(as_dict(value).get("function"))
        call_id = as_str(call.get("id")) or f"toolu_{secrets.token_hex(12)}"
        arguments = as_str(function.get("arguments"))
        self._memory.remember(call_id, arguments)
        return {
            "type": "tool_use",
            "id": call_id,
            "name": as_str(function.get("name")),
            "input": _tool_input(arguments),
        }

    # stream
    def add_chunk(self, chunk: Mapping[str, Any]) -> bool:
        return self._assembler.add_chunk(chunk)

    def event(self, event: bytes, chunk: Mapping[str, Any]) -> bytes:
        if "error" in chunk:
            self._failed = True
            return anthropic_stream_error(self._scrub(self._assembler.error), 502)
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self._usage = usage
        out = b""
        if not self._started:
            self._started = True
            out = _event("message_start", {"message": self._message([], None)})
        delta = first_choice(chunk).get("delta")
        return out + self._delta(delta) if isinstance(delta, dict) else out

    def _delta(self, delta: Mapping[str, Any]) -> bytes:
        out = b""
        reasoning = reasoning_of(delta)
        if reasoning:
            out += self._open("thinking", {"type": "thinking", "thinking": "", "signature": ""})
            out += self._block_delta({"type": "thinking_delta", "thinking": reasoning})
        content = delta.get("content")
        if isinstance(content, str) and content:
            out += self._open("text", {"type": "text", "text": ""})
            out += self._block_delta({"type": "text_delta", "text": content})
        for call in delta.get("tool_calls") or []:
            if isinstance(call, dict):
                out += self._tool_delta(call)
        return out

    def _tool_delta(self, call: Mapping[str, Any]) -> bytes:
        number = call.get("index")
        index = number if isinstance(number, int) else len(self._tools)
        function = as_dict(call.get("function"))
        out = b""
        if self._block != index:
            call_id = as_str(call.get("id")) or f"toolu_{secrets.token_hex(12)}"
            self._tools[index] = (call_id, [])
            block = {
                "type": "tool_use",
                "id": call_id,
                "name": as_str(function.get("name")),
                "input": {},
            }
            out += self._open(index, block)
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            self._tools[index][1].append(arguments)
            out += self._block_delta({"type": "input_json_delta", "partial_json": arguments})
        return out

    def _open(self, block: object, content_block: dict[str, Any]) -> bytes:
        if self._block == block:
            return b""
        out = self._close()
        self._block, self._index = block, self._index + 1
        return out + _event(
            "content_block_start", {"index": self._index, "content_block": content_block}
        )

    def _close(self) -> bytes:
        if self._block is None:
            return b""
        if isinstance(self._block, int):
            call_id, parts = self._tools[self._block]
            self._memory.remember(call_id, "".join(parts))
        self._block = None
        return _event("content_block_stop", {"index": self._index})

    def _block_delta(self, delta: dict[str, Any]) -> bytes:
        return _event("content_block_delta", {"index": self._index, "delta": delta})

    def done(self, event: bytes) -> bytes:
        return self.end()

    def end(self) -> bytes:
        if self._failed:
            return b""
        out = (
            b"" if self._started else _event("message_start", {"message": self._message([], None)})
        )
        out += self._close()
        reason = stop_reason(self._assembler.finish_reason, bool(self._tools))
        delta = {"stop_reason": reason, "stop_sequence": None}
        out += _event("message_delta", {"delta": delta, "usage": self._usage_of()})
        return out + _event("message_stop", {})

    def error_body(self, message: str, status: int) -> bytes:
        return anthropic_error(message, status)

    def stream_error(self, message: str, status: int) -> bytes:
        return anthropic_stream_error(message, status)
