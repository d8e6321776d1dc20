"""A scripted OpenAI-compatible LLM upstream on loopback, speaking the real wire format.

Stands in for the trainer's endpoint (vLLM, OpenAI, ...) in tests and benchmarks.

    from testing.fakes.llm_upstream import FakeUpstream, Reply, ToolCallReply, TokenShape, has_tools

    async with FakeUpstream(api_key="sk-test") as upstream:
        upstream.base_url                   # "http://127.0.0.1:<port>/v1"
        upstream.script(
            Reply(tool_calls=[ToolCallReply("write", '{"path": "a.txt", "content": "hi"}')]),
            Reply(text="All done."),
            match=has_tools,                # only requests with tools take these (not titles)
        )
        ...                                 # point the proxy / agent at upstream.base_url
        upstream.requests                   # list[RecordedRequest]: path, headers, body, raw
        upstream.sent                       # list[SentReply]: ids and logprobs each reply carried

Routes: `POST /v1/chat/completions` (unary, or SSE with `stream: true`; a usage chunk when
`stream_options.include_usage`; then `data: [DONE]`) and `GET /v1/models`; vLLM's native
`POST /v1/messages` and `/v1/responses`, `POST /v1/messages/count_tokens` and `POST
/tokenize` (`testing.fakes.llm_dialects`: the same script, faults `status`,
`close_after_chunks`, `stream_error_after_chunks` and `hold_after_first`).

Script: `script(*replies, match=None)` appends to a queue. A request takes the next reply
of the first queue (in the order queues were created) whose `match(body)` is true, the
`match=None` queue last. With every matching queue empty it answers
`Reply(text=default_text)`, so a real agent ends its loop. `await wait_for_requests(n)`
returns once n requests have arrived (a held call is in flight from then on).

Token data: each reply is cut into deterministic word-sized tokens with ids and
logprobs (`testing.fakes.llm_replies.tokens_of`). Logprobs are sent only when the request
has `logprobs: true` (`top_logprobs` alternatives per token). Ids follow `Reply.shape`
(`TokenShape`): VLLM (top-level `prompt_token_ids` + choice `token_ids`, only when the
request asks `return_token_ids: true`), LOGPROB_TOKEN_ID (a `token_id` key per logprob
entry), TOKEN_ID_STRINGS (tokens spelled `token_id:N`), NONE.

Faults (fields of `Reply`): `status` (error JSON with that status), `delay_s`, `garbage`
(malformed JSON body or SSE event), `close_after_chunks` (drop the connection; 0 = before
any response), `stream_error_after_chunks` (in-band SSE error), `hold_after_first` (stream
pauses after the first chunk until `release()`), `hold` (chat completions: no answer at all
until `release()`); `headers` (extra response headers); what real servers (llama.cpp) do:
`omit_finish_reason` (the stream ends with `[DONE]` and no finish reason), `ping_then_close`
(`: ping` comments, then the end of the body), `tool_call_logprobs=False` (`"logprobs": null`
on tool-call output), `usage=False` (no usage, whatever the request asks).

TLS: with `tls` (a server SSLContext) it serves https at `https://localhost:<port>/v1`.

Auth: with `api_key` set, a request without `Authorization: Bearer <api_key>` gets 401
(it is still recorded).

Standalone (benchmarks): `python -m testing.fakes.llm_upstream --port 0 [--text ...]
[--prompt-tokens N]` prints its base URL on stdout once listening and answers every request
with one pre-rendered reply (chat completions; native Messages and Responses on their
paths), as cheaply as possible (`testing.fakes.llm_upstream_fast`);
it runs until SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import orjson
from aiohttp import web

from testing.fakes.llm_dialects import (
    messages_body,
    messages_events,
    responses_body,
    responses_events,
    stream_failure,
    token_count,
)
from testing.fakes.llm_replies import (
    RenderOptions,
    Reply,
    SentReply,
    Token,
    TokenShape,
    ToolCallReply,
    prompt_ids_of,
    stream_chunks,
    tokens_of,
    unary_body,
)
from testing.fakes.llm_upstream_fast import FastUpstreamProtocol, render, render_dialects

__all__ = [
    "FakeUpstream",
    "Matcher",
    "RecordedRequest",
    "Reply",
    "SentReply",
    "TokenShape",
    "ToolCallReply",
    "has_tools",
]

Matcher = Callable[[Mapping[str, Any]], bool]
"""Chooses which requests a script queue answers, from the request JSON body."""


def has_tools(body: Mapping[str, Any]) -> bool:
    """Matches agent-loop requests (they carry tool schemas; title calls do not)."""
    return bool(body.get("tools"))


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the fake received it."""

    method: str
    path: str
    headers: dict[str, str]
    """Header names lower-cased."""
    body: dict[str, Any] | None
    raw: bytes


