"""The proxy's core: the routes, the upstream pool, the request handler.

A route is reached one of two ways, and only one:
- through a Unix socket of its own (`open_socket_route`), bound where one sandbox alone
  can see it: the socket is the sandbox's identity, no secret is involved, and the route
  is not in the token table, so no other client reaches it whatever it knows;
- over the shared TCP listener by its unguessable token (`open_route`), for sandboxes that
  cannot have a socket (remote ones reaching `proxy_public_url`; the standalone proxy).

Paths (a socket route takes them without the `/r/<token>` prefix):

    POST /r/<token>/v1/chat/completions   relayed upstream, recorded as a turn
    POST /r/<token>/v1/responses          OpenAI Responses, translated or native
    POST /r/<token>/v1/messages           Anthropic Messages, translated or native
    POST /r/<token>/v1/messages/count_tokens  counted upstream; an untrainable turn
    GET  /r/<token>/v1/models             answered locally: the aliases and the real model

Anything else, and any unknown token, is an OpenAI-style 404. Request headers are never
read (the agent's Authorization carries at most its route token) and never forwarded.
Every listener bounds its connections and their idle time (`connections`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import secrets
import time
import weakref
from collections.abc import Callable
from pathlib import Path

import orjson

from service.listen_address import host_and_port, host_port
from service.models import CaptureSpec
from service.proxy.capture.failures import error_body
from service.proxy.capture.record import RecordBounds
from service.proxy.capture.relay import relay
from service.proxy.capture.rewrite import AUX_MODEL_ALIAS, MAIN_MODEL_ALIAS, rewrite_request
from service.proxy.capture.route import OnTurn, Route
from service.proxy.dialects import DIALECT_ENDPOINTS, DialectCall, serve_dialect
from service.proxy.endpoints import ResolvedEndpoint
from service.proxy.transport.connections import ConnectionLimit
from service.proxy.transport.httpserver import Handler, HttpRequest, HttpServerProtocol, Responder
from service.proxy.transport.unix_socket import bind_unix
from service.proxy.transport.upstream import UpstreamPool

__all__ = ["ConnectionBounds", "ProxyCore", "base_url", "split_listen"]

_DEFAULT_MAX_REQUEST_BYTES = 64 * 1024 * 1024
_NOT_FOUND = error_body("no such route", status=404, kind="invalid_request_error")
_BAD_REQUEST = error_body(
    "request body must be a JSON object with a messages list",
    status=400,
    kind="invalid_request_error",
)


def split_listen(listen: str) -> tuple[str, int]:
    """HOST:PORT (an IPv6 host in brackets; no host is 127.0.0.1) as host and port."""
    parsed = host_and_port(listen)
    if parsed is None:
        raise ValueError(f"expected HOST:PORT, got {listen!r}")
    return parsed[0] or "127.0.0.1", parsed[1]


def base_url(host: str, port: int) -> str:
    """The URL of the TCP listener at host and port (an IPv6 host in brackets)."""
    return f"http://{host_port(host, port)}"


class ConnectionBounds:
    """How many connections a listener admits at once, and how long one may idle."""

    def __init__(
        self, *, per_socket_route: int = 64, tcp: int = 1024, idle_timeout_s: float = 60.0
    ) -> None:
        self.per_socket_route = per_socket_route
        """Connections one sandbox may hold on its own route socket."""
        self.tcp = tcp
        """Connections all clients together may hold on the shared TCP listener."""
        self.idle_timeout_s = idle_timeout_s
        """A connection must deliver a whole request within this of becoming idle."""


class _SocketListener:
    """A socket route's own listener and the connections it admitted."""

    def __init__(self, server: asyncio.Server, path: Path, limit: ConnectionLimit) -> None:
        self.server, self.path, self.limit = server, path, limit

    def close(self) -> None:
        self.server.close()
        self.limit.close_all()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


