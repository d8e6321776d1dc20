"""The instruments read back in process (an in-memory reader), and the endpoint's settings.

The batch through a real server and its scrape are `test_metrics_endpoint`; here, what a
turn, a watch and the backends' counts become, exactly, and every bad setting named.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.metrics import NoOpMeterProvider
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    HistogramDataPoint,
    InMemoryMetricReader,
    NumberDataPoint,
)
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from service.api.transport import check_metrics_exposure
from service.config import Settings
from service.errors import ConfigError
from service.models import Dialect, Turn
from service.telemetry.metrics import Metrics, metrics_address, start_metrics_export

DASHBOARD = Path(__file__).parents[2] / "deploy" / "grafana" / "rollout-service.json"

Points = dict[tuple[str, frozenset[tuple[str, Any]]], Any]


@pytest.fixture
def reader() -> InMemoryMetricReader:
    return InMemoryMetricReader()


@pytest.fixture
def metrics(reader: InMemoryMetricReader) -> Metrics:
    return Metrics(MeterProvider([reader]))


def points(reader: InMemoryMetricReader) -> Points:
    """Every data point by (instrument name, attributes): a number, or a histogram point."""
    data = reader.get_metrics_data()
    assert data is not None
    found: Points = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    key = (metric.name, frozenset((point.attributes or {}).items()))
                    assert isinstance(point, HistogramDataPoint | NumberDataPoint)
                    found[key] = point if isinstance(point, HistogramDataPoint) else point.value
    return found


def turn(**fields: Any) -> Turn:
    return Turn.model_validate({"index": 0, "upstream_status": 200, **fields})


def test_turns_become_calls_latency_tokens_and_missing_token_data(
    reader: InMemoryMetricReader, metrics: Metrics
) -> None:
    usage = {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}
    metrics.turn(turn(latency_s=0.5, usage=usage, token_ids_present=True, logprobs_present=True))
    metrics.turn(turn(latency_s=1.5, usage=usage, dialect=Dialect.MESSAGES))  # no ids, logprobs
    metrics.turn(turn(latency_s=2.0, upstream_status=503, upstream_error="busy", paused_s=4.0))

    got = points(reader)
    chat, messages = ("dialect", "chat_completions"), ("dialect", "messages")
    calls = "rollout.proxy.calls"
    assert got[(calls, frozenset({chat, ("failed", False)}))] == 1
    assert got[(calls, frozenset({chat, ("failed", True)}))] == 1
    assert got[(calls, frozenset({messages, ("failed", False)}))] == 1
    duration = got[("rollout.proxy.call.duration", frozenset({chat}))]
    assert (duration.count, duration.sum) == (2, 2.5)
    tokens = "rollout.proxy.tokens"
    assert got[(tokens, frozenset({chat, ("token_type", "prompt")}))] == 7
    assert got[(tokens, frozenset({messages, ("token_type", "completion")}))] == 3
    missing = {
        dict(attributes)["missing"]: count
        for (name, attributes), count in got.items()
        if name == "rollout.proxy.turns.missing_tokens"
    }
    # The failed call is not counted as missing anything: it had nothing to send.
    assert missing == {"token_ids": 1, "logprobs": 1}
    paused = [p for (name, _), p in got.items() if name == "rollout.proxy.pause.duration"]
    assert [(p.count, p.sum) for p in paused] == [(1, 4.0)]  # only the call that waited


def record_each(metrics: Metrics) -> None:
    """One value on every instrument."""
    metrics.observe_sandboxes(lambda: {"local": 1})
    metrics.set_capacity(10)
    metrics.rollout_started(agent="command", backend="local")
    metrics.rollout_finished(status="failed", error_kind="setup", agent="command", backend="local")
    metrics.phase_ended("setup", agent="command", seconds=1.0)
    metrics.hold_places(1)
    metrics.group_refilled("sandbox")
    metrics.turn(turn(latency_s=0.1, paused_s=1.0))
    metrics.slot_running(1)
    with metrics.watching("WatchRollout"), metrics.in_queue():
        pass


def test_the_dashboard_queries_every_family_as_the_exporter_spells_it() -> None:
    # On prometheus_client's default registry, until the provider shuts its reader down.
    provider = MeterProvider([PrometheusMetricReader()])
    try:
        record_each(Metrics(provider))
        families = [
            family
            for family in text_string_to_metric_families(generate_latest(REGISTRY).decode())
            if family.name.startswith("rollout_")
        ]
    finally:
        provider.shutdown()
    exported = {sample.name for family in families for sample in family.samples}
    panels = json.loads(DASHBOARD.read_text())["panels"]
    exprs = [target["expr"] for panel in panels for target in panel.get("targets", [])]
    queried = {name for expr in exprs for name in re.findall(r"rollout_[a-z_]+", expr)}
    assert queried <= exported, queried - exported
    assert len(families) == 15  # one per instrument
    assert all(any(name.startswith(f.name) for name in queried) for f in families), queried


def test_rollouts_phases_places_watchers_and_live_sandboxes(
    reader: InMemoryMetricReader, metrics: Metrics
) -> None:
    live = {"local": 3}
    metrics.observe_sandboxes(lambda: live)
    metrics.set_capacity(264)
    metrics.rollout_started(agent="oracle", backend="local")
    metrics.rollout_finished(status="failed", error_kind="setup", agent="oracle", backend="local")
    metrics.rollout_finished(status="succeeded", error_kind=None, agent="oracle", backend="local")
    metrics.phase_ended("setup", agent="oracle", seconds=0.25)
    metrics.hold_places(5)
    metrics.hold_places(-1)
    metrics.group_refilled("sandbox")
    with metrics.watching("WatchGroup"), metrics.in_queue():
        inside = points(reader)
    live["local"] = 0
    after = points(reader)

    assert inside[("rollout.watchers", frozenset({("method", "WatchGroup")}))] == 1
    assert after[("rollout.watchers", frozenset({("method", "WatchGroup")}))] == 0
    assert (
        inside[("rollout.queue.depth", frozenset())],
        after[("rollout.queue.depth", frozenset())],
    ) == (1, 0)
    assert inside[("rollout.sandboxes.live", frozenset({("backend", "local")}))] == 3
    assert after[("rollout.sandboxes.live", frozenset({("backend", "local")}))] == 0
    where = {("agent", "oracle"), ("backend", "local")}
    finished = "rollout.rollouts.finished"
    assert after[("rollout.rollouts.started", frozenset(where))] == 1
    assert (
        after[(finished, frozenset(where | {("status", "failed"), ("error_kind", "setup")}))] == 1
    )
    assert after[(finished, frozenset(where | {("status", "succeeded")}))] == 1
    setup = after[("rollout.phase.duration", frozenset({("phase", "setup"), ("agent", "oracle")}))]
    assert (setup.count, setup.sum) == (1, 0.25)
    assert after[("rollout.capacity.used", frozenset())] == 4
    assert after[("rollout.capacity.limit", frozenset())] == 264
    assert after[("rollout.group.refills", frozenset({("error_kind", "sandbox")}))] == 1


@pytest.mark.parametrize(
    ("listen", "address"),
    [("9464", ("127.0.0.1", 9464)), ("0.0.0.0:9", ("0.0.0.0", 9)), ("[::1]:0", ("::1", 0))],
)
def test_a_bare_port_is_loopback(listen: str, address: tuple[str, int]) -> None:
    assert metrics_address(listen) == address


@pytest.mark.parametrize("listen", ["abc", ":9464", "127.0.0.1:", "127.0.0.1:70000", "unix:/x"])
def test_a_bad_address_is_named(listen: str) -> None:
    with pytest.raises(
        ConfigError, match=r"ROLLOUT_METRICS_LISTEN is .*expected PORT or HOST:PORT"
    ):
        metrics_address(listen)


def test_off_loopback_needs_allow_insecure_listen(caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(
        ConfigError, match=r"0\.0\.0\.0:9464 \(ROLLOUT_METRICS_LISTEN.*not a loopback"
    ):
        check_metrics_exposure(Settings(metrics_listen="0.0.0.0:9464"))
    check_metrics_exposure(Settings(metrics_listen="127.0.0.1:9464"))
    check_metrics_exposure(Settings(metrics_listen="0.0.0.0:9464", allow_insecure_listen=True))
    assert "serving 0.0.0.0:9464 (ROLLOUT_METRICS_LISTEN" in caplog.text


def test_off_loopback_scrape_tokens_suffice(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tokens = tmp_path / "scrape-tokens"
    check_metrics_exposure(Settings(metrics_listen="0.0.0.0:9464", metrics_token_file=tokens))
    assert "ROLLOUT_METRICS_LISTEN" not in caplog.text


def test_nothing_exported_unless_asked() -> None:
    off = start_metrics_export(Settings(), {})
    assert isinstance(off.provider, NoOpMeterProvider)
    assert off.registry is None
    console = start_metrics_export(Settings(), {"OTEL_METRICS_EXPORTER": "console"})
    assert isinstance(console.provider, MeterProvider)
    console.shutdown()
