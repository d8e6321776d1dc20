"""The proxy's core: routes by per-rollout token, the upstream pool, the request handler.

Where it listens is the caller's choice: `server.CaptureProxy` serves it on TCP and a Unix
socket inside the service, `standalone` on TCP as its own process. Paths:

    POST /r/<token>/v1/chat/completions   relayed upstream, recorded as a turn
    GET  /r/<token>/v1/models             answered locally: the aliases and the real model

Anything else, and any unknown token, is an OpenAI-style 404. Request headers are never
read (the agent's Authorization carries only its route token) and never forwarded.
"""

from __future__ import annotations

import asyncio
import secrets
import socket
import time
import weakref

import orjson

from service.models import CaptureSpec
from service.proxy.endpoints import ResolvedEndpoint
from service.proxy.failures import error_body
from service.proxy.httpserver import HttpRequest, HttpServerProtocol, Responder
from service.proxy.relay import relay
from service.proxy.rewrite import AUX_MODEL_ALIAS, MAIN_MODEL_ALIAS, rewrite_request
from service.proxy.route import OnTurn, Route
from service.proxy.upstream import UpstreamPool

__all__ = ["ProxyCore"]

_DEFAULT_MAX_REQUEST_BYTES = 64 * 1024 * 1024
_NOT_FOUND = error_body("no such route", status=404, kind="invalid_request_error")
_BAD_REQUEST = error_body(
    "request body must be a JSON object with a messages list",
    status=400,
    kind="invalid_request_error",
)


class ProxyCore:
    """Token -> route table and its handler. `serve_*()` to listen, `close()` at the end."""

    def __init__(
        self, *, upstream_timeout_s: float, max_request_bytes: int = _DEFAULT_MAX_REQUEST_BYTES
    ) -> None:
        self.upstream_timeout_s = upstream_timeout_s
        self._max_request_bytes = max_request_bytes
        self._routes: dict[str, Route] = {}
        self._pool = UpstreamPool()
        self._servers: list[asyncio.Server] = []
        self._connections: weakref.WeakSet[HttpServerProtocol] = weakref.WeakSet()

    def _protocol(self) -> HttpServerProtocol:
        protocol = HttpServerProtocol(self._handle, self._max_request_bytes)
        self._connections.add(protocol)
        return protocol

    async def serve_tcp(self, host: str, port: int) -> int:
        """Listen on TCP; returns the bound port (for port 0)."""
        server = await asyncio.get_running_loop().create_server(
            self._protocol, host, port, backlog=1024
        )
        self._servers.append(server)
        return int(server.sockets[0].getsockname()[1])

    async def serve_unix(self, sock: socket.socket) -> None:
        """Listen on an already bound Unix socket."""
        server = await asyncio.get_running_loop().create_unix_server(self._protocol, sock=sock)
        self._servers.append(server)

    async def close(self) -> None:
        """Stop listening, cancel calls in flight, close upstream connections."""
        for server in self._servers:
            server.close()
        for route in list(self._routes.values()):
            self.close_route(route)
        for connection in list(self._connections):
            if connection.transport is not None:
                connection.transport.close()
        for server in self._servers:
            await server.wait_closed()
        self._servers.clear()
        await self._pool.close()

    def open_route(
        self,
        rollout_id: str,
        upstream: ResolvedEndpoint,
        capture: CaptureSpec,
        on_turn: OnTurn,
        *,
        token: str | None = None,
        keep_turns: bool = True,
    ) -> Route:
        """A new route with an unguessable token (or `token`, for a standalone proxy);
        `keep_turns=False` when `on_turn` is the only consumer (turns are not retained)."""
        token = token or secrets.token_urlsafe(32)
        route = Route(token, rollout_id, upstream, capture, on_turn, keep_turns=keep_turns)
        if route.token in self._routes:
            raise ValueError("route token already in use")
        self._routes[route.token] = route
        return route

    def close_route(self, route: Route) -> None:
        """Stop serving a route: new requests get 404, calls in flight are cancelled."""
        self._routes.pop(route.token, None)
        route.closed = True
        for task in list(route.tasks):
            task.cancel()

    async def _handle(self, request: HttpRequest, responder: Responder) -> None:
        parts = request.path.split("/")
        # ["", "r", token, "v1", endpoint...]
        route = self._routes.get(parts[2]) if len(parts) >= 5 and parts[1] == "r" else None
        endpoint = "/".join(parts[4:]) if route is not None else ""
        if route is not None and request.method == "POST" and endpoint == "chat/completions":
            await self._chat(route, request, responder)
        elif route is not None and request.method == "GET" and endpoint == "models":
            responder.send(200, _models(route))
        else:
            responder.send(404, _NOT_FOUND)

    async def _chat(self, route: Route, request: HttpRequest, responder: Responder) -> None:
        body = route.parser.parse(request.body)
        if body is None:
            responder.send(400, _BAD_REQUEST)
            return
        exchange = route.begin(body, request.body)
        rewrite_request(body, route.upstream, route.capture)
        task = asyncio.current_task()
        assert task is not None
        route.tasks.add(task)
        try:
            await relay(
                responder, exchange, orjson.dumps(body), self._pool, self.upstream_timeout_s
            )
        except asyncio.CancelledError:
            exchange.fail("the agent disconnected (or the route closed) mid-call", upstream=False)
            raise
        finally:
            route.tasks.discard(task)
            route.complete(exchange)


def _models(route: Route) -> bytes:
    created = int(time.time())
    names = dict.fromkeys((MAIN_MODEL_ALIAS, AUX_MODEL_ALIAS, route.upstream.model))
    data = [{"id": n, "object": "model", "created": created, "owned_by": "rollout"} for n in names]
    return orjson.dumps({"object": "list", "data": data})
