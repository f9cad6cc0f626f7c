"""Observability: OpenTelemetry traces and Prometheus metrics for every layer.

* :mod:`~orchestration.telemetry._tracing` — attribute names, the redacting tracer,
  :func:`~orchestration.telemetry._tracing.add_event` for layer events;
* :mod:`~orchestration.telemetry.metrics` — every ``orchestration_*`` metric;
* :mod:`~orchestration.telemetry.serving` — :func:`serve_metrics` for ``/metrics``;
* :mod:`~orchestration.telemetry.exporters` — the CLI's span exporters.
"""

from __future__ import annotations

from dataclasses import dataclass

from opentelemetry.trace import Tracer, TracerProvider
from prometheus_client import CollectorRegistry

from orchestration.telemetry._tracing import get_tracer
from orchestration.telemetry.metrics import Metrics
from orchestration.telemetry.serving import MetricsServer, multiprocess_registry, serve_metrics


@dataclass
class Telemetry:
    """The tracer and metrics one orchestrator emits to."""

    tracer: Tracer
    metrics: Metrics

    @classmethod
    def create(
        cls,
        tracer_provider: TracerProvider | None = None,
        registry: CollectorRegistry | None = None,
    ) -> Telemetry:
        return cls(get_tracer(tracer_provider), Metrics.for_registry(registry))


__all__ = ["Metrics", "MetricsServer", "Telemetry", "multiprocess_registry", "serve_metrics"]
