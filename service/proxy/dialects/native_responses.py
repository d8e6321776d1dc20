"""Native OpenAI Responses: forwarded as is, read into the turn on the side.

What vLLM's `/v1/responses` returns, and where it lands on the turn:

    output_text text / response.output_text.delta     -> completion_text
    output_text logprobs [{token, logprob, top_logprobs}] (only with `include:
      ["message.output_text.logprobs"]` and `top_logprobs`, which the proxy asks for)
                                                       -> logprobs, completion_tokens,
                                                          top_logprobs (text only)
    tokens spelled `token_id:N` (`--return-tokens-as-token-ids`) -> completion_token_ids
    reasoning content / response.reasoning_text.delta  -> reasoning_text
    function_call (call_id, name, arguments)           -> tool_calls
    status incomplete / a function_call / completed    -> finish_reason length|tool_calls|stop
    usage.input_tokens / output_tokens                 -> usage.prompt_tokens / completion_tokens
    (no prompt token ids; function-call arguments carry no logprobs, so a turn with a
    tool call has logprobs_present false)

Rewrites: the agent's sampling fields stripped (`service.proxy.capture.sampling`);
`model`; `max_output_tokens` capped; the rollout's sampling set; the logprobs `include`
and `top_logprobs`; `disable_thinking` drops `reasoning` and, on a self-hosted upstream,
sets `chat_template_kwargs.enable_thinking = false`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from service.models import CaptureSpec, Dialect
from service.proxy.capture.assembly import CompletionAssembler
from service.proxy.capture.failures import error_body
from service.proxy.capture.json_shapes import as_dict
from service.proxy.capture.rewrite import cap_tokens, disable_template_thinking
from service.proxy.capture.sampling import apply_sampling, strip_agent_sampling
from service.proxy.endpoints import ResolvedEndpoint

__all__ = ["NativeResponsesCodec", "rewrite_responses"]

_LOGPROBS_INCLUDE = "message.output_text.logprobs"
_REASONING_DELTAS = ("response.reasoning_text.delta", "response.reasoning_summary_text.delta")


def rewrite_responses(
    body: dict[str, Any], upstream: ResolvedEndpoint, capture: CaptureSpec
) -> list[str]:
    """Model override, token cap, sampling, logprobs and thinking control on a native Responses
    request; the names of the agent's fields it stripped."""
    stripped = strip_agent_sampling(body, Dialect.RESPONSES)
    body["model"] = upstream.model
    if capture.max_tokens_cap > 0:
        cap_tokens(body, "max_output_tokens", capture.max_tokens_cap)
    apply_sampling(body, capture.sampling)
    include = body.get("include")
    include = include if isinstance(include, list) else []
    body["include"] = [*include, _LOGPROBS_INCLUDE] if _LOGPROBS_INCLUDE not in include else include
    body["top_logprobs"] = max(1, capture.top_logprobs)
    if capture.disable_thinking:
        body.pop("reasoning", None)
        if upstream.asks_token_ids:
            disable_template_thinking(body)
    return stripped


def _usage(usage: Mapping[str, Any]) -> dict[str, Any]:
    prompt, completion = usage.get("input_tokens"), usage.get("output_tokens")
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": usage.get("total_tokens"),
    }


def _finish(response: Mapping[str, Any], tool_called: bool) -> str:
    if response.get("status") == "incomplete":
        return "length"
    return "tool_calls" if tool_called else "stop"


class NativeResponsesCodec:
    """Reads OpenAI Responses answers into the turn; the agent gets them unchanged."""

    def __init__(self, assembler: CompletionAssembler) -> None:
        self._assembler = assembler
        self._tool_called = False

    def add_unary(self, doc: Mapping[str, Any]) -> None:
        text: list[str] = []
        reasoning: list[str] = []
        calls: list[dict[str, Any]] = []
        entries: list[Any] = []
        for item in doc.get("output") or []:
            item = as_dict(item)
            for part in item.get("content") or []:
                part = as_dict(part)
                if part.get("type") == "output_text" and isinstance(part.get("text"), str):
                    text.append(part["text"])
                    entries.extend(part.get("logprobs") or [])
                elif part.get("type") == "reasoning_text" and isinstance(part.get("text"), str):
                    reasoning.append(part["text"])
            if item.get("type") == "function_call":
                function = {"name": item.get("name"), "arguments": item.get("arguments")}
                calls.append({"id": item.get("call_id"), "function": function})
        message = {"content": "".join(text), "reasoning": "".join(reasoning), "tool_calls": calls}
        choice = {
            "message": message,
            "finish_reason": _finish(doc, bool(calls)),
            "logprobs": {"content": entries},
        }
        self._assembler.add_completion(
            {"choices": [choice], "usage": _usage(as_dict(doc.get("usage")))}
        )

    def unary_body(self, body: bytes, doc: Mapping[str, Any]) -> bytes:
        return body

    def add_chunk(self, chunk: Mapping[str, Any]) -> bool:
        kind = chunk.get("type")
        if kind == "error" or kind == "response.failed":
            error = as_dict(as_dict(chunk.get("response")).get("error")) or chunk
            self._assembler.error = str(error.get("message") or "the response failed")
            return False
        choice: dict[str, Any] = {"delta": {}}
        usage = None
        if kind == "response.output_text.delta":
            choice["delta"] = {"content": chunk.get("delta")}
            choice["logprobs"] = {"content": chunk.get("logprobs") or []}
        elif kind in _REASONING_DELTAS:
            choice["delta"] = {"reasoning": chunk.get("delta")}
        elif (
            kind == "response.output_item.added"
            and as_dict(chunk.get("item")).get("type") == "function_call"
        ):
            item = as_dict(chunk.get("item"))
            self._tool_called = True
            call = {
                "index": chunk.get("output_index"),
                "id": item.get("call_id"),
                "function": {"name": item.get("name"), "arguments": ""},
            }
            choice["delta"] = {"tool_calls": [call]}
        elif kind == "response.function_call_arguments.delta":
            call = {
                "index": chunk.get("output_index"),
                "function": {"arguments": chunk.get("delta")},
            }
            choice["delta"] = {"tool_calls": [call]}
        elif kind in ("response.completed", "response.incomplete"):
            response = as_dict(chunk.get("response"))
            choice["finish_reason"] = _finish(response, self._tool_called)
            usage = _usage(as_dict(response.get("usage")))
        else:
            return False
        return self._assembler.add_chunk({"choices": [choice], "usage": usage})

    def event(self, event: bytes, chunk: Mapping[str, Any]) -> bytes:
        return event

    def done(self, event: bytes) -> bytes:
        return event

    def end(self) -> bytes:
        return b""

    def error_body(self, message: str, status: int) -> bytes:
        return error_body(message, status=status)

    def stream_error(self, message: str, status: int) -> bytes:
        return b"event: error\ndata: " + error_body(message, status=status) + b"\n\n"
