"""Relay one model call upstream and back, assembling its turn on the side.

The request JSON is parsed once (reusing the route's already parsed messages and tools:
`request_parse`), rewritten and serialised once; what is new in it since the previous
call is worked out after the response has been forwarded. Responses are never
re-serialised: a unary body is forwarded as received (after checking it parses), and a
stream is forwarded event by event as each SSE event completes. What reaches the agent is
scrubbed of the request's API key (a server may echo it in an error or, as any text, in
a completion), body by body and event by event; the turn is scrubbed again once
assembled (`record`), which also catches a key split across events. What the agent gets
is its codec's (`codec`): chat completions byte for byte (less the prompt's token ids,
asked for the turn, unless the agent asked for them too), or another dialect. Every call
passes the route's gate (`gate`): it waits there while the route's calls are paused, and is
sent again, invisibly, when a pause aborted it before it answered.
"""

from __future__ import annotations

import asyncio

import orjson

from service.proxy.capture.codec import ChatCodec, Codec
from service.proxy.capture.failures import transport_failure, upstream_error_message
from service.proxy.capture.prompt_ids import cut_prompt_ids, cut_span, prompt_ids_span
from service.proxy.capture.route import Exchange
from service.proxy.transport.httpserver import Responder
from service.proxy.transport.sse import DONE, SseSplitter, event_data
from service.proxy.transport.upstream import (
    UpstreamConnectionError,
    UpstreamPool,
    UpstreamResponse,
    UpstreamTarget,
    UpstreamUnreachable,
)

__all__ = ["relay"]

_AGENT_GONE = "the agent disconnected mid-response"
_PROMPT_IDS_KEY = b'"prompt_token_ids"'
_NO_FINISH = "upstream ended the response without a finish reason"
_CUT_SHORT = "upstream ended the stream before it finished"
_STALE = "not sent: it would start beyond the rollout's max_policy_lag (the rollout ends)"


async def relay(
    responder: Responder,
    exchange: Exchange,
    payload: bytes,
    pool: UpstreamPool,
    timeout_s: float,
    *,
    codec: Codec | None = None,
    target: UpstreamTarget | None = None,
) -> None:
    """Send `payload` upstream (the route's chat-completions target unless `target`) once
    the route's gate lets it, and answer the agent through `codec` (chat completions as they
    are unless given); failures land on `exchange`."""
    chosen = codec or ChatCodec(exchange.assembler)
    gate = exchange.route.gate
    try:
        sent = await gate.run(
            lambda: _relay_once(responder, exchange, payload, pool, timeout_s, chosen, target),
            lambda: responder.started,
            exchange.start_attempt,
        )
    finally:
        exchange.end_attempt(gate.version)
    if not sent:
        exchange.fail(_STALE, upstream=False)
        _send_failure(responder, exchange, chosen, 503)


async def _relay_once(
    responder: Responder,
    exchange: Exchange,
    payload: bytes,
    pool: UpstreamPool,
    timeout_s: float,
    codec: Codec,
    target: UpstreamTarget | None,
) -> None:
    try:
        async with asyncio.timeout(timeout_s):
            request = pool.request(target or exchange.route.target, payload)
            async with request as response:
                exchange.upstream_status = response.status
                exchange.upstream_weight_version = response.weight_version
                if (
                    response.status < 300
                    and exchange.stream
                    and response.content_type == "text/event-stream"
                ):
                    await _relay_stream(responder, exchange, response, codec)
                    return
                body = await response.read()
    except (TimeoutError, UpstreamConnectionError) as exc:
        status, message = transport_failure(exc, timeout_s)
        exchange.unreachable = isinstance(exc, UpstreamUnreachable)
        if 200 <= exchange.upstream_status < 300:
            exchange.cut_short(f"{message}: the response was cut short")
        else:
            exchange.fail(message)
        _send_failure(responder, exchange, codec, status)
        return
    except ConnectionResetError:
        exchange.fail(_AGENT_GONE, upstream=False)
        return
    if response.status >= 300:
        exchange.fail(upstream_error_message(response.status, body))
        _send_failure(responder, exchange, codec, response.status)
    else:
        _relay_unary(responder, exchange, body, codec)


def _send_failure(responder: Responder, exchange: Exchange, codec: Codec, status: int) -> None:
    """The failure in the agent's dialect: a JSON error, or an SSE error event mid-stream."""
    try:
        if responder.started:
            responder.write(codec.stream_error(exchange.error, status))
            responder.end()
        else:
            responder.send(status, codec.error_body(exchange.error, status))
    except ConnectionResetError:
        pass  # the agent left too; the failure is already on the turn


