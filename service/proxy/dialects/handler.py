"""Serve one Responses or Messages call on a route, translated or native.

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

import weakref
from dataclasses import dataclass
from typing import Any

import orjson

from service.errors import DialectRequestError
from service.models import Dialect, DialectMode
from service.proxy.capture.codec import Codec
from service.proxy.capture.failures import error_body
from service.proxy.capture.relay import relay
from service.proxy.capture.request_parse import RequestParser
from service.proxy.capture.rewrite import rewrite_request, upstream_headers
from service.proxy.capture.route import Exchange, Route
from service.proxy.dialects.count_tokens import count_tokens
from service.proxy.dialects.messages_in import ArgumentsMemory, ConversionMemo, messages_to_chat
from service.proxy.dialects.messages_out import MessagesCodec, anthropic_error
from service.proxy.dialects.native_messages import NativeMessagesCodec, rewrite_messages
from service.proxy.dialects.native_responses import NativeResponsesCodec, rewrite_responses
from service.proxy.dialects.responses_in import responses_to_chat
from service.proxy.dialects.responses_out import ResponsesCodec
from service.proxy.transport.httpserver import HttpRequest, Responder
from service.proxy.transport.upstream import UpstreamPool, UpstreamTarget

__all__ = ["COUNT_TOKENS", "DialectCall", "serve_dialect"]

COUNT_TOKENS = "messages/count_tokens"
_ANTHROPIC_VERSION = "2023-06-01"


@dataclass(frozen=True)
class DialectCall:
    """One request on a route, and how to reach the upstream."""

    route: Route
    request: HttpRequest
    responder: Responder
    pool: UpstreamPool
    timeout_s: float


class _RouteState:
    """What a route keeps for its dialect calls: upstream targets, tool-call arguments."""

    def __init__(self, route: Route) -> None:
        self.memory = ArgumentsMemory()
        self.memo = ConversionMemo()
        self.parsers = {
            Dialect.MESSAGES: RequestParser("messages"),
            Dialect.RESPONSES: RequestParser("input"),
        }
        """Parse each dialect's requests reusing what the previous one had (`request_parse`)."""
        self._targets: dict[str, UpstreamTarget] = {}
        self._route = weakref.ref(route)

    def target(self, url: str, *, anthropic: bool = False) -> UpstreamTarget:
        target = self._targets.get(url)
        route = self._route()
        if target is None and route is not None:
            headers = upstream_headers(route.upstream)
            if anthropic:
                headers["anthropic-version"] = _ANTHROPIC_VERSION
                if route.upstream.api_key:
                    headers["x-api-key"] = route.upstream.api_key
            target = self._targets[url] = UpstreamTarget(url, headers)
        assert target is not None
        return target


_STATES: weakref.WeakKeyDictionary[Route, _RouteState] = weakref.WeakKeyDictionary()


def route_state(route: Route) -> _RouteState:
    state = _STATES.get(route)
    if state is None:
        state = _STATES[route] = _RouteState(route)
    return state


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
    try:
        chat = _translate(dialect, body, route)
    except DialectRequestError as error:
        _refuse(call, dialect, body, error)
        return
    exchange = route.begin(chat, call.request.body)
    exchange.dialect, exchange.translated = dialect, True
    rewrite_request(chat, route.upstream, route.capture)
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
        rewrite_messages(body, route.upstream, route.capture)
        codec = NativeMessagesCodec(exchange.assembler)
        target = state.target(f"{route.upstream.base_url}/messages", anthropic=True)
    else:
        rewrite_responses(body, route.upstream, route.capture)
        codec = NativeResponsesCodec(exchange.assembler)
        target = state.target(f"{route.upstream.base_url}/responses")
    await route.run(
        exchange, _relay_native(call, exchange, dialect, body, agent_request, codec, target)
    )
