"""The dashboard's ASGI application: Connect calls under SERVICE_PATH, the page's files otherwise.

The page is three files built by `make web` (index.html, app.js, app.css in static/), read once
at start. Every other path is 404: the page routes with the URL fragment (#/rollout/<id>), so
the server never maps a URL to a file. The page shows text a sandboxed agent wrote (command
output, model turns): it renders it as text nodes only, and the Content-Security-Policy lets
no script run but app.js, so a hostile string cannot become markup or code.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from connectrpc.errors import ConnectError
from connectrpc.server import ConnectASGIApplication

from service.dashboard.decode import decoded_codecs
from service.dashboard.forward import SERVICE_PATH, forwarding_endpoints, read_requests
from service.dashboard.inbound import CallGate, Refusal

__all__ = ["STATIC_DIR", "DashboardSite"]

STATIC_DIR = Path(__file__).parent / "static"

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

_CONTENT_TYPES = {
    ".html": b"text/html; charset=utf-8",
    ".js": b"text/javascript; charset=utf-8",
    ".css": b"text/css; charset=utf-8",
}
_SECURITY_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        b"img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-cache"),
]


_WRONG_HOST = b"this Host is not a name of this dashboard (ROLLOUT_DASHBOARD_HOSTS)\n"


@dataclass(frozen=True)
class _Asset:
    content_type: bytes
    body: bytes


def _load_assets(folder: Path) -> Mapping[str, _Asset]:
    assets = {
        f"/{path.name}": _Asset(_CONTENT_TYPES[path.suffix], path.read_bytes())
        for path in sorted(folder.iterdir())
        if path.suffix in _CONTENT_TYPES
    }
    assets["/"] = assets["/index.html"]
    return assets


class _ForwardingApplication(ConnectASGIApplication[grpc.aio.Channel]):
    """rollout.v1.RolloutService's read methods over Connect, forwarded to the gRPC API."""

    @property
    def path(self) -> str:
        return SERVICE_PATH.rstrip("/")

    def __init__(self, channel: grpc.aio.Channel, read_max_bytes: int) -> None:
        super().__init__(
            service=channel,
            endpoints=forwarding_endpoints,
            read_max_bytes=read_max_bytes,
            codecs=decoded_codecs(),  # `inbound` decoded the request before
        )


class DashboardSite:
    """The ASGI application hypercorn serves."""

    def __init__(self, channel: grpc.aio.Channel, gate: CallGate) -> None:
        self._connect = _ForwardingApplication(channel, gate.max_bytes)
        self._gate = gate
        self._requests = read_requests()
        self._assets = _load_assets(STATIC_DIR)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
        elif scope["type"] != "http":
            return  # websockets: nothing here speaks them
        elif scope["path"].startswith(SERVICE_PATH):
            await self._call(scope, receive, send)
        else:
            await self._static(scope, send)

    async def _call(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A Connect call, cancelled when its client goes away. connectrpc notices a closed
        stream only when it has the next message to write, and a watch may wait for one
        forever (a label nothing carries any more): every page left would keep a watch open."""
        call = asyncio.current_task()
        assert call is not None
        gone = False

        async def receive_until_gone() -> MutableMapping[str, Any]:
            nonlocal gone
            message = await receive()
            if message["type"] == "http.disconnect" and not gone:
                gone = True
                call.cancel()
            return message

        try:
            await self._forward(scope, receive_until_gone, send)
        except (asyncio.CancelledError, ConnectError):  # connectrpc re-raises a cancellation
            if not gone:
                raise
            call.uncancel()

    async def _forward(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A read method's call once `inbound` has judged it and decoded its request; any
        other path is connectrpc's 404 (it reads no body for one)."""
        request = self._requests.get(scope["path"])
        if request is None:
            await self._connect(scope, receive, send)
            return
        read = await self._gate.read(scope, receive, *request)
        if isinstance(read, Refusal):
            await _refuse(send, read)
            return
        with read.bound():
            await self._connect(read.scope, _replay(read.body, receive), send)

    async def _static(self, scope: Scope, send: Send) -> None:
        asset = self._assets.get(scope["path"])
        if not self._gate.host_allowed(scope):
            status, headers, body = 403, [(b"content-type", b"text/plain")], _WRONG_HOST
        elif scope["method"] not in ("GET", "HEAD") or asset is None:
            status, headers, body = 404, [(b"content-type", b"text/plain")], b"not found\n"
        else:
            status, headers, body = 200, [(b"content-type", asset.content_type)], asset.body
        headers = [*headers, *_SECURITY_HEADERS, (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        body = b"" if scope["method"] == "HEAD" else body
        await send({"type": "http.response.body", "body": body})


async def _refuse(send: Send, refusal: Refusal) -> None:
    headers = [*refusal.headers, (b"content-length", b"0")]
    await send({"type": "http.response.start", "status": refusal.status, "headers": headers})
    await send({"type": "http.response.body", "body": b""})


def _replay(body: bytes, receive: Receive) -> Receive:
    """`receive` for connectrpc: `body` as the whole request, then what the client sends
    (its going away)."""
    replayed = False

    async def replay() -> MutableMapping[str, Any]:
        nonlocal replayed
        if replayed:
            return await receive()
        replayed = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


async def _lifespan(receive: Receive, send: Send) -> None:
    """Nothing to open or close: the channel belongs to `serve.Dashboard`."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
