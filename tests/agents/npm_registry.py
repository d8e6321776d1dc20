"""A scripted npm registry on loopback, speaking the registry's real wire format.

Stands in for registry.npmjs.org in installer tests: it serves packuments (`GET /<name>`)
and gzipped tarballs for a miniature `opencode-ai` whose platform packages carry a shell
script in place of the real binary. Point npm at it with `npm_config_registry`.

    async with FakeNpmRegistry() as registry:
        registry.publish_opencode("0.0.1-test", broken={"opencode-linux-x64"})
        registry.url          # "http://127.0.0.1:<port>/"
        registry.hits         # Counter of request paths
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import platform
import socket
import tarfile
from collections import Counter
from types import TracebackType
from typing import Any

from aiohttp import web

__all__ = ["FakeNpmRegistry", "host_npm_arch"]


def host_npm_arch() -> str:
    """npm's name for this machine's CPU (`x64`, `arm64`)."""
    machine = platform.machine()
    return {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64"}.get(machine, machine)


def _tarball(manifest: dict[str, Any], files: dict[str, tuple[bytes, int]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        entries = {"package.json": (json.dumps(manifest).encode(), 0o644), **files}
        for name, (data, mode) in entries.items():
            info = tarfile.TarInfo(f"package/{name}")
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


class FakeNpmRegistry:
    """`publish_opencode(version)` adds opencode-ai and its platform packages."""

    def __init__(self, sock: socket.socket | None = None) -> None:
        """On loopback, or on `sock` (a test host's, for sandboxes under network FULL)."""
        self._sock = sock
        self.hits: Counter[str] = Counter()
        self._packuments: dict[str, dict[str, Any]] = {}
        self._tarballs: dict[str, bytes] = {}
        self._runner: web.AppRunner | None = None
        self.url = ""

    def publish_opencode(self, version: str, *, broken: frozenset[str] = frozenset()) -> None:
        """A fake opencode-ai@version; binaries of packages in `broken` fail `--version`."""
        arch = host_npm_arch()
        platforms = [f"opencode-linux-{arch}", f"opencode-linux-{arch}-baseline"]
        self._publish(
            "opencode-ai", version, {"optionalDependencies": dict.fromkeys(platforms, version)}, {}
        )
        for name in platforms:
            script = "#!/bin/sh\nexit 1\n" if name in broken else f"#!/bin/sh\necho {version}\n"
            extra = {"os": ["linux"], "cpu": [arch]}
            self._publish(name, version, extra, {"bin/opencode": (script.encode(), 0o755)})

    def _publish(
        self, name: str, version: str, extra: dict[str, Any], files: dict[str, tuple[bytes, int]]
    ) -> None:
        manifest = {"name": name, "version": version, **extra}
        data = _tarball(manifest, files)
        path = f"/-/tarballs/{name}-{version}.tgz"
        self._tarballs[path] = data
        digest = base64.b64encode(hashlib.sha512(data).digest()).decode()
        dist = {
            "tarball": f"{self.url.rstrip('/')}{path}",
            "integrity": f"sha512-{digest}",
            "shasum": hashlib.sha1(data).hexdigest(),
        }
        packument = self._packuments.setdefault(name, {"name": name, "versions": {}})
        packument["versions"][version] = {**manifest, "dist": dist}
        packument["dist-tags"] = {"latest": version}

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        self.hits[path] += 1
        if path in self._tarballs:
            return web.Response(body=self._tarballs[path], content_type="application/octet-stream")
        packument = self._packuments.get(path.lstrip("/").replace("%2f", "/").replace("%2F", "/"))
        if packument is None:
            return web.json_response({"error": "Not found"}, status=404)
        return web.json_response(packument)

    async def __aenter__(self) -> FakeNpmRegistry:
        app = web.Application()
        app.router.add_route("GET", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site: web.BaseSite
        if self._sock is None:
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
        else:
            site = web.SockSite(self._runner, self._sock)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}/"
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
