"""The capture proxy inside the service: one listener for every rollout.

It listens on TCP (`settings.proxy_listen`) and on a Unix socket at
`<state_dir>/proxy.sock`; the local backend binds that socket into each sandbox at
`PROXY_SOCKET`, so a sandbox with a private network namespace still reaches the proxy
(and nothing else). Each rollout gets its own route, named by an unguessable token.
"""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING

from service.models import CaptureSpec
from service.proxy.core import ProxyCore
from service.proxy.endpoints import ResolvedEndpoint
from service.proxy.route import OnTurn, Route

if TYPE_CHECKING:
    from service.config import Settings

__all__ = ["CaptureProxy"]

_SOCKET_NAME = "proxy.sock"
_MAX_UNIX_PATH = 100
"""sun_path holds 108 bytes; longer paths are bound through /proc/self/fd."""


def _split_listen(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    return host.strip("[]") or "127.0.0.1", int(port)


def _bind_unix(path: Path) -> socket.socket:
    """A listening Unix socket at `path` (replacing a stale one), however long the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        if len(os.fsencode(path)) < _MAX_UNIX_PATH:
            sock.bind(os.fspath(path))
        else:
            directory = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
            try:
                sock.bind(f"/proc/self/fd/{directory}/{path.name}")
            finally:
                os.close(directory)
        # Who may connect is decided by the state directory's permissions on the host and
        # by the route token; the sandbox user may map to any uid.
        os.chmod(path, 0o666)
        sock.listen(1024)
    except OSError:
        sock.close()
        raise
    return sock


class CaptureProxy:
    """`start()`, then `open_route()` per rollout and `close_route()` when it ends; `stop()`."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._core = ProxyCore(upstream_timeout_s=settings.upstream_timeout_s)
        self.host, self.port = _split_listen(settings.proxy_listen)

    @property
    def socket_path(self) -> Path:
        """The host Unix socket (bind it into sandboxes at `PROXY_SOCKET`)."""
        return self._settings.state_dir / _SOCKET_NAME

    @property
    def url(self) -> str:
        """Base URL of the TCP listener (routes live under `/r/<token>/v1`)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def start(self) -> None:
        self.port = await self._core.serve_tcp(self.host, self.port)
        await self._core.serve_unix(_bind_unix(self.socket_path))

    async def stop(self) -> None:
        await self._core.close()
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()

    def open_route(
        self, rollout_id: str, upstream: ResolvedEndpoint, capture: CaptureSpec, on_turn: OnTurn
    ) -> Route:
        """A route for one rollout; `on_turn` gets each turn the moment it completes."""
        return self._core.open_route(rollout_id, upstream, capture, on_turn)

    def close_route(self, route: Route) -> None:
        """New requests on the route get 404; calls in flight are cancelled."""
        self._core.close_route(route)