class ProxyCore:
    """Routes and their handler. `serve_*()` to listen, `close()` at the end."""

    def __init__(
        self,
        *,
        upstream_timeout_s: float,
        max_request_bytes: int = _DEFAULT_MAX_REQUEST_BYTES,
        bounds: ConnectionBounds | None = None,
        record: RecordBounds | None = None,
        version_header: str = "",
    ) -> None:
        self.upstream_timeout_s = upstream_timeout_s
        self.record = record or RecordBounds()
        """How much of its calls' bodies each route's turns record (`capture.record`)."""
        self._max_request_bytes = max_request_bytes
        self.bounds = bounds or ConnectionBounds()
        self._routes: dict[str, Route] = {}
        self._listeners: dict[int, _SocketListener] = {}
        """Socket routes' listeners, by id of the route."""
        self._pool = UpstreamPool(version_header=version_header)
        """Upstream connections; each response's `version_header` is its weight version."""
        self._servers: list[asyncio.Server] = []
        self.tcp_connections = ConnectionLimit(self.bounds.tcp)
        self._connections: weakref.WeakSet[HttpServerProtocol] = weakref.WeakSet()

    def _factory(
        self, handler: Handler, limit: ConnectionLimit
    ) -> Callable[[], HttpServerProtocol]:
        def protocol() -> HttpServerProtocol:
            made = HttpServerProtocol(
                handler,
                self._max_request_bytes,
                connections=limit,
                idle_timeout_s=self.bounds.idle_timeout_s,
            )
            self._connections.add(made)
            return made

        return protocol

    async def serve_tcp(self, host: str, port: int) -> int:
        """Listen on TCP for token routes; returns the bound port (for port 0)."""
        server = await asyncio.get_running_loop().create_server(
            self._factory(self._handle, self.tcp_connections), host, port, backlog=1024
        )
        self._servers.append(server)
        return int(server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        """Stop listening, cancel calls in flight, close upstream connections."""
        for server in self._servers:
            server.close()
        for route in list(self._routes.values()):
            self.close_route(route)
        for listener in list(self._listeners.values()):
            listener.close()
        self._listeners.clear()
        for connection in list(self._connections):
            connection.close()
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
        """A new token route with an unguessable token (or `token`, for a standalone proxy);
        `keep_turns=False` when `on_turn` is the only consumer (turns are not retained)."""
        token = token or secrets.token_urlsafe(32)
        route = Route(
            token, rollout_id, upstream, capture, on_turn, keep_turns=keep_turns, bounds=self.record
        )
        if route.token in self._routes:
            raise ValueError("route token already in use")
        self._routes[route.token] = route
        return route

    async def open_socket_route(
        self,
        rollout_id: str,
        upstream: ResolvedEndpoint,
        capture: CaptureSpec,
        on_turn: OnTurn,
        socket_path: Path,
    ) -> Route:
        """A route served only on a new Unix socket at `socket_path` (in a directory one
        sandbox alone sees); it has no token and the TCP listener does not know it."""
        route = Route("", rollout_id, upstream, capture, on_turn, bounds=self.record)
        limit = ConnectionLimit(self.bounds.per_socket_route)
        handler = functools.partial(self._handle_socket_route, route)
        sock = bind_unix(socket_path)
        try:
            server = await asyncio.get_running_loop().create_unix_server(
                self._factory(handler, limit), sock=sock
            )
        except BaseException:
            sock.close()
            raise
        self._listeners[id(route)] = _SocketListener(server, socket_path, limit)
        return route

    def socket_connections(self, route: Route) -> ConnectionLimit | None:
        """The connections open on a socket route (None for a token route)."""
        listener = self._listeners.get(id(route))
        return None if listener is None else listener.limit

    def close_route(self, route: Route) -> None:
        """Stop serving a route: new requests get 404 (a socket route's socket is gone),
        calls in flight are cancelled."""
        self._routes.pop(route.token, None)
        listener = self._listeners.pop(id(route), None)
        if listener is not None:
            listener.close()
        route.closed = True
        for task in list(route.tasks):
            task.cancel()

    async def _handle(self, request: HttpRequest, responder: Responder) -> None:
        parts = request.path.split("/")
        # ["", "r", token, "v1", endpoint...]
        route = self._routes.get(parts[2]) if len(parts) >= 5 and parts[1] == "r" else None
        if route is None:
            responder.send(404, _NOT_FOUND)
            return
        await self._dispatch(route, request, "/".join(parts[4:]), responder)

    async def _handle_socket_route(
        self, route: Route, request: HttpRequest, responder: Responder
    ) -> None:
        parts = request.path.split("/")
        # ["", "v1", endpoint...]
        if len(parts) < 3 or parts[1] != "v1" or route.closed:
            responder.send(404, _NOT_FOUND)
            return
        await self._dispatch(route, request, "/".join(parts[2:]), responder)

    async def _dispatch(
        self, route: Route, request: HttpRequest, endpoint: str, responder: Responder
    ) -> None:
        if request.method == "POST" and endpoint == "chat/completions":
            await self._chat(route, request, responder)
        elif request.method == "POST" and endpoint in DIALECT_ENDPOINTS:
            call = DialectCall(route, request, responder, self._pool, self.upstream_timeout_s)
            await serve_dialect(call, endpoint)
        elif request.method == "GET" and endpoint == "models":
            responder.send(200, _models(route))
        else:
            responder.send(404, _NOT_FOUND)

    async def _chat(self, route: Route, request: HttpRequest, responder: Responder) -> None:
        body = route.parser.parse(request.body)
        if body is None:
            responder.send(400, _BAD_REQUEST)
            return
        exchange = route.begin(body, request.body)
        exchange.agent_reads_ids = body.get("return_token_ids") is True
        exchange.note_rewritten(body, rewrite_request(body, route.upstream, route.capture))
        payload = orjson.dumps(body)
        await route.run(
            exchange, relay(responder, exchange, payload, self._pool, self.upstream_timeout_s)
        )


def _models(route: Route) -> bytes:
    created = int(time.time())
    names = dict.fromkeys((MAIN_MODEL_ALIAS, AUX_MODEL_ALIAS, route.upstream.model))
    data = [{"id": n, "object": "model", "created": created, "owned_by": "rollout"} for n in names]
    return orjson.dumps({"object": "list", "data": data})
