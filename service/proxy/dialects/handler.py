"""Serve one Responses or Messages call on a route, translated or native.

Either way the agent's sampling fields are stripped first (`capture.sampling`, named as
in its dialect on the turn).
translated (the default): the request becomes chat completions (`*_in`), gets the chat
rules of `rewrite` (model, logprobs, `return_token_ids`, caps, thinking), goes to the
route's chat-completions URL, and the answer comes back in the agent's dialect (`*_out`).
native: the request keeps its dialect, gets that dialect's rules (`native_*`), goes to
`<base_url>/responses` or `<base_url>/messages`, and the answer is forwarded as is.
Either way the turn records the request in chat-completions form (when it translates)
and the completion read from the answer; the agent's headers are never read, and the
upstream gets the route's key (`Authorization`, plus `x-api-key` for Messages).
"""

from __future__ import annotations

from typing import Any

import orjson

from service.errors import DialectRequestError
from service.models import Dialect, DialectMode
from service.proxy.capture.codec import Codec
from service.proxy.capture.failures import error_body
from service.proxy.capture.relay import relay
from service.proxy.capture.rewrite import rewrite_request
from service.proxy.capture.route import Exchange, Route
from service.proxy.capture.sampling import strip_agent_sampling
from service.proxy.dialects.call import DialectCall, route_state
from service.proxy.dialects.count_tokens import count_tokens
from service.proxy.dialects.messages_in import messages_to_chat
from service.proxy.dialects.messages_out import MessagesCodec, anthropic_error
from service.proxy.dialects.native_messages import NativeMessagesCodec, rewrite_messages
from service.proxy.dialects.native_responses import NativeResponsesCodec, rewrite_responses
from service.proxy.dialects.responses_in import responses_to_chat
from service.proxy.dialects.responses_out import ResponsesCodec
from service.proxy.transport.upstream import UpstreamTarget

__all__ = ["COUNT_TOKENS", "serve_dialect"]

COUNT_TOKENS = "messages/count_tokens"


def dialect_error(dialect: Dialect, message: str, status: int) -> bytes:
    """An error body in the agent's dialect."""
    if dialect is Dialect.MESSAGES:
        return anthropic_error(message, status)
    return error_body(message, status=status, kind="invalid_request_error")


def _translate(dialect: Dialect, body: dict[str, Any], route: Route) -> dict[str, Any]:
    if dialect is Dialect.MESSAGES:
        state = route_state(route)
        self_hosted = route.upstream.asks_token_ids
        return messages_to_chat(body, state.memory, self_hosted=self_hosted, memo=state.memo)
    return responses_to_chat(body)


def _refuse(call: DialectCall, dialect: Dialect, body: object, error: DialectRequestError) -> None:
    """Answer 400 naming the field, and record the call as an unparsed, failed turn."""
    model = body.get("model") if isinstance(body, dict) else None
    exchange = call.route.begin({"model": model, "messages": None}, call.request.body)
    exchange.dialect, exchange.translated = dialect, True
    exchange.fail(f"cannot translate the request: {error}", upstream=False)
    call.route.complete(exchange)
    call.responder.send(400, dialect_error(dialect, str(error), 400))


async def serve_dialect(call: DialectCall, endpoint: str) -> None:
    """Answer one Responses, Messages or count_tokens request."""
    dialect = Dialect.MESSAGES if endpoint.startswith("messages") else Dialect.RESPONSES
    body = _parse(call, dialect, endpoint)
    if not isinstance(body, dict):
        message = "request body must be a JSON object"
        call.responder.send(400, dialect_error(dialect, message, 400))
        return
    if endpoint == COUNT_TOKENS:
        await count_tokens(call, body, route_state(call.route))
    elif call.route.upstream.dialect_mode is DialectMode.NATIVE:
        await _native(call, dialect, body)
    else:
        await _translated(call, dialect, body)


def _parse(call: DialectCall, dialect: Dialect, endpoint: str) -> object:
    """The request's JSON; a conversation request through the route's parser for it."""
    if endpoint != COUNT_TOKENS:
        body = route_state(call.route).parsers[dialect].parse(call.request.body)
        if body is not None:
            return body
    try:
        return orjson.loads(call.request.body)
    except orjson.JSONDecodeError:
        return None


async def _translated(call: DialectCall, dialect: Dialect, body: dict[str, Any]) -> None:
    route = call.route
    stripped = strip_agent_sampling(body, dialect)  # named as the agent sent them
    try:
        chat = _translate(dialect, body, route)
    except DialectRequestError as error:
        _refuse(call, dialect, body, error)
        return
    exchange = route.begin(chat, call.request.body)
    exchange.dialect, exchange.translated = dialect, True
    stripped += rewrite_request(chat, route.upstream, route.capture)
    exchange.note_rewritten(chat, stripped)
    codec: Codec
    if dialect is Dialect.MESSAGES:
        model = str(body.get("model") or "")
        memory = route_state(route).memory
        codec = MessagesCodec(exchange.assembler, model, memory, exchange.scrub)
    else:
        codec = ResponsesCodec(exchange.assembler, body, exchange.scrub)
    payload = orjson.dumps(chat)
    await route.run(
        exchange, relay(call.responder, exchange, payload, call.pool, call.timeout_s, codec=codec)
    )


def _record_chat_form(
    call: DialectCall, exchange: Exchange, dialect: Dialect, body: dict[str, Any]
) -> None:
    """Record a native call's request in chat form (unparsed when it does not translate)."""
    try:
        chat = _translate(dialect, body, call.route)
    except DialectRequestError:
        exchange.mark_unparsed(call.request.body)
        return
    tools = chat.get("tools", [])
    exchange.record_request(chat["messages"], tools)


async def _relay_native(
    call: DialectCall,
    exchange: Exchange,
    dialect: Dialect,
    body: dict[str, Any],
    agent_request: dict[str, Any],
    codec: Codec,
    target: UpstreamTarget,
) -> None:
    payload = orjson.dumps(body)
    try:
        await relay(
            call.responder, exchange, payload, call.pool, call.timeout_s, codec=codec, target=target
        )
    finally:
        _record_chat_form(call, exchange, dialect, agent_request)


async def _native(call: DialectCall, dialect: Dialect, body: dict[str, Any]) -> None:
    route = call.route
    exchange = route.begin(
        {"model": body.get("model"), "stream": body.get("stream"), "messages": []},
        call.request.body,
    )
    exchange.dialect = dialect
    state = route_state(route)
    agent_request = dict(body)
    codec: Codec
    if dialect is Dialect.MESSAGES:
        stripped = rewrite_messages(body, route.upstream, route.capture)
        codec = NativeMessagesCodec(exchange.assembler)
        target = state.target(f"{route.upstream.base_url}/messages", anthropic=True)
    else:
        stripped = rewrite_responses(body, route.upstream, route.capture)
        codec = NativeResponsesCodec(exchange.assembler)
        target = state.target(f"{route.upstream.base_url}/responses")
    exchange.note_rewritten(body, stripped)
    await route.run(
        exchange, _relay_native(call, exchange, dialect, body, agent_request, codec, target)
    )