def _error(status: int, message: str) -> web.Response:
    body = {"error": {"message": message, "type": "fake_error", "param": None, "code": status}}
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json")


class FakeUpstream:
    """The scripted server; use as an async context manager (or `start()` / `stop()`)."""

    def __init__(
        self,
        *,
        api_key: str = "",
        model: str = "fake-model",
        default_text: str = "Done.",
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.api_key = api_key
        self.model = model
        self.default_text = default_text
        self.tls = tls
        self.requests: list[RecordedRequest] = []
        self.sent: list[SentReply] = []
        self._queues: list[tuple[Matcher | None, list[Reply]]] = []
        self._released = asyncio.Event()
        self._arrived = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        """The API root; https (on "localhost", the name a test certificate carries) with `tls`."""
        if self.tls is not None:
            return f"https://localhost:{self.port}/v1"
        return f"http://127.0.0.1:{self.port}/v1"

    def script(self, *replies: Reply, match: Matcher | None = None) -> None:
        """Queue replies for requests that `match` (None: any request)."""
        for queued_match, queue in self._queues:
            if queued_match is match:
                queue.extend(replies)
                return
        self._queues.append((match, list(replies)))
        self._queues.sort(key=lambda entry: entry[0] is None)

    def release(self) -> None:
        """Let calls held by `Reply(hold=True)` or `Reply(hold_after_first=True)` continue."""
        self._released.set()

    async def wait_for_requests(self, count: int) -> None:
        """Return once `count` requests have arrived."""
        while len(self.requests) < count:
            self._arrived.clear()
            await self._arrived.wait()

    async def start(self, port: int = 0) -> None:
        app = web.Application(client_max_size=256 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/messages", self._native)
        app.router.add_post("/v1/responses", self._native)
        app.router.add_post("/v1/messages/count_tokens", self._count)
        app.router.add_post("/tokenize", self._count)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port, ssl_context=self.tls)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        if self._runner is not None:
            self.release()
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeUpstream:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    def _next_reply(self, body: Mapping[str, Any]) -> Reply:
        for match, queue in self._queues:
            if queue and (match is None or match(body)):
                return queue.pop(0)
        return Reply(text=self.default_text)

    def _authorized(self, request: web.Request) -> bool:
        """Bearer auth; Anthropic's `x-api-key` as well on its paths."""
        if not self.api_key:
            return True
        bearer = request.headers.get("Authorization") == f"Bearer {self.api_key}"
        if request.path.startswith("/v1/messages"):
            return bearer and request.headers.get("x-api-key") == self.api_key
        return bearer

    async def _read(self, request: web.Request) -> dict[str, Any] | web.Response:
        """The request's JSON object, recorded; or the error response to give."""
        raw = await request.read()
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            body = None
        self._remember(request, raw, body if isinstance(body, dict) else None)
        if not isinstance(body, dict):
            return _error(400, "request body is not a JSON object")
        if not self._authorized(request):
            return _error(401, "invalid api key")
        return body

    async def _count(self, request: web.Request) -> web.Response:
        """vLLM's `/tokenize` (chat form) and Anthropic's `count_tokens`."""
        body = await self._read(request)
        if isinstance(body, web.Response):
            return body
        count = token_count(body.get("messages"))
        if request.path == "/tokenize":
            return web.json_response({"count": count, "max_model_len": 32768, "tokens": []})
        return web.json_response({"input_tokens": count})

    async def _native(self, request: web.Request) -> web.StreamResponse:
        """vLLM's native `/v1/messages` and `/v1/responses` (`testing.fakes.llm_dialects`)."""
        body = await self._read(request)
        if isinstance(body, web.Response):
            return body
        reply = self._next_reply(body)
        if reply.status >= 300:
            return _error(reply.status, reply.error_message)
        tokens = tokens_of(reply)
        self.sent.append(
            SentReply(
                [],
                [t.id for t in tokens],
                [t.logprob for t in tokens],
                reply.shape,
                False,
                False,
                tokens,
            )
        )
        model = str(body.get("model") or self.model)
        messages = request.path == "/v1/messages"
        prompt = token_count(body.get("messages"))
        if not body.get("stream"):
            rendered = (
                messages_body(reply, model, tokens, prompt)
                if messages
                else responses_body(reply, model, tokens, body)
            )
            return web.Response(body=rendered, content_type="application/json")
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        events = (
            messages_events(reply, model, tokens, prompt)
            if messages
            else responses_events(reply, model, tokens, body)
        )
        for count, event in enumerate(events, start=1):
            await response.write(event)
            if count == reply.close_after_chunks:
                return await _drop(request)
            if count == reply.stream_error_after_chunks:
                await response.write(stream_failure(messages, reply.error_message))
                break
            if count == 1 and reply.hold_after_first:
                await self._released.wait()
        await response.write_eof()
        return response

    async def _models(self, request: web.Request) -> web.Response:
        self._remember(request, b"", None)
        if not self._authorized(request):
            return _error(401, "invalid api key")
        data = [{"id": self.model, "object": "model", "owned_by": "fake"}]
        return web.json_response({"object": "list", "data": data})

    def _remember(self, request: web.Request, raw: bytes, body: dict[str, Any] | None) -> None:
        headers = {k.lower(): v for k, v in request.headers.items()}
        self.requests.append(RecordedRequest(request.method, request.path, headers, body, raw))
        self._arrived.set()

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            self._remember(request, raw, None)
            return _error(400, "request body is not JSON")
        self._remember(request, raw, body)
        if not self._authorized(request):
            return _error(401, "invalid api key")
        reply = self._next_reply(body)
        if reply.delay_s:
            await asyncio.sleep(reply.delay_s)
        if reply.hold:
            await self._released.wait()
        if reply.status >= 300:
            return _error(reply.status, reply.error_message)
        options = _options(body, self.model)
        tokens = tokens_of(reply)
        self._note_sent(reply, options, tokens)
        if reply.close_after_chunks == 0:
            return await _drop(request)
        if body.get("stream"):
            return await self._stream(request, reply, options, tokens)
        if reply.garbage:
            return web.Response(
                body=b'{"id": "chatcmpl-fake", "choices": [', content_type="application/json"
            )
        return web.Response(
            body=orjson.dumps(unary_body(reply, options, tokens)),
            content_type="application/json",
            headers=reply.headers,
        )

    def _note_sent(self, reply: Reply, options: RenderOptions, tokens: list[Token]) -> None:
        vllm_ids = reply.shape is TokenShape.VLLM and options.return_token_ids
        ids_sent = vllm_ids or (
            options.logprobs
            and reply.shape is not TokenShape.VLLM
            and reply.shape is not TokenShape.NONE
        )
        self.sent.append(
            SentReply(
                prompt_token_ids=options.prompt_ids if vllm_ids else [],
                completion_token_ids=[t.id for t in tokens],
                logprobs=[t.logprob for t in tokens],
                shape=reply.shape,
                ids_sent=ids_sent,
                logprobs_sent=options.logprobs,
                tokens=tokens,
            )
        )

    async def _stream(
        self, request: web.Request, reply: Reply, options: RenderOptions, tokens: list[Token]
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
            | reply.headers
        )
        await response.prepare(request)
        if reply.ping_then_close:
            await response.write(b": ping\n\n: ping\n\n")
            await response.write_eof()
            return response
        for count, chunk in enumerate(stream_chunks(reply, options, tokens), start=1):
            await response.write(b"data: " + orjson.dumps(chunk) + b"\n\n")
            if count == reply.close_after_chunks:
                return await _drop(request)
            if count == reply.stream_error_after_chunks:
                error = {
                    "error": {"message": reply.error_message, "type": "fake_error", "code": 500}
                }
                await response.write(b"data: " + orjson.dumps(error) + b"\n\n")
                break
            if count == 1 and reply.garbage:
                await response.write(b"data: {this is not json\n\n")
            if count == 1 and reply.hold_after_first:
                await self._released.wait()
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


async def _drop(request: web.Request) -> web.StreamResponse:
    """Close the connection abruptly, mid-response if one was started."""
    transport = request.transport
    if transport is not None:
        transport.abort()
    # aiohttp needs a response object; the connection is gone, so it goes nowhere.
    return web.Response(status=500)


def _options(body: Mapping[str, Any], model: str) -> RenderOptions:
    stream_options = body.get("stream_options") or {}
    messages = body.get("messages") or []
    return RenderOptions(
        model=str(body.get("model") or model),
        prompt_ids=prompt_ids_of(messages),
        logprobs=bool(body.get("logprobs")),
        top_k=max(1, int(body.get("top_logprobs") or 1)),
        return_token_ids=bool(body.get("return_token_ids")),
        include_usage=bool(stream_options.get("include_usage")),
    )


async def _serve(args: argparse.Namespace) -> None:
    unary, stream = render(args.text, args.prompt_tokens)
    dialects = render_dialects(args.text, args.prompt_tokens)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: FastUpstreamProtocol(unary, stream, dialects), "127.0.0.1", args.port, backlog=1024
    )
    print(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="Fake OpenAI-compatible upstream for benchmarks: one pre-rendered reply "
        "(see testing.fakes.llm_upstream_fast)."
    )
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--text", default="Done.", help="text of every reply")
    parser.add_argument("--prompt-tokens", type=int, default=64, help="prompt ids in each reply")
    args = parser.parse_args(argv)
    try:
        import uvloop
    except ImportError:
        asyncio.run(_serve(args))
    else:
        uvloop.run(_serve(args))


if __name__ == "__main__":
    main()
