"""The health port (`health_listen`): the standard grpc.health.v1 service alone, in plaintext,
on a port of its own, for probes that cannot speak TLS (Kubernetes' built-in gRPC probe has a
port and a service name, no TLS), so that the API itself can keep TLS.

    served here         grpc.health.v1.Health (Check, Watch), and nothing else: no
                        RolloutService, no reflection, no dashboard forwarding
    its answers         the API's own HealthServicer: SERVING once the API listens,
                        NOT_SERVING from SIGTERM on, for the whole drain; it closes after
                        the API does
    tokens              none taken: a bearer token would cross in clear, so it cannot be
                        combined with auth_health_open=false (refused at start)
    any address         allowed without TLS or allow_insecure_listen: all it reveals is
                        whether this server is up, which any TCP connect to the API shows
    its port            its own: a port the API or another listener of this server names,
                        or another process holds, stops the server at start

The checks run before anything opens; the bind is without SO_REUSEPORT (gRPC's default is to
share), so a port taken since then is refused too rather than split with its holder.
"""

from __future__ import annotations

import grpc
from grpc_health.v1 import health, health_pb2_grpc

from service.config import Settings
from service.errors import ConfigError
from service.listen_address import ensure_free, host_and_port
from service.proxy import split_listen
from service.telemetry import metrics_address

__all__ = ["check_health_listen", "open_health_server"]

_SETTING = "ROLLOUT_HEALTH_LISTEN"
_HINT = "stop it or choose another port"


def check_health_listen(settings: Settings) -> None:
    """Refuse, naming the settings, a health port that is malformed, shared with another of
    this server's listeners or held by another process, or that would contradict
    auth_health_open=false."""
    listen = settings.health_listen
    if not listen:
        return
    parsed = host_and_port(listen)
    if parsed is None or parsed[0] is None or parsed[1] > 65535:
        raise ConfigError(f"{_SETTING} is {listen!r}: expected HOST:PORT (e.g. 0.0.0.0:50052)")
    if not settings.auth_health_open:
        raise ConfigError(
            f"{_SETTING} serves health checks without a token (in plaintext, a token would "
            "cross in clear), which ROLLOUT_AUTH_HEALTH_OPEN=false forbids; unset one of them"
        )
    port = parsed[1]
    for setting, other in _other_ports(settings).items():
        if port != 0 and port == other:
            raise ConfigError(
                f"{listen} ({_SETTING}) is the port of {setting}: the health port must be a "
                "port of its own"
            )
    ensure_free(listen, _SETTING, _HINT)


def _other_ports(settings: Settings) -> dict[str, int]:
    """The fixed ports of this server's other listeners, by setting."""
    ports = {"ROLLOUT_PROXY_LISTEN": split_listen(settings.proxy_listen)[1]}
    for setting, listen in (
        ("ROLLOUT_LISTEN", settings.listen),
        ("ROLLOUT_DASHBOARD_LISTEN", settings.dashboard_listen),
    ):
        parsed = host_and_port(listen) if listen else None
        if parsed is not None:
            ports[setting] = parsed[1]
    if settings.metrics_listen:
        ports["ROLLOUT_METRICS_LISTEN"] = metrics_address(settings.metrics_listen)[1]
    return ports


def open_health_server(
    settings: Settings, servicer: health.aio.HealthServicer
) -> tuple[grpc.aio.Server, int] | None:
    """A server of `servicer` alone, bound to health_listen (not started); None when off."""
    listen = settings.health_listen
    if not listen:
        return None
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    try:
        port = server.add_insecure_port(listen)
    except RuntimeError as exc:  # gRPC's only report: "Failed to bind to address ..."
        ensure_free(listen, _SETTING, _HINT)  # names the holder if there is one
        raise ConfigError(f"cannot listen on {listen} ({_SETTING}): {exc}") from exc
    return server, port
