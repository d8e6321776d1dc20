"""The fake upstream's standalone mode: one pre-rendered reply, served as fast as possible.

Benchmarks need an upstream that costs next to nothing, so the proxy's share of the
machine is what gets measured. Every `POST .../chat/completions` gets the same reply,
rendered once at start-up exactly as `FakeUpstream` would render it for a request asking
for logprobs (top 1), token ids (`return_token_ids`, with `prompt_tokens` prompt ids) and
stream usage. A body containing `"stream":true` (compact JSON, as orjson and the proxy
write it) or `"stream": true` (Python's json.dumps, as OpenEnv's proxy writes it) gets the
SSE form, one write per event; anything else the unary form. The
request is not parsed and the key is not checked. Run it with
`python -m testing.fakes.llm_upstream` (see there).
"""

from __future__ import annotations

import asyncio
from typing import cast

import httptools
import orjson

from testing.fakes.llm_dialects import (
    messages_body,
    messages_events,
    responses_body,
    responses_events,
)
from testing.fakes.llm_replies import RenderOptions, Reply, stream_chunks, tokens_of, unary_body

__all__ = ["FastUpstreamProtocol", "render", "render_dialects"]


def render(text: str, prompt_tokens: int) -> tuple[bytes, list[bytes]]:
    """(unary response, SSE response events) for `text`, whole HTTP messages included."""
    reply = Reply(text=text)
    options = RenderOptions(
        model="fake-model",
        prompt_ids=[100 + i % 30000 for i in range(prompt_tokens)],
        logprobs=True,
        top_k=1,
        return_token_ids=True,
        include_usage=True,
    )
    tokens = tokens_of(reply)
    body = orjson.dumps(unary_body(reply, options, tokens))
    events = [
        b"data: " + orjson.dumps(chunk) + b"\n\n" for chunk in stream_chunks(reply, options, tokens)
    ]
    events.append(b"data: [DONE]\n\n")
    return _http(body, events)


def _http(body: bytes, events: list[bytes]) -> tuple[bytes, list[bytes]]:
    """A unary response with `body`, and a chunked SSE response of `events`."""
    unary = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
        len(body),
        body,
    )
    head = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    chunked = [b"%x\r\n%s\r\n" % (len(event), event) for event in events]
    return unary, [head + chunked[0], *chunked[1:], b"0\r\n\r\n"]


def render_dialects(text: str, prompt_tokens: int) -> dict[bytes, tuple[bytes, list[bytes]]]:
    """vLLM's native `/v1/messages` and `/v1/responses` answers for `text` (whole HTTP
    messages), by path suffix: what `FastUpstreamProtocol` serves on those paths."""
    reply = Reply(text=text)
    tokens = tokens_of(reply)
    request = {"input": "x", "include": ["message.output_text.logprobs"], "top_logprobs": 1}
    return {
        b"/messages": _http(
            messages_body(reply, "fake-model", tokens, prompt_tokens),
            list(messages_events(reply, "fake-model", tokens, prompt_tokens)),
        ),
        b"/responses": _http(
            responses_body(reply, "fake-model", tokens, request),
            list(responses_events(reply, "fake-model", tokens, request)),
        ),
    }


class FastUpstreamProtocol(asyncio.Protocol):
    """One connection of the fast fake upstream. `dialects` (`render_dialects`) answer
    paths ending in their key; every other POST gets the chat-completions reply."""

    def __init__(
        self,
        unary: bytes,
        stream: list[bytes],
        dialects: dict[bytes, tuple[bytes, list[bytes]]] | None = None,
    ) -> None:
        self._unary, self._stream = unary, stream
        self._dialects = dialects or {}
        self._parser = httptools.HttpRequestParser(self)
        self._body: list[bytes] = []
        self._url = b""
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError:
            if self._transport is not None:
                self._transport.close()

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def _answer(self) -> tuple[bytes, list[bytes]]:
        for suffix, answer in self._dialects.items():
            if self._url.endswith(suffix):
                return answer
        return self._unary, self._stream

    def on_message_complete(self) -> None:
        body, self._body = b"".join(self._body), []
        unary, stream = self._answer()
        self._url = b""
        if self._transport is None:
            return
        if self._parser.get_method() == b"GET":
            models = b'{"object":"list","data":[{"id":"fake-model","object":"model"}]}'
            self._transport.write(
                b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(models), models)
            )
        elif b'"stream":true' in body or b'"stream": true' in body:
            for event in stream:
                self._transport.write(event)
        else:
            self._transport.write(unary)
