"""Telemetry: OpenTelemetry tracing (`setup`) and the service's metrics (`metrics`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from service.door import door

if TYPE_CHECKING:
    from service.telemetry.metrics import Metrics, metrics_address, start_metrics_export
    from service.telemetry.setup import setup_tracing

__all__ = ["Metrics", "metrics_address", "setup_tracing", "start_metrics_export"]

__getattr__ = door(__name__)
