"""The server process: wires store, event hub, proxy, engine and gRPC together.

Start it with `rollout serve` or `python -m service.server`; flags mirror the ROLLOUT_*
environment variables (e.g. `--listen 127.0.0.1:0 --state-dir /tmp/state`).

Whatever stops it at start (a bad setting, an address another process holds, an unprotected
non-loopback address) is one line on stderr and exit code 2, before anything opens: no store,
no recovery of rollouts that may be another server's.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import resource
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from opentelemetry.instrumentation.grpc import aio_server_interceptor
from rollout.v1 import rollout_pb2 as pb

from service.agents import OpencodeInstaller, npm_missing
from service.api import (
    BearerAuthInterceptor,
    MetricsEndpoint,
    RolloutServicer,
    TokenTable,
    add_servicer,
    check_exposure,
    check_health_listen,
    check_metrics_exposure,
    check_proxy_exposure,
    load_tokens,
    open_health_server,
    server_credentials,
)
from service.config import Settings, load_settings
from service.dashboard import Dashboard
from service.engine import EventHub, GroupManager, ModelRouter, RolloutManager, SessionManager
from service.errors import ConfigError, MissingDependencyError
from service.listen_address import advertised, ensure_free, host_and_port, host_port
from service.memory import freeze_startup_objects, return_large_frees_to_the_os
from service.proxy import CaptureProxy
from service.registry import BACKENDS
from service.store import new_store
from service.telemetry import Metrics, setup_tracing, start_metrics_export

__all__ = ["main", "serve"]

log = logging.getLogger("rollout.server")

_SERVICE_NAME = pb.DESCRIPTOR.services_by_name["RolloutService"].full_name
_SHARE_HINT = (
    "stop it, choose another address, or set ROLLOUT_LISTEN_REUSE_PORT=true on every server "
    "meant to share the port"
)
_PENDING_CALLS_SOFT = 20_000
_PENDING_CALLS_HARD = 40_000
_PENDING_CALL_S = 300
"""Calls gRPC core may hold before grpc.aio accepts them, and for how long. grpc.aio accepts
one call per turn of the event loop; past core's defaults (1,000 calls, then refusing at random
up to 3,000; 30 s), a burst of calls (10,000 dashboards watching, a trainer starting thousands
of rollouts at once) saw CANCELLED with no reason given. A call's own deadline still ends it."""


