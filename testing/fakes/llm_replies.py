"""Scripted replies of the fake LLM upstream and how they render on the wire.

A `Reply` is one completion the fake will send: text, reasoning and tool calls,
plus faults. It is cut into deterministic tokens (`tokens_of`), each with an id
and a log-probability, and rendered as an OpenAI chat completion (`unary_body`)
or as SSE chunks (`stream_chunks`) carrying the ids in the requested
`TokenShape`. See `testing.fakes.llm_upstream` for the server and its API.
"""

from __future__ import annotations

import re
import time
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

__all__ = [
    "Reply",
    "SentReply",
    "Token",
    "TokenShape",
    "ToolCallReply",
    "prompt_ids_of",
    "stream_chunks",
    "tokens_of",
    "unary_body",
]

_PIECE = re.compile(r"\s*\S+|\s+")


class TokenShape(StrEnum):
    """Where the upstream puts token ids (the shapes vLLM and compatible servers use)."""

    VLLM = "vllm"
    """Top-level `prompt_token_ids` + choice `token_ids`; only when the request asks
    `return_token_ids: true`, as vLLM does."""
    LOGPROB_TOKEN_ID = "logprob_token_id"
    """Each logprob entry carries a `token_id` key."""
    TOKEN_ID_STRINGS = "token_id_strings"
    """Tokens spelled `token_id:N` (vLLM `--return-tokens-as-token-ids`)."""
    NONE = "none"
    """No ids anywhere (hosted APIs)."""


@dataclass(frozen=True)
class ToolCallReply:
    """A function call in a scripted reply; `arguments` is the JSON text sent."""

    name: str
    arguments: str
    id: str = ""


@dataclass(frozen=True)
class Reply:
    """One scripted completion (or fault). Defaults give a plain successful reply."""

    text: str = ""
    reasoning: str = ""
    tool_calls: Sequence[ToolCallReply] = ()
    finish_reason: str | None = None
    """Default: "tool_calls" when there are tool calls, else "stop"."""
    shape: TokenShape = TokenShape.VLLM
    status: int = 200
    """Non-2xx: answer with an OpenAI-style error body and this status."""
    error_message: str = "scripted upstream error"
    delay_s: float = 0.0
    """Sleep before answering (to trip timeouts)."""
    garbage: bool = False
    """Unary: a 200 body that is not JSON. Stream: a malformed `data:` event after chunk 1."""
    close_after_chunks: int | None = None
    """Drop the connection after this many SSE chunks (0 = before any response, unary too)."""
    hold_after_first: bool = False
    """Stream: stop after the first chunk until `FakeUpstream.release()` is called."""
    hold: bool = False
    """Chat completions: answer nothing until `FakeUpstream.release()` (a call in flight)."""
    headers: dict[str, str] = field(default_factory=dict)
    """Chat completions: extra response headers (e.g. a weight version)."""
    stream_error_after_chunks: int | None = None
    """Stream: send an in-band `data: {"error": ...}` event after this many chunks."""
    omit_finish_reason: bool = False
    """No finish reason anywhere: unary `finish_reason: null`; a stream's final chunk is left
    out and `data: [DONE]` follows the tokens (a server that cut its stream short)."""
    ping_then_close: bool = False
    """Stream: only `: ping` comments, then the end of the body (llama.cpp when the prompt
    exceeded its context)."""
    tool_call_logprobs: bool = True
    """False: tool-call output carries `"logprobs": null` (llama.cpp), other output keeps its."""
    usage: bool = True
    """False: no usage anywhere, whatever `stream_options.include_usage` asks (llama.cpp)."""
    token_chars: int = 0
    """Cut text tokens to at most this many characters (0: word-sized), so that one word
    arrives split across stream chunks."""

    @property
    def finish(self) -> str | None:
        if self.omit_finish_reason:
            return None
        return self.finish_reason or ("tool_calls" if self.tool_calls else "stop")

    def logprobs_of(self, token: Token) -> bool:
        """Whether this reply sends logprobs with `token` (when the request asks for them)."""
        return self.tool_call_logprobs or not token.kind.startswith("tool:")


@dataclass(frozen=True)
class Token:
    """One generated token as the fake sends it."""

    text: str
    id: int
    logprob: float
    kind: str
    """"reasoning", "content" or "tool:<index>" (the tool-call name token is its first)."""


@dataclass
class SentReply:
    """What one completion carried, for exact assertions on captured turns."""

    prompt_token_ids: list[int]
    completion_token_ids: list[int]
    logprobs: list[float]
    shape: TokenShape
    ids_sent: bool
    """Whether any id reached the wire (VLLM shape needs `return_token_ids`)."""
    logprobs_sent: bool
    tokens: list[Token] = field(default_factory=list)


def _token(piece: str, kind: str) -> Token:
    crc = zlib.crc32(f"{kind}|{piece}".encode())
    return Token(piece, 1000 + crc % 30000, -round(0.01 + (crc % 997) / 500, 4), kind)


