"""The Prometheus endpoint (`metrics_listen`): the instruments' text, served on the server's
event loop by the capture proxy's HTTP/1.1 server (`proxy.transport.httpserver`).

    served              GET /metrics: the Prometheus text of `MetricsExport.registry`;
                        another path 404, another method 405
    TLS                 the API's (`transport.server_ssl_context`) when it has one, client
                        certificates required as the API requires them; a handshake runs
                        as a task of its own, bounded by the slow-request timeout, so that
                        one that stalls never holds the accepting up
    connections         at most 32 open at once (handshakes in progress among them),
                        accepted one at a time: one more is closed on arrival, its
                        descriptor freed before the next is accepted; no thread per
                        connection (a thread each let 3,000 half-open requests hold 3,000
                        threads and descriptors)
    slow requests       a connection must send a whole request within 10 s of opening or
                        of its last response, or it is closed (half-open ones too)
    Host header         must name this endpoint (`listen_address.names_listener`: its
                        address, localhost beside loopback, any IP address beside 0.0.0.0
                        or ::, a name of metrics_hosts): another name is 421, as a page
                        whose name was made to resolve here (DNS rebinding) sends; none 400
    token               with metrics_token_file, `authorization: Bearer <token>` of that
                        file, else 401: scrape tokens, not the API's, since without TLS
                        they travel in clear (they open this endpoint and nothing else)
    process figures     none: no process_* (memory, descriptors, start time), python_gc_*
                        or python_info; they describe the host to whoever scrapes, and no
                        panel reads them (target_info stays: the service name and the
                        OpenTelemetry SDK's version)

A scrape collects on the event loop: the instruments are a closed set of series, and reading
them takes no lock another task holds. The address rule (loopback, or allow_insecure_listen
or a scrape token) is `transport.check_metrics_exposure`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections.abc import Collection
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest

from service.api.auth import TokenTable, Unauthenticated, authenticate, load_token_file
from service.api.transport import server_ssl_context
from service.config import Settings
from service.errors import ConfigError
from service.listen_address import bind, ensure_free, names_listener
from service.proxy import ConnectionLimit, HttpRequest, HttpServerProtocol, Responder
from service.telemetry import metrics_address

__all__ = ["MetricsEndpoint"]

log = logging.getLogger(__name__)

_SETTING = "ROLLOUT_METRICS_LISTEN"
_MAX_CONNECTIONS = 32
_BACKLOG = 64
_ACCEPT_RETRY_S = 0.5
_IDLE_TIMEOUT_S = 10.0
_MAX_BODY_BYTES = 0
"""A scrape is a GET: a request with a body is refused (413)."""
_HEADERS = frozenset({b"host", b"authorization"})
_TEXT = b"text/plain; charset=utf-8"
_METRICS = CONTENT_TYPE_PLAIN_0_0_4.encode()


class MetricsEndpoint:
    """The Prometheus endpoint of one server, listening from `open` to `close`."""

    def __init__(
        self,
        registry: CollectorRegistry,
        host: str,
        names: Collection[str],
        tokens: TokenTable,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self._registry = registry
        self._host = host
        self._names = names
        self._tokens = tokens
        self._tls = tls
        self.connections = ConnectionLimit(_MAX_CONNECTIONS)
        self._handshakes: set[asyncio.Task[None]] = set()
        self._accepting: asyncio.Task[None] | None = None
        self.url = ""

    @classmethod
    async def open(
        cls, settings: Settings, registry: CollectorRegistry | None
    ) -> MetricsEndpoint | None:
        """Listening on metrics_listen (None when off); ConfigError for a port in use or a
        token file that cannot be read."""
        if registry is None:
            return None
        host, port = metrics_address(settings.metrics_listen)
        tokens = _scrape_tokens(settings)
        endpoint = cls(registry, host, settings.metrics_hosts, tokens, server_ssl_context(settings))
        await endpoint._listen(host, port)
        return endpoint

    async def _listen(self, host: str, port: int) -> None:
        ensure_free(f"[{host}]:{port}", _SETTING, "stop it or choose another port")
        listener = bind(host, port, _SETTING)
        listener.listen(_BACKLOG)
        listener.setblocking(False)
        self._accepting = asyncio.create_task(self._accept(listener))
        shown = f"[{host}]" if ":" in host else host
        scheme = "http" if self._tls is None else "https"
        self.url = f"{scheme}://{shown}:{listener.getsockname()[1]}/metrics"

    async def _accept(self, listener: socket.socket) -> None:
        """Accept one connection at a time, and close one over the bound before the next is
        accepted (asyncio's own server accepts a batch, and opens each before refusing it:
        a flood held a hundred descriptors more than the bound)."""
        loop = asyncio.get_running_loop()
        with listener:
            while True:
                try:
                    connection, _ = await loop.sock_accept(listener)
                except OSError as exc:  # out of descriptors: the next round may find one
                    log.warning("the metrics endpoint cannot accept: %s", exc.strerror)
                    await asyncio.sleep(_ACCEPT_RETRY_S)
                    continue
                if len(self.connections) + len(self._handshakes) >= self.connections.limit:
                    connection.close()
                    self.connections.refused += 1
                    continue
                if self._tls is None:
                    await self._connect(connection)
                else:
                    handshake = asyncio.create_task(self._connect(connection))
                    self._handshakes.add(handshake)
                    handshake.add_done_callback(self._handshakes.discard)

    async def _connect(self, connection: socket.socket) -> None:
        """Serve an accepted connection (over TLS once its handshake is done)."""
        tls: dict[str, Any] = {}
        if self._tls is not None:
            tls = {"ssl": self._tls, "ssl_handshake_timeout": _IDLE_TIMEOUT_S}
        try:
            await asyncio.get_running_loop().connect_accepted_socket(
                self._protocol, connection, **tls
            )
        except OSError:  # the client left, or its handshake failed or stalled
            connection.close()

    def _protocol(self) -> HttpServerProtocol:
        return HttpServerProtocol(
            self._answer,
            _MAX_BODY_BYTES,
            connections=self.connections,
            idle_timeout_s=_IDLE_TIMEOUT_S,
            keep_headers=_HEADERS,
        )

    async def _answer(self, request: HttpRequest, responder: Responder) -> None:
        status, body = self._refusal(request)
        if status:
            responder.send(status, body, _TEXT)
        else:
            responder.send(200, generate_latest(self._registry), _METRICS)

    def _refusal(self, request: HttpRequest) -> tuple[int, bytes]:
        """(status, why) of a request not to answer; (0, b"") for a scrape."""
        host = request.headers.get(b"host")
        if host is None:
            return 400, b"a request must name its host (the Host header)\n"
        if not names_listener([host.decode("latin-1")], self._host, self._names):
            return 421, (
                b"the Host header names no address of this endpoint: scrape it by its "
                b"address, or add the name to ROLLOUT_METRICS_HOSTS\n"
            )
        if self._tokens:
            authorization = request.headers.get(b"authorization")
            values = [] if authorization is None else [authorization.decode("latin-1")]
            try:
                authenticate(self._tokens, values)
            except Unauthenticated as exc:
                return 401, f"{exc} (a token of ROLLOUT_METRICS_TOKEN_FILE)\n".encode()
        if request.path != "/metrics":
            return 404, b"not found: the metrics are at /metrics\n"
        if request.method != "GET":
            return 405, b"the metrics are read with GET\n"
        return 0, b""

    async def close(self) -> None:
        """Stop listening and close every open connection."""
        if self._accepting is not None:
            self._accepting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._accepting
        for handshake in list(self._handshakes):
            handshake.cancel()
        self.connections.close_all()


def _scrape_tokens(settings: Settings) -> TokenTable:
    """The tokens of metrics_token_file (none when unset); a token with a tenant is refused:
    a scrape reads every tenant's counts."""
    path = settings.metrics_token_file
    if path is None:
        return TokenTable()
    tokens = load_token_file("metrics_token_file", path)
    if not tokens:
        raise ConfigError(f"metrics_token_file {str(path)!r} holds no token")
    if any(tenant is not None for _, tenant in tokens.entries):
        raise ConfigError(
            f"metrics_token_file {str(path)!r}: a scrape token has no tenant (one token a line)"
        )
    return tokens