def _relay_unary(responder: Responder, exchange: Exchange, body: bytes, codec: Codec) -> None:
    span = prompt_ids_span(body)
    rest, exchange.assembler.prompt_raw = cut_span(body, span)
    try:
        doc = orjson.loads(rest)
    except orjson.JSONDecodeError:
        doc = None
    if not isinstance(doc, dict):
        exchange.cut_short(f"upstream sent malformed JSON ({len(body)} bytes): cut short?")
        _send_failure(responder, exchange, codec, 502)
        return
    if doc.get("error") is not None:  # a Responses body has `"error": null`
        exchange.fail(upstream_error_message(exchange.upstream_status, body))
        _send_failure(responder, exchange, codec, 502)
        return
    sent, sent_span = (body, span) if exchange.agent_reads_ids else (rest, None)
    try:
        out = codec.unary_body(sent, doc)
        # The ids are scrubbed by their first byte only when they are the bytes sent.
        responder.send(200, exchange.scrub_bytes(out, sent_span if out is sent else None))
    except ConnectionResetError:
        exchange.fail(_AGENT_GONE, upstream=False)
    codec.add_unary(doc)
    if not exchange.assembler.finish_reason:
        exchange.cut_short(_NO_FINISH)


class _StreamState:
    """How far a relayed stream got."""

    def __init__(self) -> None:
        self.done = False
        self.failure = ""
        self.cut_short = False
        """The failure is a stream that ended before its completion finished."""


async def _relay_stream(
    responder: Responder, exchange: Exchange, response: UpstreamResponse, codec: Codec
) -> None:
    # What is already here goes out in one write: the head with the first events when they
    # came with it (a fast upstream's do), and the events of every piece already received
    # (a piece is an event as the upstream wrote it). Each write is a syscall and a wake-up
    # of the agent; the head is held no longer than the bytes already here.
    responder.start_stream(hold=response.buffered)
    state = _StreamState()
    splitter = SseSplitter()
    out: list[bytes] = []
    async for data in response.iter_chunks():
        _take_events(responder, exchange, codec, splitter.feed(data), state, out)
        if state.done or state.failure:
            break
        if response.buffered:
            continue
        if out:
            responder.write(*out)
            out.clear()
            await responder.drain()
        else:
            responder.flush()
    responder.write(*out)
    if not state.done and not state.failure:
        # A stream that finished (or reported its own error) without [DONE] is completed here.
        if exchange.assembler.finish_reason or exchange.assembler.error:
            responder.write(exchange.scrub_bytes(codec.end()))
        else:
            state.failure, state.cut_short = _CUT_SHORT, True
    if state.cut_short:
        exchange.cut_short(state.failure)
    elif state.failure:
        exchange.fail(state.failure)
    if state.failure:
        _send_failure(responder, exchange, codec, 502)
    responder.end()


def _take_events(
    responder: Responder,
    exchange: Exchange,
    codec: Codec,
    events: list[bytes],
    state: _StreamState,
    out: list[bytes],
) -> None:
    """Add the raw bytes of the events to forward to `out`; feeds each parsed chunk to the
    assembler. `out` is written at once with the first generated token, not after the rest
    of what arrived is checked: a fast upstream's whole reply can arrive in one read."""
    for event in events:
        data = event_data(event)
        if data == DONE and not (exchange.assembler.finish_reason or exchange.assembler.error):
            # [DONE] without a finish reason is a cut-short stream: the agent gets an error.
            state.failure, state.cut_short = _NO_FINISH, True
            break
        if data == DONE:
            state.done = True
            event = exchange.scrub_bytes(codec.done(event))
        elif data:
            if _PROMPT_IDS_KEY in data:
                data, exchange.assembler.prompt_raw = cut_prompt_ids(data)
                if not exchange.agent_reads_ids:
                    event = cut_prompt_ids(event)[0]
            try:
                chunk = orjson.loads(data)
            except orjson.JSONDecodeError:
                chunk = None
            if not isinstance(chunk, dict):
                state.failure = f"upstream sent a malformed SSE event ({len(data)} bytes)"
                break
            if codec.add_chunk(chunk) and exchange.first_token_s is None:
                exchange.mark_first_token()
                out.append(exchange.scrub_bytes(codec.event(event, chunk)))
                responder.write(*out)
                out.clear()
                continue
            # Errors (an OpenAI `error`, Anthropic's error event, a Responses
            # `response.failed`) and any text may echo the request's key.
            event = exchange.scrub_bytes(codec.event(event, chunk))
        out.append(event)
        if state.done:
            break
