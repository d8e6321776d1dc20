"""The dashboard's lifetime inside the server: opened first (it may refuse), attached to the gRPC
server (a private unix socket), started once the API serves, stopped before the API stops.

hypercorn serves HTTP/1.1, and HTTP/2 over TLS; the listening socket is bound here, before
anything else opens, so that an address in use is a start-up error naming the setting, and
port 0 reports the port it got.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import socket
import ssl
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
from hypercorn.asyncio import serve
from hypercorn.config import Config

from service.api import TokenTable, check_dashboard_exposure
from service.config import Settings
from service.dashboard.budget import BodyBudget
from service.dashboard.inbound import REQUEST_MAX_BYTES, REQUESTS_HELD_MAX_BYTES, CallGate
from service.dashboard.site import DashboardSite
from service.errors import ConfigError
from service.listen_address import bind, host_and_port

__all__ = ["Dashboard"]

log = logging.getLogger(__name__)

_SETTING = "ROLLOUT_DASHBOARD_LISTEN"
_STOP_GRACE_S = 1.0
_DECODING_THREADS = 1
"""Requests are inflated and decoded here, never on the event loop, nor on the loop's default
executor (sandboxes use it): one thread, so that decoding takes at most one core (and half
of the GIL) whatever the dashboard is sent."""


class Dashboard:
    """The web dashboard of one server."""

    def __init__(self, settings: Settings, listener: socket.socket, tokens: TokenTable) -> None:
        self._settings = settings
        self._listener: socket.socket | None = listener
        self._tokens = tokens
        self._decoding = ThreadPoolExecutor(_DECODING_THREADS, "dashboard-decode")
        self._socket_dir: Path | None = None
        self._channel: grpc.aio.Channel | None = None
        self._stopping = asyncio.Event()
        self._serving: asyncio.Task[None] | None = None

    @classmethod
    def open(
        cls, settings: Settings, *, encrypted: bool, authenticated: bool, tokens: TokenTable
    ) -> Dashboard | None:
        """The bound dashboard when `dashboard_listen` is set; ConfigError when it may not or
        cannot listen there. With `tokens`, a call without one of them is refused before its
        body is read (the API judges it again)."""
        if not settings.dashboard_listen:
            return None
        host, port = _host_and_port(settings.dashboard_listen)  # a malformed address first
        check_dashboard_exposure(settings, encrypted=encrypted, authenticated=authenticated)
        return cls(settings, bind(host, port, _SETTING), tokens)

    @property
    def api_address(self) -> str:
        """Where the gRPC server listens for the dashboard's forwarded calls."""
        assert self._socket_dir is not None, "attach() first"
        return f"unix:{self._socket_dir / 'api.sock'}"

    def attach(self, server: grpc.aio.Server) -> None:
        """Make `server` (with its interceptors) listen on `api_address` too: a socket in a
        directory only this user may enter (mkdtemp makes it 0700)."""
        self._socket_dir = Path(tempfile.mkdtemp(prefix="rollout-dashboard-"))
        server.add_insecure_port(self.api_address)

    async def start(self) -> str:
        """Serve the page; returns its URL."""
        assert self._listener is not None, "a dashboard starts once"
        host, port = self._listener.getsockname()[:2]
        limit = self._settings.max_message_bytes
        self._channel = grpc.aio.insecure_channel(
            self.api_address, options=[("grpc.max_receive_message_length", limit)]
        )
        # Listening now, so that a client who reads the URL is queued until hypercorn's task
        # accepts it, rather than refused.
        self._listener.listen()
        config = self._config(self._listener.detach())
        self._listener = None
        gate = CallGate(
            listen_host=_host_and_port(self._settings.dashboard_listen)[0],
            names=tuple(self._settings.dashboard_hosts),
            tokens=self._tokens,
            max_bytes=min(limit, REQUEST_MAX_BYTES),
            executor=self._decoding,
            budget=BodyBudget(REQUESTS_HELD_MAX_BYTES),
        )
        site = DashboardSite(self._channel, gate)
        self._serving = asyncio.create_task(
            serve(site, config, shutdown_trigger=self._stopping.wait)  # type: ignore[arg-type]
        )
        scheme = "https" if config.ssl_enabled else "http"
        return f"{scheme}://{f'[{host}]' if ':' in host else host}:{port}/"

    def _config(self, fd: int) -> Config:
        config = Config()
        config.bind = [f"fd://{fd}"]
        config.graceful_timeout = _STOP_GRACE_S
        config.accesslog = None
        config.errorlog = log
        settings = self._settings
        if settings.tls_cert_file is not None and settings.tls_key_file is not None:
            config.certfile = str(settings.tls_cert_file)
            config.keyfile = str(settings.tls_key_file)
        if settings.tls_client_ca_file is not None:
            config.ca_certs = str(settings.tls_client_ca_file)
            config.verify_mode = ssl.CERT_REQUIRED
        return config

    async def stop(self) -> None:
        """End open watches (their forwarded calls), then stop serving."""
        if self._channel is not None:
            await self._channel.close()
        self._stopping.set()
        if self._serving is not None:
            await self._serving
        if self._listener is not None:
            self._listener.close()
        self._decoding.shutdown(wait=False, cancel_futures=True)
        if self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)


def _host_and_port(listen: str) -> tuple[str, int]:
    parsed = host_and_port(listen)
    if parsed is None or parsed[0] is None or parsed[1] > 65535:
        raise ConfigError(f"{_SETTING} is {listen!r}: expected HOST:PORT (e.g. 127.0.0.1:8080)")
    return parsed[0], parsed[1]
