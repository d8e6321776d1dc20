"""The loopback relay between a session's model route and verifiers' interception server.

A verifiers harness (bash, null, ...) runs its chat program inside the runtime and reaches
the model at the URL `Runtime.host_url` gives for verifiers' interception server, a
host-loopback port that no rollout-service sandbox can reach. A session's model route can:

    program in the sandbox --OPENAI_BASE_URL--> the server's capture proxy (turns recorded)
        --the session's endpoint--> this relay (127.0.0.1, the caller's host)
        --> verifiers' interception server (`target`, with the program's own `secret`)

The proxy never forwards the program's Authorization header (it sends the endpoint's key),
so the relay admits only that key and sends the interception secret the harness handed its
program (`--api-key`) in its place. One program at a time: a later `point` replaces it.
"""

from __future__ import annotations

import secrets
import socket

import aiohttp
from aiohttp import web

__all__ = ["ModelRelay"]

_HOP_HEADERS = ("content-type", "accept")


class ModelRelay:
    """An HTTP relay on 127.0.0.1 forwarding `/v1/<path>` to `target/<path>`."""

    def __init__(self) -> None:
        self.key = secrets.token_urlsafe(24)
        """The bearer token the session's endpoint carries (the proxy sends it)."""
        self.target = ""
        self.secret = ""
        self._runner: web.AppRunner | None = None
        self._http: aiohttp.ClientSession | None = None

    async def start(self) -> str:
        """Listen on a free loopback port; returns the base URL (ending in /v1)."""
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/v1/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()
        self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))
        return f"http://127.0.0.1:{port}/v1"

    def point(self, target: str = "", secret: str = "") -> None:
        """Send what arrives from now on to `target` (a URL ending in /v1) with `secret`."""
        if target:
            self.target = target.rstrip("/")
        if secret:
            self.secret = secret

    async def stop(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        if request.headers.get("Authorization") != f"Bearer {self.key}":
            return web.json_response({"error": {"message": "not the session's key"}}, status=401)
        if not self.target or self._http is None:
            message = "no verifiers harness is running in this session"
            return web.json_response({"error": {"message": message}}, status=503)
        headers = {k: v for k, v in request.headers.items() if k.lower() in _HOP_HEADERS}
        headers["Authorization"] = f"Bearer {self.secret}"
        url = f"{self.target}/{request.match_info['tail']}"
        body = await request.read()
        async with self._http.request(request.method, url, data=body, headers=headers) as up:
            response = web.StreamResponse(status=up.status)
            if "Content-Type" in up.headers:
                response.content_type = up.content_type
            await response.prepare(request)
            async for chunk in up.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response
