"""Every rollout is a trace and every phase a span, one cancelled while queued included; and the
queued-phase histogram counts such a rollout's wait."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.server_process import ServerProcess, running
from testing.specs import command_spec
from tests.e2e.processes import eventually
from tests.telemetry.console_spans import console_spans
from tests.telemetry.test_metrics_endpoint import metrics_url, scrape, value

pytestmark = pytest.mark.e2e


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    """One running slot, so a second rollout waits QUEUED; spans printed, metrics scraped."""
    server = ServerProcess(
        tmp_path / "state",
        env={
            "ROLLOUT_MAX_RUNNING": "1",
            "ROLLOUT_METRICS_LISTEN": "0",
            "OTEL_TRACES_EXPORTER": "console",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
        },
    )
    with running(server):
        yield server


@pytest.fixture
async def stub(server: ServerProcess) -> AsyncIterator[pb_grpc.RolloutServiceAsyncStub]:
    async with grpc.aio.insecure_channel(server.target) as channel:
        yield pb_grpc.RolloutServiceStub(channel)


def _trace_of(server: ServerProcess, rollout_id: str) -> list[dict[str, Any]]:
    """The rollout's spans: of the trace whose `rollout` span names `rollout_id`, all but the
    RPC's (`/rollout.v1.RolloutService/StartRollout`, which the rollout continues)."""
    spans = console_spans(server.text())
    roots = [
        s
        for s in spans
        if s["name"] == "rollout" and s["attributes"].get("rollout.id") == rollout_id
    ]
    if not roots:
        return []
    trace_id = roots[0]["context"]["trace_id"]
    return [
        s for s in spans if s["context"]["trace_id"] == trace_id and not s["name"].startswith("/")
    ]


async def test_a_rollout_cancelled_while_queued_is_a_trace_and_counted(
    server: ServerProcess, stub: pb_grpc.RolloutServiceAsyncStub
) -> None:
    running = await stub.StartRollout(pb.StartRolloutRequest(spec=command_spec("sleep 60")))
    queued = await stub.StartRollout(pb.StartRolloutRequest(spec=command_spec("true")))
    assert queued.rollout.status == pb.ROLLOUT_STATUS_QUEUED
    cancelled = await stub.CancelRollout(pb.CancelRolloutRequest(rollout_id=queued.rollout.id))
    assert cancelled.rollout.status == pb.ROLLOUT_STATUS_CANCELLED
    await stub.CancelRollout(pb.CancelRolloutRequest(rollout_id=running.rollout.id))

    url = metrics_url(server)
    samples = await scrape(url)
    assert value(samples, "rollout_phase_duration_seconds_count", phase="queued") == 2
    assert value(samples, "rollout_phase_duration_seconds_count", phase="teardown") == 1

    await eventually(lambda: _trace_of(server, queued.rollout.id))
    await eventually(lambda: _trace_of(server, running.rollout.id))
    spans = _trace_of(server, queued.rollout.id)
    assert sorted(s["name"] for s in spans) == ["phase.queued", "rollout"]
    [root] = [s for s in spans if s["name"] == "rollout"]
    assert root["attributes"]["rollout.status"] == "cancelled"
    ran = {s["name"] for s in _trace_of(server, running.rollout.id)}
    assert {"rollout", "phase.queued", "phase.creating_sandbox", "phase.teardown"} <= ran


def test_span_parser_reads_console_exporter_output() -> None:
    text = 'log line\n{\n    "name": "rollout",\n    "context": {"trace_id": "0x1"}\n}\nmore\n'
    assert console_spans(text) == [{"name": "rollout", "context": {"trace_id": "0x1"}}]
