"""Span exporters chosen by configuration, for the CLI (never installed globally).

``ORCH_OTEL_EXPORTER`` selects ``none`` (no provider at all), ``console`` (spans printed
as JSON on stderr) or ``otlp`` (OTLP over HTTP/protobuf; the ``otlp`` extra).
The standard ``OTEL_*`` variables apply: ``OTEL_SERVICE_NAME`` and
``OTEL_RESOURCE_ATTRIBUTES`` name the resource, ``OTEL_TRACES_SAMPLER`` picks the
sampler, ``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` /
``..._HEADERS`` / ``..._TIMEOUT`` configure OTLP, and ``OTEL_SDK_DISABLED=true`` turns
tracing off.

A library user builds their own provider and passes it to the ``Orchestrator``.
"""

from __future__ import annotations

import os
import sys
from typing import TextIO

from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

from orchestration._extras import needs_extra
from orchestration.config import OrchestratorConfig
from orchestration.errors import ConfigError

__all__ = ["tracer_provider_from_config"]


def _otlp_exporter() -> SpanExporter:
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError as exc:
        raise ConfigError(needs_extra("ORCH_OTEL_EXPORTER=otlp", "otlp", exc.name)) from exc
    return OTLPSpanExporter()  # endpoint, headers, timeout from OTEL_EXPORTER_OTLP_*


def tracer_provider_from_config(
    config: OrchestratorConfig, *, console_out: TextIO | None = None
) -> TracerProvider | None:
    """A new (not global) provider exporting as configured, or None for ``none``.

    Call ``shutdown()`` on it before the process exits so batched spans are flushed.
    """
    if config.otel_exporter == "none" or os.environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return None
    attributes = {} if os.environ.get("OTEL_SERVICE_NAME") else {SERVICE_NAME: "dagwright"}
    provider = TracerProvider(resource=Resource.create(attributes))
    exporter: SpanExporter
    if config.otel_exporter == "console":
        exporter = ConsoleSpanExporter(out=console_out or sys.stderr)
    else:
        exporter = _otlp_exporter()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider
