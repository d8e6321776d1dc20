"""OpenTelemetry metrics: the instruments the server records, and where they are exported.

    where                         turned on by                  default
    OTLP/gRPC, pushed             OTEL_METRICS_EXPORTER=otlp    off; endpoint, headers and
                                                                interval from OTEL_EXPORTER_OTLP_*
                                                                and OTEL_METRIC_EXPORT_INTERVAL
    stdout (debugging)            OTEL_METRICS_EXPORTER=console off
    Prometheus text, scraped      ROLLOUT_METRICS_LISTEN=PORT   off; a bare port is 127.0.0.1;
                                  (or HOST:PORT)                served by `api.metrics_port`
                                                                from `MetricsExport.registry`

With none of them on, the instruments come from a no-op provider: recording costs a call.

    instrument (Prometheus name)                       type            attributes
    rollout.rollouts.started (_total)                  counter         agent, backend
    rollout.rollouts.finished (_total)                 counter         status, error_kind,
                                                                       agent, backend
    rollout.phase.duration (_seconds)                  histogram, s    phase, agent
    rollout.queue.depth                                up-down counter -
    rollout.rollouts.running                           up-down counter -
    rollout.capacity.used / rollout.capacity.limit     up-down / gauge -
    rollout.sandboxes.live                             observed gauge  backend
    rollout.group.refills (_total)                     counter         error_kind
    rollout.proxy.calls (_total)                       counter         dialect, failed
    rollout.proxy.call.duration (_seconds)             histogram, s    dialect
    rollout.proxy.tokens (_total)                      counter         dialect, token_type
    rollout.proxy.pause.duration (_seconds)            histogram, s    dialect
    rollout.proxy.turns.missing_tokens (_total)        counter         dialect, missing
    rollout.watchers                                   up-down counter method

Every attribute is one of a closed set (phases, statuses, error kinds, dialects, and the agent
and backend names the registry knows): never a tenant, rollout id, task or label value, so a
caller can neither grow the number of series nor read another tenant's work from a scrape.

The `Metrics` object is built from a provider and handed down by constructor, rather than
taken from OpenTelemetry's global provider: the global one can be set once per process, so
tests could not each read their own. The capture proxy records nothing itself (it also runs
inside remote sandboxes, without OpenTelemetry): its calls are counted from the turns the
engine receives, from a local and a remote proxy alike.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from opentelemetry.metrics import (
    CallbackOptions,
    MeterProvider,
    NoOpMeterProvider,
    Observation,
    UpDownCounter,
)
from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider
from opentelemetry.sdk.metrics.export import (
    ConsoleMetricExporter,
    MetricReader,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import SERVICE_NAME, Resource

from service.config import Settings
from service.errors import ConfigError
from service.listen_address import host_and_port
from service.models import Turn

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

__all__ = ["Metrics", "MetricsExport", "metrics_address", "start_metrics_export"]

log = logging.getLogger(__name__)

_PHASE_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
_CALL_BUCKETS_S = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
_SETTING = "ROLLOUT_METRICS_LISTEN"

LiveSandboxes = Callable[[], Mapping[str, int]]
"""Live sandboxes by backend name, as the backends count them."""


class Metrics:
    """Every instrument of the server, recorded through the methods below."""

    def __init__(self, provider: MeterProvider | None = None) -> None:
        meter = (provider or NoOpMeterProvider()).get_meter("rollout-service")
        self._started = meter.create_counter(
            "rollout.rollouts.started", "{rollout}", "Rollouts admitted."
        )
        self._finished = meter.create_counter(
            "rollout.rollouts.finished", "{rollout}", "Rollouts ended, by status and error kind."
        )
        self._phase = meter.create_histogram(
            "rollout.phase.duration",
            "s",
            "Time a rollout spent in a phase (queued: waiting for a running slot).",
            explicit_bucket_boundaries_advisory=_PHASE_BUCKETS_S,
        )
        self._queued = meter.create_up_down_counter(
            "rollout.queue.depth", "{rollout}", "Rollouts admitted and waiting for a slot."
        )
        self._running = meter.create_up_down_counter(
            "rollout.rollouts.running", "{rollout}", "Rollouts holding a running slot."
        )
        self._capacity_used = meter.create_up_down_counter(
            "rollout.capacity.used",
            "{place}",
            "Places held: rollouts running or queued, and places groups reserved.",
        )
        self._capacity_limit = meter.create_gauge(
            "rollout.capacity.limit", "{place}", "Places the server holds at most."
        )
        self._live_sandboxes: LiveSandboxes = dict
        meter.create_observable_gauge(
            "rollout.sandboxes.live",
            [self._observe_sandboxes],
            "{sandbox}",
            "Sandboxes a backend holds now (warm ones included).",
        )
        self._refills = meter.create_counter(
            "rollout.group.refills", "{rollout}", "Group members started again, by why."
        )
        self._calls = meter.create_counter(
            "rollout.proxy.calls", "{call}", "Model calls through the capture proxy."
        )
        self._call_duration = meter.create_histogram(
            "rollout.proxy.call.duration",
            "s",
            "A model call's latency, request to last byte.",
            explicit_bucket_boundaries_advisory=_CALL_BUCKETS_S,
        )
        self._tokens = meter.create_counter(
            "rollout.proxy.tokens", "{token}", "Tokens of the calls (usage), by type."
        )
        self._paused = meter.create_histogram(
            "rollout.proxy.pause.duration",
            "s",
            "Time a call waited at a paused proxy (PauseModelCalls), for the calls that did.",
            explicit_bucket_boundaries_advisory=_PHASE_BUCKETS_S,
        )
        self._missing = meter.create_counter(
            "rollout.proxy.turns.missing_tokens",
            "{turn}",
            "Answered calls whose turn lacks token ids or logprobs (not trainable as is).",
        )
        self._watchers = meter.create_up_down_counter(
            "rollout.watchers", "{watcher}", "Open watch streams."
        )

    def rollout_started(self, *, agent: str, backend: str) -> None:
        self._started.add(1, {"agent": agent, "backend": backend})

    def rollout_finished(
        self, *, status: str, error_kind: str | None, agent: str, backend: str
    ) -> None:
        """`error_kind` None for a rollout without an error (the attribute is then absent)."""
        attributes = {"status": status, "agent": agent, "backend": backend}
        if error_kind is not None:
            attributes["error_kind"] = error_kind
        self._finished.add(1, attributes)

    def phase_ended(self, phase: str, *, agent: str, seconds: float) -> None:
        self._phase.record(seconds, {"phase": phase, "agent": agent})

    def set_capacity(self, places: int) -> None:
        self._capacity_limit.set(places)

    def hold_places(self, places: int) -> None:
        """Places taken (a rollout admitted, a group's reservation); negative: given back."""
        self._capacity_used.add(places)

    def in_queue(self) -> contextlib.AbstractContextManager[None]:
        """A rollout waiting for a running slot while the block runs."""
        return _held(self._queued, {})

    def slot_running(self, rollouts: int) -> None:
        """A rollout took a running slot (1), or gave it back (-1): at its end, or for a
        while as its model calls are all paused (then it is in neither this nor the queue
        until it waits for a slot again)."""
        self._running.add(rollouts)

    def observe_sandboxes(self, live: LiveSandboxes) -> None:
        """Read live sandboxes from `live` at each collection (from the collector's thread)."""
        self._live_sandboxes = live

    def group_refilled(self, error_kind: str) -> None:
        self._refills.add(1, {"error_kind": error_kind})

    def turn(self, turn: Turn) -> None:
        """Count one completed model call from its turn."""
        dialect = {"dialect": turn.dialect.value}
        self._calls.add(1, {**dialect, "failed": turn.failed})
        self._call_duration.record(turn.latency_s, dialect)
        self._tokens.add(turn.usage.prompt_tokens, {**dialect, "token_type": "prompt"})
        self._tokens.add(turn.usage.completion_tokens, {**dialect, "token_type": "completion"})
        if turn.paused_s > 0:
            self._paused.record(turn.paused_s, dialect)
        if turn.failed:
            return  # a failed call has no tokens to miss
        if not turn.token_ids_present:
            self._missing.add(1, {**dialect, "missing": "token_ids"})
        if not turn.logprobs_present:
            self._missing.add(1, {**dialect, "missing": "logprobs"})

    def watching(self, method: str) -> contextlib.AbstractContextManager[None]:
        """An open watch stream (`method`: the RPC's name) while the block runs."""
        return _held(self._watchers, {"method": method})

    def _observe_sandboxes(self, options: CallbackOptions) -> Iterable[Observation]:
        return [
            Observation(count, {"backend": name}) for name, count in self._live_sandboxes().items()
        ]


@contextlib.contextmanager
def _held(counter: UpDownCounter, attributes: Mapping[str, str]) -> Iterator[None]:
    counter.add(1, attributes)
    try:
        yield
    finally:
        counter.add(-1, attributes)


@dataclass
class MetricsExport:
    """The provider the settings chose, and the Prometheus registry if one is read."""

    provider: MeterProvider
    registry: CollectorRegistry | None = None
    """The instruments as Prometheus collects them (None when metrics_listen is off): a
    registry of its own, without prometheus_client's default collectors of the process
    (memory, descriptors, start time), its garbage collector and Python's version."""

    def shutdown(self) -> None:
        """Flush what is pending."""
        if isinstance(self.provider, SdkMeterProvider):
            self.provider.shutdown()


def metrics_address(listen: str) -> tuple[str, int]:
    """ROLLOUT_METRICS_LISTEN as host and port: a bare PORT is on 127.0.0.1."""
    parsed = host_and_port(listen if ":" in listen else f"127.0.0.1:{listen}")
    if parsed is None or parsed[0] is None or parsed[1] > 65535:
        raise ConfigError(f"{_SETTING} is {listen!r}: expected PORT or HOST:PORT (e.g. 9464)")
    return parsed[0], parsed[1]


def start_metrics_export(
    settings: Settings, environ: Mapping[str, str] = os.environ
) -> MetricsExport:
    """Open the exporters the settings ask for (the Prometheus endpoint's registry, not its
    port: `api.metrics_port` serves it)."""
    readers: list[MetricReader] = []
    exporter = environ.get("OTEL_METRICS_EXPORTER", "none").strip().lower()
    if exporter == "otlp":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter

        readers.append(PeriodicExportingMetricReader(OTLPMetricExporter()))
    elif exporter == "console":
        readers.append(PeriodicExportingMetricReader(ConsoleMetricExporter()))
    elif exporter not in ("", "none"):
        log.warning(
            "OTEL_METRICS_EXPORTER=%s is not supported (use otlp, console or none)", exporter
        )
    registry = None
    if settings.metrics_listen:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from prometheus_client import CollectorRegistry

        metrics_address(settings.metrics_listen)  # refuses a malformed one before anything
        registry = CollectorRegistry()
        readers.append(PrometheusMetricReader(registry=registry))
    if not readers:
        return MetricsExport(NoOpMeterProvider())
    resource = Resource.create({SERVICE_NAME: environ.get("OTEL_SERVICE_NAME", "rollout-service")})
    return MetricsExport(SdkMeterProvider(readers, resource=resource), registry)
