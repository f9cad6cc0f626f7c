"""Observability: OpenTelemetry traces and metrics, and Prometheus metrics, for every layer.

* :mod:`~orchestration.telemetry._tracing` — attribute names, the redacting tracer,
  :func:`~orchestration.telemetry._tracing.add_event` for layer events;
* :mod:`~orchestration.telemetry.metrics` — every ``orchestration_*`` Prometheus metric;
* :mod:`~orchestration.telemetry._otel_metrics` — the OTel instruments (GenAI client
  metrics and ``dagwright.*``) on the service's ``MeterProvider``;
* :mod:`~orchestration.telemetry.serving` — :func:`serve_metrics` for ``/metrics``;
* :mod:`~orchestration.telemetry.exporters` — the CLI's span exporters.
"""

from __future__ import annotations

from dataclasses import dataclass

from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import Tracer, TracerProvider
from prometheus_client import CollectorRegistry

from orchestration.telemetry._otel_metrics import OtelInstruments
from orchestration.telemetry._tracing import get_tracer
from orchestration.telemetry.metrics import Metrics
from orchestration.telemetry.serving import MetricsServer, multiprocess_registry, serve_metrics


@dataclass
class Telemetry:
    """The tracer, Prometheus metrics and OTel instruments one orchestrator emits to."""

    tracer: Tracer
    metrics: Metrics
    instruments: OtelInstruments

    @classmethod
    def create(
        cls,
        tracer_provider: TracerProvider | None = None,
        registry: CollectorRegistry | None = None,
        meter_provider: MeterProvider | None = None,
    ) -> Telemetry:
        return cls(get_tracer(tracer_provider), Metrics.for_registry(registry),
                   OtelInstruments.for_provider(meter_provider))


__all__ = ["Metrics", "MetricsServer", "Telemetry", "multiprocess_registry", "serve_metrics"]
