"""Native Anthropic Messages: forwarded as is, read into the turn on the side.

What vLLM's `/v1/messages` returns, and where it lands on the turn:

    content text / text_delta                 -> completion_text
    thinking / thinking_delta                 -> reasoning_text
    tool_use (id, name, input) / input_json_delta -> tool_calls (arguments as JSON text)
    stop_reason end_turn|max_tokens|tool_use  -> finish_reason stop|length|tool_calls
    usage.input_tokens / output_tokens        -> usage.prompt_tokens / completion_tokens
    (no token ids, no logprobs: the dialect has none) -> token_ids_present and
                                                 logprobs_present false

Rewrites: the agent's sampling fields stripped (`service.proxy.capture.sampling`);
`model`; `max_tokens` capped; the rollout's sampling set; `disable_thinking` drops
`thinking` and, on a self-hosted upstream, sets `chat_template_kwargs.enable_thinking =
false` (vLLM's Messages endpoint passes it to the chat template).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from service.models import CaptureSpec, Dialect
from service.proxy.capture.assembly import CompletionAssembler
from service.proxy.capture.json_shapes import as_dict
from service.proxy.capture.rewrite import cap_tokens, disable_template_thinking
from service.proxy.capture.sampling import apply_sampling, strip_agent_sampling
from service.proxy.dialects.messages_out import anthropic_error, anthropic_stream_error
from service.proxy.endpoints import ResolvedEndpoint

__all__ = ["NativeMessagesCodec", "rewrite_messages"]

_FINISH = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
}


def rewrite_messages(
    body: dict[str, Any], upstream: ResolvedEndpoint, capture: CaptureSpec
) -> list[str]:
    """Model override, token cap, sampling and thinking control on a native Messages request;
    the names of the agent's fields it stripped."""
    stripped = strip_agent_sampling(body, Dialect.MESSAGES)
    body["model"] = upstream.model
    if capture.max_tokens_cap > 0:
        cap_tokens(body, "max_tokens", capture.max_tokens_cap)
    apply_sampling(body, capture.sampling)
    if capture.disable_thinking:
        body.pop("thinking", None)
        if upstream.asks_token_ids:
            disable_template_thinking(body)
    return stripped


class NativeMessagesCodec:
    """Reads Anthropic Messages answers into the turn; the agent gets them unchanged."""

    def __init__(self, assembler: CompletionAssembler) -> None:
        self._assembler = assembler
        self._usage: dict[str, int] = {}

    def _note_usage(self, usage: Mapping[str, Any]) -> dict[str, int]:
        for source, target in (
            ("input_tokens", "prompt_tokens"),
            ("output_tokens", "completion_tokens"),
        ):
            if type(value := usage.get(source)) is int:
                self._usage[target] = value
        self._usage["total_tokens"] = self._usage.get("prompt_tokens", 0) + self._usage.get(
            "completion_tokens", 0
        )
        return dict(self._usage)

    def add_unary(self, doc: Mapping[str, Any]) -> None:
        text, reasoning, calls = [], [], []
        for block in doc.get("content") or []:
            block = as_dict(block)
            if block.get("type") == "text" and isinstance(block.get("text"), str):
                text.append(block["text"])
            elif block.get("type") == "thinking" and isinstance(block.get("thinking"), str):
                reasoning.append(block["thinking"])
            elif block.get("type") == "tool_use":
                arguments = json.dumps(block.get("input", {}), ensure_ascii=False)
                function = {"name": block.get("name"), "arguments": arguments}
                calls.append({"id": block.get("id"), "function": function})
        message = {"content": "".join(text), "reasoning": "".join(reasoning), "tool_calls": calls}
        finish = _FINISH.get(str(doc.get("stop_reason")), str(doc.get("stop_reason") or ""))
        self._assembler.add_completion(
            {
                "choices": [{"message": message, "finish_reason": finish}],
                "usage": self._note_usage(as_dict(doc.get("usage"))),
            }
        )

    def unary_body(self, body: bytes, doc: Mapping[str, Any]) -> bytes:
        return body

    def add_chunk(self, chunk: Mapping[str, Any]) -> bool:
        kind = chunk.get("type")
        if kind == "error":
            self._assembler.error = str(
                as_dict(chunk.get("error")).get("message") or "stream error"
            )
            return False
        delta, finish = self._delta(kind, chunk), None
        if kind == "message_start":
            self._note_usage(as_dict(as_dict(chunk.get("message")).get("usage")))
        elif kind == "message_delta":
            reason = as_dict(chunk.get("delta")).get("stop_reason")
            finish = _FINISH.get(str(reason), str(reason or ""))
        if delta is None and finish is None:
            return False
        usage = self._note_usage(as_dict(chunk.get("usage")))
        choice = {"delta": delta or {}, "finish_reason": finish}
        return self._assembler.add_chunk({"choices": [choice], "usage": usage})

    def _delta(self, kind: object, chunk: Mapping[str, Any]) -> dict[str, Any] | None:
        index = chunk.get("index")
        if kind == "content_block_start":
            block = as_dict(chunk.get("content_block"))
            if block.get("type") != "tool_use":
                return None
            function = {"name": block.get("name"), "arguments": ""}
            return {"tool_calls": [{"index": index, "id": block.get("id"), "function": function}]}
        if kind != "content_block_delta":
            return None
        delta = as_dict(chunk.get("delta"))
        if delta.get("type") == "text_delta":
            return {"content": delta.get("text")}
        if delta.get("type") == "thinking_delta":
            return {"reasoning": delta.get("thinking")}
        if delta.get("type") == "input_json_delta":
            function = {"arguments": delta.get("partial_json")}
            return {"tool_calls": [{"index": index, "function": function}]}
        return None

    def event(self, event: bytes, chunk: Mapping[str, Any]) -> bytes:
        return event

    def done(self, event: bytes) -> bytes:
        return event

    def end(self) -> bytes:
        return b""

    def error_body(self, message: str, status: int) -> bytes:
        return anthropic_error(message, status)

    def stream_error(self, message: str, status: int) -> bytes:
        return anthropic_stream_error(message, status)
