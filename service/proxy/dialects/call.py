"""One dialect call on a route (`DialectCall`) and what the route keeps between its calls
(`RouteState`): shared by the handler and by count_tokens, which the handler dispatches to,
so neither imports the other for them.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

from service.models import Dialect
from service.proxy.capture.request_parse import RequestParser
from service.proxy.capture.rewrite import upstream_headers
from service.proxy.capture.route import Route
from service.proxy.dialects.messages_in import ArgumentsMemory, ConversionMemo
from service.proxy.transport.httpserver import HttpRequest, Responder
from service.proxy.transport.upstream import UpstreamPool, UpstreamTarget

__all__ = ["DialectCall", "RouteState", "route_state"]

_ANTHROPIC_VERSION = "2023-06-01"


@dataclass(frozen=True)
class DialectCall:
    """One request on a route, and how to reach the upstream."""

    route: Route
    request: HttpRequest
    responder: Responder
    pool: UpstreamPool
    timeout_s: float


class RouteState:
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
            target = self._targets[url] = UpstreamTarget(
                url, headers, private_ok=route.upstream.private_ok
            )
        assert target is not None
        return target


_STATES: weakref.WeakKeyDictionary[Route, RouteState] = weakref.WeakKeyDictionary()


def route_state(route: Route) -> RouteState:
    """The route's state, made at its first dialect call and gone with the route."""
    state = _STATES.get(route)
    if state is None:
        state = _STATES[route] = RouteState(route)
    return state
