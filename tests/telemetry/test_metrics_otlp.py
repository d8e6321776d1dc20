"""Through the real server: with OTEL_METRICS_EXPORTER=otlp its metrics reach an OTLP receiver.

The receiver is a gRPC OTLP metrics service on loopback in this process (what a collector
listens with). The server's last export is its flush at shutdown, so the test stops the
server (from a thread: the receiver serves on this test's event loop) and then reads what
arrived, rather than waiting on the export interval.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2 as otlp
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc as otlp_grpc
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.server_process import ServerProcess
from testing.specs import command_spec

pytestmark = pytest.mark.e2e


class Receiver(otlp_grpc.MetricsServiceServicer):
    """Keeps every export request."""

    def __init__(self) -> None:
        self.requests: list[otlp.ExportMetricsServiceRequest] = []

    async def Export(
        self, request: otlp.ExportMetricsServiceRequest, context: Any
    ) -> otlp.ExportMetricsServiceResponse:
        self.requests.append(request)
        return otlp.ExportMetricsServiceResponse()

    def last_sum(self, name: str, **attributes: str) -> float | None:
        """The newest value of counter `name` at exactly `attributes` (None if never sent)."""
        found = None
        for request in self.requests:
            for resource in request.resource_metrics:
                for scope in resource.scope_metrics:
                    for metric in scope.metrics:
                        if metric.name != name:
                            continue
                        for point in metric.sum.data_points:
                            got = {a.key: a.value.string_value for a in point.attributes}
                            if got == attributes:
                                found = point.as_double or float(point.as_int)
        return found


@pytest.fixture
async def receiver() -> AsyncIterator[tuple[Receiver, int]]:
    server = grpc.aio.server()
    receiver = Receiver()
    otlp_grpc.add_MetricsServiceServicer_to_server(receiver, server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    yield receiver, port
    await server.stop(None)


async def test_rollouts_are_exported_over_otlp(
    tmp_path: Path, receiver: tuple[Receiver, int]
) -> None:
    collector, port = receiver
    server = ServerProcess(
        tmp_path / "state",
        env={
            "OTEL_METRICS_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
            "OTEL_EXPORTER_OTLP_INSECURE": "true",
            "OTEL_SERVICE_NAME": "rollout-service-otlp-test",
        },
    )
    server.start()
    try:
        async with grpc.aio.insecure_channel(server.target) as channel:
            stub = pb_grpc.RolloutServiceStub(channel)
            spec = command_spec("true", verify=("true",))
            reply = await stub.RunRollout(pb.RunRolloutRequest(spec=spec))
        assert reply.rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED
    finally:
        assert await asyncio.to_thread(server.stop) == 0, server.text()

    where = {"agent": "command", "backend": "local"}
    assert collector.last_sum("rollout.rollouts.started", **where) == 1
    assert collector.last_sum("rollout.rollouts.finished", status="succeeded", **where) == 1
    [resource] = {
        attribute.value.string_value
        for request in collector.requests
        for resource in request.resource_metrics
        for attribute in resource.resource.attributes
        if attribute.key == "service.name"
    }
    assert resource == "rollout-service-otlp-test"
