"""The capture proxy inside the service.

A local sandbox reaches its rollout's route through a Unix socket of its own: the proxy
binds it in the sandbox's proxy directory when the route opens (`open_sandbox_route`),
and the sandbox sees it at PROXY_SOCKET (`sandboxes.bwrap`). No other sandbox sees that
directory, and the route has no token, so it is reachable from its own sandbox only, on
any network policy. Remote sandboxes that reach the service over the network use the TCP
listener (`settings.proxy_listen`), where a route is named by an unguessable token
(`open_route`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from service.listen_address import bind_refusal
from service.models import CaptureSpec
from service.proxy.capture.record import RecordBounds
from service.proxy.capture.route import OnTurn, Route
from service.proxy.core import ConnectionBounds, ProxyCore, base_url, split_listen
from service.proxy.endpoints import ResolvedEndpoint
from service.proxy.transport.connections import ConnectionLimit

if TYPE_CHECKING:
    from service.config import Settings

__all__ = ["CaptureProxy"]


class CaptureProxy:
    """`start()`, then a route per rollout, closed with `close_route()` when it ends; `stop()`."""

    def __init__(self, settings: Settings) -> None:
        bounds = ConnectionBounds(
            per_socket_route=settings.proxy_max_connections_per_sandbox,
            tcp=settings.proxy_max_tcp_connections,
            idle_timeout_s=settings.proxy_idle_timeout_s,
        )
        record = RecordBounds(
            turn_bytes=settings.proxy_turn_record_bytes,
            rollout_bytes=settings.proxy_rollout_record_bytes,
        )
        self._core = ProxyCore(
            upstream_timeout_s=settings.upstream_timeout_s,
            bounds=bounds,
            record=record,
            version_header=settings.upstream_weight_version_header,
        )
        self.host, self.port = split_listen(settings.proxy_listen)

    @property
    def url(self) -> str:
        """Base URL of the TCP listener (token routes live under `/r/<token>/v1`)."""
        return base_url(self.host, self.port)

    @property
    def tcp_connections(self) -> ConnectionLimit:
        """The connections open on the TCP listener."""
        return self._core.tcp_connections

    async def start(self) -> None:
        """Listen on TCP; a port in use (or an address this host lacks) is a ConfigError."""
        try:
            self.port = await self._core.serve_tcp(self.host, self.port)
        except OSError as exc:
            listen = base_url(self.host, self.port).removeprefix("http://")
            hint = "stop it, or choose another port (port 0 picks a free one)"
            raise bind_refusal(listen, self.port, "ROLLOUT_PROXY_LISTEN", exc, hint) from exc

    async def stop(self) -> None:
        await self._core.close()

    def open_route(
        self, rollout_id: str, upstream: ResolvedEndpoint, capture: CaptureSpec, on_turn: OnTurn
    ) -> Route:
        """A token route on the TCP listener; `on_turn` gets each turn as it completes."""
        return self._core.open_route(rollout_id, upstream, capture, on_turn)

    async def open_sandbox_route(
        self,
        rollout_id: str,
        upstream: ResolvedEndpoint,
        capture: CaptureSpec,
        on_turn: OnTurn,
        socket_path: Path,
    ) -> Route:
        """A route served only on a new socket at `socket_path`, in one sandbox's proxy
        directory; unknown to the TCP listener."""
        return await self._core.open_socket_route(
            rollout_id, upstream, capture, on_turn, socket_path
        )

    def socket_connections(self, route: Route) -> ConnectionLimit | None:
        """The connections open on a sandbox route's socket."""
        return self._core.socket_connections(route)

    def close_route(self, route: Route) -> None:
        """New requests on the route get 404 (a sandbox route's socket is removed); calls in
        flight are cancelled."""
        self._core.close_route(route)
