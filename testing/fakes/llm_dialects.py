"""Scripted replies as vLLM's native `/v1/messages` and `/v1/responses` send them.

The shapes are built with the vendors' own types (`anthropic.types`, `openai.types`), so
the fake cannot drift from the wire: a Messages body is an `anthropic.types.Message`, each
stream event a `RawMessageStreamEvent` member, a Responses body an `openai` `Response`.
Token data as vLLM gives it: Messages carries none (usage only); Responses carries
output_text logprobs when the request includes `message.output_text.logprobs` (tokens
spelled by `Reply.shape`, e.g. `token_id:N`), nothing for tool calls or reasoning.
Also vLLM's `POST /tokenize` (chat form) and `POST /v1/messages/count_tokens`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import orjson
from anthropic import types as anthropic_types
from openai.types import responses as openai_types

from testing.fakes.llm_replies import Reply, Token, _call_id, _logprob_entry, prompt_ids_of

__all__ = [
    "messages_body",
    "messages_events",
    "responses_body",
    "responses_events",
    "stream_failure",
    "token_count",
]

_STOP = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def token_count(messages: object) -> int:
    """What the fake's tokenizer counts for a prompt (one id per message, as for chat)."""
    return len(prompt_ids_of(messages if isinstance(messages, list) else []))


def _sse(kind: str, data: Any) -> bytes:
    return b"event: %s\ndata: %s\n\n" % (kind.encode(), data.model_dump_json().encode())


def _blocks(reply: Reply) -> list[Any]:
    blocks: list[Any] = []
    if reply.reasoning:
        blocks.append(
            anthropic_types.ThinkingBlock(
                type="thinking", thinking=reply.reasoning, signature="sig"
            )
        )
    if reply.text:
        blocks.append(anthropic_types.TextBlock(type="text", text=reply.text))
    for index, call in enumerate(reply.tool_calls):
        blocks.append(
            anthropic_types.ToolUseBlock(
                type="tool_use",
                id=_call_id(reply, index),
                name=call.name,
                input=orjson.loads(call.arguments),
            )
        )
    return blocks


def _message(
    reply: Reply, model: str, content: list[Any], usage: tuple[int, int], stop: str | None
) -> anthropic_types.Message:
    return anthropic_types.Message(
        id="msg_fake",
        type="message",
        role="assistant",
        model=model,
        content=content,
        stop_reason=stop,  # type: ignore[arg-type]
        stop_sequence=None,
        usage=anthropic_types.Usage(input_tokens=usage[0], output_tokens=usage[1]),
    )


def messages_body(reply: Reply, model: str, tokens: list[Token], input_tokens: int) -> bytes:
    stop = _STOP.get(reply.finish or "stop", "end_turn")
    message = _message(reply, model, _blocks(reply), (input_tokens, len(tokens)), stop)
    return message.model_dump_json().encode()


def messages_events(
    reply: Reply, model: str, tokens: list[Token], input_tokens: int
) -> Iterator[bytes]:
    """message_start, each block's start / deltas / stop, message_delta, message_stop."""
    start = anthropic_types.RawMessageStartEvent(
        type="message_start", message=_message(reply, model, [], (input_tokens, 0), None)
    )
    yield _sse("message_start", start)
    index, kind = -1, ""
    for token in tokens:
        if token.kind != kind:
            if index >= 0:
                yield _sse(
                    "content_block_stop",
                    anthropic_types.RawContentBlockStopEvent(
                        type="content_block_stop", index=index
                    ),
                )
            index, kind = index + 1, token.kind
            yield _sse("content_block_start", _block_start(reply, index, kind))
            if kind.startswith("tool:"):
                continue  # the name token is in the block's start
        yield _sse("content_block_delta", _block_delta(index, kind, token.text))
    if index >= 0:
        yield _sse(
            "content_block_stop",
            anthropic_types.RawContentBlockStopEvent(type="content_block_stop", index=index),
        )
    stop = _STOP.get(reply.finish or "stop", "end_turn")
    delta = anthropic_types.RawMessageDeltaEvent(
        type="message_delta",
        delta={"stop_reason": stop, "stop_sequence": None},  # type: ignore[arg-type]
        usage=anthropic_types.MessageDeltaUsage(
            output_tokens=len(tokens), input_tokens=input_tokens
        ),
    )
    yield _sse("message_delta", delta)
    yield _sse("message_stop", anthropic_types.RawMessageStopEvent(type="message_stop"))


def _block_start(reply: Reply, index: int, kind: str) -> anthropic_types.RawContentBlockStartEvent:
    block: Any
    if kind == "reasoning":
        block = anthropic_types.ThinkingBlock(type="thinking", thinking="", signature="")
    elif kind == "content":
        block = anthropic_types.TextBlock(type="text", text="")
    else:
        number = int(kind.split(":")[1])
        name = reply.tool_calls[number].name
        block = anthropic_types.ToolUseBlock(
            type="tool_use", id=_call_id(reply, number), name=name, input={}
        )
    return anthropic_types.RawContentBlockStartEvent(
        type="content_block_start", index=index, content_block=block
    )