async def serve(settings: Settings) -> None:
    """Run until SIGTERM/SIGINT, then drain: stop admitting, cancel after the grace, exit."""
    # Before anything opens: each of these may refuse.
    security = _ApiSecurity.from_settings(settings)
    dashboard = Dashboard.open(
        settings,
        encrypted=security.credentials is not None,
        authenticated=security.authenticated,
        tokens=security.tokens,
    )
    check_proxy_exposure(settings)
    check_metrics_exposure(settings)
    check_health_listen(settings)
    if not settings.listen_reuse_port:
        ensure_free(settings.listen, settings.name_of("listen"), _SHARE_HINT)
    exported = start_metrics_export(settings)
    scrapes = await MetricsEndpoint.open(settings, exported.registry)  # may refuse its port
    if scrapes is not None:
        print(f"rollout-service metrics at {scrapes.url}", flush=True)
    metrics = Metrics(exported.provider)
    proxy = CaptureProxy(settings)
    await proxy.start()
    tracing = setup_tracing()
    settings.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    url = settings.database_url
    store = new_store(
        url.get_secret_value() if url else None,
        settings.database_path,
        state_dir=settings.state_dir,
        instance_id=settings.instance_id,
        lease_s=settings.database_lease_s,
    )
    await store.open()
    hub = EventHub(store)
    await hub.start()
    manager = RolloutManager(
        settings, store, hub, ModelRouter(proxy, os.environ, settings), metrics=metrics
    )
    manager.load_default_backend()
    _warn_if_opencode_unavailable(settings)
    for name in settings.start_backends:  # built now, so that recover() sweeps their orphans
        if name not in BACKENDS:
            raise ConfigError(f"start_backends names {name!r}, not one of {sorted(BACKENDS)}")
        manager.backend(name)
    interrupted = await manager.recover()
    if interrupted:
        log.warning("marked %d rollouts interrupted by restart as FAILED", interrupted)
    groups = GroupManager(manager, store)
    sessions = SessionManager(manager)
    resumed = await groups.recover()
    if resumed:
        log.warning("resumed %d groups interrupted by restart", resumed)
    # Only a shared store has other servers whose work may need taking over.
    takeover = (
        asyncio.create_task(_take_over_gone_replicas(manager, groups, settings.database_lease_s))
        if settings.database_url
        else None
    )

    stop = _stop_on_signal()
    server, port, health_servicer = _grpc_server(
        settings, security, manager, groups, sessions, hub, metrics
    )
    health_port = open_health_server(settings, health_servicer)
    if dashboard is not None:
        dashboard.attach(server)
    await server.start()
    await store.advertise(settings.advertise_address or advertised(settings.listen, port))
    if health_port is not None:  # after the API, whose health ("") is SERVING from the start
        await health_port[0].start()
        health = _with_port(settings.health_listen, health_port[1])
        print(f"rollout-service health (plaintext) at {health}", flush=True)
    await _mark_serving(health_servicer)
    if dashboard is not None:
        print(f"rollout-service dashboard at {await dashboard.start()}", flush=True)
    freeze_startup_objects()
    print(f"rollout-service listening on {_with_port(settings.listen, port)}", flush=True)

    await stop.wait()
    log.info("shutting down: draining for up to %.0fs", settings.shutdown_grace_s)
    await health_servicer.enter_graceful_shutdown()
    if takeover is not None:
        takeover.cancel()
    await groups.shutdown()
    await sessions.shutdown()
    await manager.shutdown(settings.shutdown_grace_s)
    if dashboard is not None:
        await dashboard.stop()
    await server.stop(grace=1.0)
    if health_port is not None:  # NOT_SERVING to probes for the whole drain
        await health_port[0].stop(grace=1.0)
    await proxy.stop()
    await hub.stop()
    await store.close()
    if scrapes is not None:
        await scrapes.close()
    tracing.shutdown()
    exported.shutdown()


async def _take_over_gone_replicas(
    manager: RolloutManager, groups: GroupManager, lease_s: float
) -> None:
    """Every lease_s / 2: end the rollouts of replicas whose lease expired (a crash, a lost
    host) as interrupted, and resume their groups, as their own restart would have."""
    while True:
        await asyncio.sleep(lease_s / 2)
        try:
            ended = await manager.end_interrupted()
            resumed = await groups.recover()
        except Exception:  # the database may be away for a while; the next round retries
            log.exception("taking over the rollouts of stopped replicas failed")
            continue
        if ended or resumed:
            log.warning("took over %d rollouts and %d groups of a stopped replica", ended, resumed)


def _with_port(listen: str, port: int) -> str:
    """`listen` (HOST:PORT) with the port it was bound to."""
    parsed = host_and_port(listen)
    return listen if parsed is None else host_port(parsed[0], port)


def _warn_if_opencode_unavailable(settings: Settings) -> None:
    """Say at start, not at the first rollout, that opencode rollouts will be refused."""
    installer = OpencodeInstaller(
        Path(os.path.realpath(settings.cache_dir)), settings.opencode_version
    )
    reason = npm_missing(installer)
    if reason is not None:
        log.warning("opencode rollouts will be rejected until npm is installed: %s", reason)


