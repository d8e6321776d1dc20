"""Anthropic's `POST /v1/messages/count_tokens`, which claude-code calls to size its context.

translated: the request becomes chat messages and tools (as for `/v1/messages`) and is
counted by the upstream's own tokenizer and chat template, vLLM's `POST /tokenize` beside
its API root (`<base_url minus /v1>/tokenize` -> `{"count": N}`); the agent gets
`{"input_tokens": N}`. native: forwarded to `<base_url>/messages/count_tokens` as is.
Either way the call is a turn marked untrainable (`Exchange.side_call`): no trainer
learns from a count, and its failure never makes a rollout an infrastructure failure.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from service.errors import DialectRequestError
from service.models import Dialect, DialectMode
from service.proxy.capture.failures import transport_failure, upstream_error_message
from service.proxy.capture.route import Exchange
from service.proxy.dialects.call import DialectCall, RouteState
from service.proxy.dialects.messages_in import messages_to_chat
from service.proxy.dialects.messages_out import anthropic_error
from service.proxy.transport.upstream import UpstreamConnectionError

__all__ = ["count_tokens"]


def _tokenize_request(body: dict[str, Any], call: DialectCall, state: RouteState) -> dict[str, Any]:
    upstream = call.route.upstream
    chat = messages_to_chat(body, state.memory, self_hosted=upstream.asks_token_ids)
    request = {"model": upstream.model, "messages": chat["messages"], "add_generation_prompt": True}
    if chat.get("tools"):
        request["tools"] = chat["tools"]
    return request


def _root(base_url: str) -> str:
    return base_url.removesuffix("/v1")


async def count_tokens(call: DialectCall, body: dict[str, Any], state: RouteState) -> None:
    """Count a Messages request's input tokens upstream; record it as an untrainable turn."""
    route = call.route
    native = route.upstream.dialect_mode is DialectMode.NATIVE
    try:
        chat = messages_to_chat({**body, "stream": False}, state.memory, self_hosted=True)
        payload = body if native else _tokenize_request(body, call, state)
    except DialectRequestError as error:
        call.responder.send(400, anthropic_error(str(error), 400))
        return
    exchange = route.begin(chat, call.request.body)
    exchange.dialect, exchange.translated, exchange.side_call = Dialect.MESSAGES, not native, True
    if native:
        payload["model"] = route.upstream.model
        target = state.target(f"{route.upstream.base_url}/messages/count_tokens", anthropic=True)
    else:
        target = state.target(f"{_root(route.upstream.base_url)}/tokenize")
    await route.run(exchange, _count(call, exchange, target, orjson.dumps(payload), native))


async def _count(
    call: DialectCall, exchange: Exchange, target: Any, payload: bytes, native: bool
) -> None:
    try:
        async with asyncio.timeout(call.timeout_s):
            async with call.pool.request(target, payload) as response:
                exchange.upstream_status = response.status
                body = await response.read()
    except (TimeoutError, UpstreamConnectionError) as exc:
        status, message = transport_failure(exc, call.timeout_s)
        exchange.fail(message)
        call.responder.send(status, anthropic_error(exchange.error, status))
        return
    count = _count_of(body, native) if response.status < 300 else None
    if count is None:
        exchange.fail(upstream_error_message(response.status, body))
        status = response.status if response.status >= 300 else 502
        call.responder.send(status, anthropic_error(exchange.error, status))
        return
    exchange.assembler.add_completion({"usage": {"prompt_tokens": count, "total_tokens": count}})
    call.responder.send(200, orjson.dumps({"input_tokens": count}))


def _count_of(body: bytes, native: bool) -> int | None:
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    count = doc.get("input_tokens" if native else "count") if isinstance(doc, dict) else None
    return count if type(count) is int else None