def _block_delta(index: int, kind: str, text: str) -> anthropic_types.RawContentBlockDeltaEvent:
    delta: Any
    if kind == "reasoning":
        delta = anthropic_types.ThinkingDelta(type="thinking_delta", thinking=text)
    elif kind == "content":
        delta = anthropic_types.TextDelta(type="text_delta", text=text)
    else:
        delta = anthropic_types.InputJSONDelta(type="input_json_delta", partial_json=text)
    return anthropic_types.RawContentBlockDeltaEvent(
        type="content_block_delta", index=index, delta=delta
    )


def _logprobs(
    reply: Reply, tokens: list[Token], request: Mapping[str, Any]
) -> list[dict[str, Any]]:
    include = request.get("include") or []
    if "message.output_text.logprobs" not in include:
        return []
    top_k = int(request.get("top_logprobs") or 0)
    return [_logprob_entry(t, reply.shape, max(1, top_k)) for t in tokens if t.kind == "content"]


def _output(reply: Reply, tokens: list[Token], request: Mapping[str, Any]) -> list[dict[str, Any]]:
    output: list[dict[str, Any]] = []
    if reply.reasoning:
        content = [{"type": "reasoning_text", "text": reply.reasoning}]
        output.append({"type": "reasoning", "id": "rs_fake", "summary": [], "content": content})
    if reply.text:
        text = {
            "type": "output_text",
            "text": reply.text,
            "annotations": [],
            "logprobs": _logprobs(reply, tokens, request),
        }
        output.append(
            {
                "type": "message",
                "id": "msg_fake",
                "role": "assistant",
                "status": "completed",
                "content": [text],
            }
        )
    for index, call in enumerate(reply.tool_calls):
        output.append(
            {
                "type": "function_call",
                "id": f"fc_{index}",
                "call_id": _call_id(reply, index),
                "name": call.name,
                "arguments": call.arguments,
                "status": "completed",
            }
        )
    return output


def _response(
    reply: Reply, model: str, tokens: list[Token], request: Mapping[str, Any], done: bool
) -> openai_types.Response:
    prompt = token_count(
        request.get("input") if isinstance(request.get("input"), list) else [request.get("input")]
    )
    usage = {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": len(tokens),
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt + len(tokens),
    }
    status = ("incomplete" if reply.finish == "length" else "completed") if done else "in_progress"
    return openai_types.Response.model_validate(
        {
            "id": "resp_fake",
            "object": "response",
            "created_at": 0,
            "model": model,
            "status": status,
            "output": _output(reply, tokens, request) if done else [],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": usage if done else None,
        }
    )


def responses_body(
    reply: Reply, model: str, tokens: list[Token], request: Mapping[str, Any]
) -> bytes:
    return _response(reply, model, tokens, request, done=True).model_dump_json().encode()


def responses_events(
    reply: Reply, model: str, tokens: list[Token], request: Mapping[str, Any]
) -> Iterator[bytes]:
    """created, then per item added / deltas / done, then completed (sequence numbered)."""
    sequence = iter(range(10_000))

    def event(kind: str, **data: Any) -> bytes:
        payload = {"type": kind, "sequence_number": next(sequence), **data}
        return b"event: %s\ndata: %s\n\n" % (kind.encode(), orjson.dumps(payload))

    yield event(
        "response.created", response=_response(reply, model, tokens, request, False).model_dump()
    )
    final = _response(reply, model, tokens, request, True)
    logprobs = iter(_logprobs(reply, tokens, request))
    for output_index, item in enumerate(final.output):
        yield event(
            "response.output_item.added",
            output_index=output_index,
            item={**item.model_dump(), "content": []}
            if item.type != "function_call"
            else {**item.model_dump(), "arguments": ""},
        )
        where = {"item_id": item.id, "output_index": output_index}
        if item.type == "message":
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            yield event("response.content_part.added", **where, content_index=0, part=part)
            for token in (t for t in tokens if t.kind == "content"):
                entry = next(logprobs, None)
                yield event(
                    "response.output_text.delta",
                    **where,
                    content_index=0,
                    delta=token.text,
                    logprobs=[entry] if entry else [],
                )
            done = item.content[0].model_dump()
            yield event(
                "response.output_text.done",
                **where,
                content_index=0,
                text=done["text"],
                logprobs=done["logprobs"],
            )
            yield event("response.content_part.done", **where, content_index=0, part=done)
        elif item.type == "reasoning":
            for token in (t for t in tokens if t.kind == "reasoning"):
                yield event(
                    "response.reasoning_text.delta", **where, content_index=0, delta=token.text
                )
        elif item.type == "function_call":
            index = int(str(item.id).split("_")[1])
            for token in [t for t in tokens if t.kind == f"tool:{index}"][1:]:
                yield event("response.function_call_arguments.delta", **where, delta=token.text)
        yield event("response.output_item.done", output_index=output_index, item=item.model_dump())
    kind = "response.incomplete" if final.status == "incomplete" else "response.completed"
    yield event(kind, response=final.model_dump())


def stream_failure(messages: bool, message: str) -> bytes:
    """How each dialect fails mid-stream: Anthropic's `error` event, Responses'
    `response.failed` (the response with its `error`)."""
    if messages:
        error = {"type": "error", "error": {"type": "api_error", "message": message}}
        return b"event: error\ndata: %s\n\n" % orjson.dumps(error)
    failed = {
        "type": "response.failed",
        "sequence_number": 999,
        "response": {
            "id": "resp_fake",
            "status": "failed",
            "error": {"code": "server_error", "message": message},
        },
    }
    return b"event: response.failed\ndata: %s\n\n" % orjson.dumps(failed)