def tokens_of(reply: Reply) -> list[Token]:
    """Deterministic tokens: word-sized pieces of reasoning, text and each tool call."""
    tokens = [_token(p, "reasoning") for p in _PIECE.findall(reply.reasoning)]
    tokens += [_token(p, "content") for p in _pieces(reply.text, reply.token_chars)]
    for index, call in enumerate(reply.tool_calls):
        kind = f"tool:{index}"
        tokens.append(_token(call.name, kind))
        tokens += [_token(p, kind) for p in _PIECE.findall(call.arguments)]
    return tokens


def _pieces(text: str, chars: int) -> list[str]:
    words = _PIECE.findall(text)
    if not chars:
        return words
    return [word[at : at + chars] for word in words for at in range(0, len(word), chars)]


def prompt_ids_of(messages: Sequence[Any]) -> list[int]:
    """One deterministic id per request message (enough to tell prompts apart)."""
    return [1 + zlib.crc32(repr(m).encode()) % 50000 for m in messages]


def _spell(token: Token, shape: TokenShape) -> dict[str, Any]:
    entry: dict[str, Any] = {"token": token.text, "logprob": token.logprob}
    if shape is TokenShape.TOKEN_ID_STRINGS:
        entry["token"] = f"token_id:{token.id}"
    elif shape is TokenShape.LOGPROB_TOKEN_ID:
        entry["token_id"] = token.id
    entry["bytes"] = list(entry["token"].encode())
    return entry


def _logprob_entry(token: Token, shape: TokenShape, top_k: int) -> dict[str, Any]:
    entry = _spell(token, shape)
    alternatives = [token] + [
        Token(f"alt{i}", token.id + i, token.logprob - i, token.kind) for i in range(1, top_k)
    ]
    entry["top_logprobs"] = [_spell(alt, shape) for alt in alternatives[:top_k]]
    return entry


def _call_id(reply: Reply, index: int) -> str:
    return reply.tool_calls[index].id or f"call_{index}_{reply.tool_calls[index].name}"


def _message(reply: Reply) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    if reply.reasoning:
        message["reasoning_content"] = reply.reasoning
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": _call_id(reply, i),
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments},
            }
            for i, c in enumerate(reply.tool_calls)
        ]
    return message


@dataclass(frozen=True)
class RenderOptions:
    """What the request asked for that changes the wire shape."""

    model: str
    prompt_ids: list[int]
    logprobs: bool
    top_k: int
    return_token_ids: bool
    include_usage: bool


def _usage(options: RenderOptions, tokens: list[Token]) -> dict[str, int]:
    prompt = len(options.prompt_ids)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": len(tokens),
        "total_tokens": prompt + len(tokens),
    }


def _vllm_ids(reply: Reply, options: RenderOptions) -> bool:
    return reply.shape is TokenShape.VLLM and options.return_token_ids


def unary_body(reply: Reply, options: RenderOptions, tokens: list[Token]) -> dict[str, Any]:
    """The chat.completion object for a unary request."""
    choice: dict[str, Any] = {"index": 0, "message": _message(reply), "finish_reason": reply.finish}
    choice["logprobs"] = (
        {"content": [_logprob_entry(t, reply.shape, options.top_k) for t in tokens]}
        if options.logprobs and all(reply.logprobs_of(t) for t in tokens)
        else None
    )
    body: dict[str, Any] = {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": options.model,
        "choices": [choice],
    }
    if reply.usage:
        body["usage"] = _usage(options, tokens)
    if _vllm_ids(reply, options):
        choice["token_ids"] = [t.id for t in tokens]
        body["prompt_token_ids"] = options.prompt_ids
    return body


def _delta(reply: Reply, token: Token, first_of_tool: bool) -> dict[str, Any]:
    if token.kind == "reasoning":
        return {"reasoning_content": token.text}
    if token.kind == "content":
        return {"content": token.text}
    index = int(token.kind.split(":")[1])
    if first_of_tool:
        call = {
            "index": index,
            "id": _call_id(reply, index),
            "type": "function",
            "function": {"name": token.text, "arguments": ""},
        }
    else:
        call = {"index": index, "function": {"arguments": token.text}}
    return {"tool_calls": [call]}


def _chunk(options: RenderOptions, choices: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": options.model,
        "choices": choices,
    }


def stream_chunks(
    reply: Reply, options: RenderOptions, tokens: list[Token]
) -> Iterator[dict[str, Any]]:
    """The chat.completion.chunk objects of a streamed reply, usage chunk included."""
    first = _chunk(options, [{"index": 0, "delta": {"role": "assistant", "content": ""}}])
    if _vllm_ids(reply, options):
        first["prompt_token_ids"] = options.prompt_ids
    yield first
    seen: set[str] = set()
    for token in tokens:
        choice: dict[str, Any] = {
            "index": 0,
            "delta": _delta(reply, token, token.kind not in seen),
            "finish_reason": None,
        }
        seen.add(token.kind)
        if options.logprobs and reply.logprobs_of(token):
            choice["logprobs"] = {"content": [_logprob_entry(token, reply.shape, options.top_k)]}
        elif options.logprobs:
            choice["logprobs"] = None
        if _vllm_ids(reply, options):
            choice["token_ids"] = [token.id]
        yield _chunk(options, [choice])
    if reply.finish is not None:
        yield _chunk(options, [{"index": 0, "delta": {}, "finish_reason": reply.finish}])
    if options.include_usage and reply.usage:
        yield {**_chunk(options, []), "usage": _usage(options, tokens)}
