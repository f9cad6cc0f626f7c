"""Observability: OpenTelemetry traces and Prometheus metrics for every layer."""

from __future__ import annotations

from dataclasses import dataclass

from opentelemetry.trace import Tracer, TracerProvider
from prometheus_client import CollectorRegistry

from orchestration.telemetry.metrics import Metrics
from orchestration.telemetry.tracing import get_tracer


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


__all__ = ["Metrics", "Telemetry"]