@dataclass(frozen=True)
class _ApiSecurity:
    """The API's tokens and TLS credentials, checked against the listen address."""

    tokens: TokenTable
    credentials: grpc.ServerCredentials | None
    authenticated: bool
    """Every call proves who it is: a bearer token or a client certificate."""

    @classmethod
    def from_settings(cls, settings: Settings) -> _ApiSecurity:
        tokens = load_tokens(settings)
        authenticated = bool(tokens) or settings.tls_client_ca_file is not None
        security = cls(tokens, server_credentials(settings), authenticated)
        check_exposure(
            settings,
            encrypted=security.credentials is not None,
            authenticated=security.authenticated,
        )
        return security

    def interceptors(self, settings: Settings) -> list[grpc.aio.ServerInterceptor]:
        if not self.tokens:
            return []
        auth = BearerAuthInterceptor(
            self.tokens,
            health_open=settings.auth_health_open,
            reflection_open=settings.auth_reflection_open,
        )
        return [auth]

    def describe(self, settings: Settings) -> str:
        tls = "off" if self.credentials is None else "on"
        if settings.tls_client_ca_file is not None:
            tls += ", client certificates required"
        auth = self.tokens.describe() if self.tokens else "no bearer tokens"
        return f"TLS {tls}; {auth}"


def _grpc_server(
    settings: Settings,
    security: _ApiSecurity,
    manager: RolloutManager,
    groups: GroupManager,
    sessions: SessionManager,
    hub: EventHub,
    metrics: Metrics,
) -> tuple[grpc.aio.Server, int, health.aio.HealthServicer]:
    options = [
        ("grpc.max_send_message_length", settings.max_message_bytes),
        ("grpc.max_receive_message_length", settings.max_message_bytes),
        # gRPC shares ports by default: a second server would take half the clients.
        ("grpc.so_reuseport", int(settings.listen_reuse_port)),
        ("grpc.server.max_pending_requests", _PENDING_CALLS_SOFT),
        ("grpc.server.max_pending_requests_hard_limit", _PENDING_CALLS_HARD),
        ("grpc.server_max_unrequested_time_in_server", _PENDING_CALL_S),
    ]
    server = grpc.aio.server(
        options=options,
        # Tracing first, so that refused calls are traced too.
        interceptors=[aio_server_interceptor(), *security.interceptors(settings)],  # type: ignore[no-untyped-call]
    )
    add_servicer(RolloutServicer(manager, hub, groups, sessions), server, metrics)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (_SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )
    port = _bind(server, settings, security.credentials)
    log.info("API security: %s", security.describe(settings))
    return server, port, health_servicer


def _bind(
    server: grpc.aio.Server, settings: Settings, credentials: grpc.ServerCredentials | None
) -> int:
    """The bound port; a ConfigError when gRPC cannot bind: the port is held by a server
    that does not share it (or was taken since `ensure_free`), or gRPC refuses the address."""
    listen = settings.listen
    try:
        if credentials is None:
            return server.add_insecure_port(listen)
        return server.add_secure_port(listen, credentials)
    except RuntimeError as exc:  # gRPC's only report: "Failed to bind to address ..."
        setting = settings.name_of("listen")
        ensure_free(listen, setting, _SHARE_HINT)  # names the holder if there is one
        raise ConfigError(f"cannot listen on {listen} ({setting}): {exc}") from exc


async def _mark_serving(health_servicer: health.aio.HealthServicer) -> None:
    for name in ("", _SERVICE_NAME):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)


def _stop_on_signal() -> asyncio.Event:
    """An event set by SIGTERM/SIGINT; installed before we announce that we listen."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop


def _raise_fd_limit() -> None:
    """Allow open files up to the hard limit: proxy connections, sandbox pipes and the gRPC
    port share one table, and the capture proxy's per-sandbox bounds are sized against it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


SETTINGS_SCHEMA_FLAG = "--settings-schema"
"""Alone, prints the settings' JSON schema instead of serving: `rollout serve --help` is
written from it by the client, which does not import the server."""


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `python -m service.server` (which `rollout serve` runs)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args == [SETTINGS_SCHEMA_FLAG]:
        print(json.dumps(Settings.model_json_schema()))
        return 0
    _raise_fd_limit()
    return_large_frees_to_the_os()
    try:
        settings = load_settings(args)
        logging.basicConfig(
            level=settings.log_level.upper(),
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        )
        asyncio.run(serve(settings))
    except (MissingDependencyError, ConfigError) as exc:
        print(f"rollout-service cannot start: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
