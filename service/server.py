"""The server process: wires store, event hub, proxy, engine and gRPC together.

Start it with `rollout serve` or `python -m service.server`; flags mirror the ROLLOUT_*
environment variables (e.g. `--listen 127.0.0.1:0 --state-dir /tmp/state`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Sequence

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from opentelemetry.instrumentation.grpc import aio_server_interceptor
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from service.api.servicer import RolloutServicer
from service.config import Settings
from service.engine.events import EventHub
from service.engine.manager import RolloutManager
from service.engine.model_access import ModelRouter
from service.memory import return_large_frees_to_the_os
from service.proxy.server import CaptureProxy
from service.registry import MissingDependencyError
from service.store.sqlite import SqliteStore
from service.telemetry.setup import setup_tracing

__all__ = ["main", "serve"]

log = logging.getLogger("rollout.server")

_SERVICE_NAME = pb.DESCRIPTOR.services_by_name["RolloutService"].full_name


async def serve(settings: Settings) -> None:
    """Run until SIGTERM/SIGINT, then drain: stop admitting, cancel after the grace, exit."""
    tracing = setup_tracing()
    settings.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    store = SqliteStore(settings.database_path)
    await store.open()
    hub = EventHub(store)
    await hub.start()
    proxy = CaptureProxy(settings)
    await proxy.start()
    manager = RolloutManager(settings, store, hub, ModelRouter(proxy, os.environ, settings))
    manager.load_default_backend()
    if os.environ.get("E2B_API_KEY"):
        manager.backend("e2b")  # loaded now so that recover() sweeps its orphans before we serve
    interrupted = await manager.recover()
    if interrupted:
        log.warning("marked %d rollouts interrupted by restart as FAILED", interrupted)

    stop = _stop_on_signal()
    server, port, health_servicer = _grpc_server(settings, manager, hub)
    await server.start()
    await _mark_serving(health_servicer)
    host = settings.listen.rsplit(":", 1)[0]
    print(f"rollout-service listening on {host}:{port}", flush=True)

    await stop.wait()
    log.info("shutting down: draining for up to %.0fs", settings.shutdown_grace_s)
    await health_servicer.enter_graceful_shutdown()
    await manager.shutdown(settings.shutdown_grace_s)
    await server.stop(grace=1.0)
    await proxy.stop()
    await hub.stop()
    await store.close()
    tracing.shutdown()


def _grpc_server(
    settings: Settings, manager: RolloutManager, hub: EventHub
) -> tuple[grpc.aio.Server, int, health.aio.HealthServicer]:
    options = [
        ("grpc.max_send_message_length", settings.max_message_bytes),
        ("grpc.max_receive_message_length", settings.max_message_bytes),
    ]
    server = grpc.aio.server(
        options=options,
        interceptors=[aio_server_interceptor()],  # type: ignore[no-untyped-call]
    )
    pb_grpc.add_RolloutServiceServicer_to_server(RolloutServicer(manager, hub), server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (_SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )
    port = server.add_insecure_port(settings.listen)
    return server, port, health_servicer


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


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `rollout serve` and `python -m service.server`."""
    return_large_frees_to_the_os()
    settings = Settings(_cli_parse_args=list(argv if argv is not None else sys.argv[1:]))  # type: ignore[call-arg]
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        asyncio.run(serve(settings))
    except MissingDependencyError as exc:
        print(f"rollout-service cannot start: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
