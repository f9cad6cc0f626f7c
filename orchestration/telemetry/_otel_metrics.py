"""OpenTelemetry metrics: the GenAI client metrics of the conventions, and dagwright's own.

Beside the Prometheus metrics (:mod:`~orchestration.telemetry.metrics`, scraped), the
observer records OTel instruments on the ``MeterProvider`` the service passes to the
:class:`~orchestration.Orchestrator` (default: the global one, a no-op until the service
installs one), so a service that exports OTLP gets the same facts without a scrape:

* ``gen_ai.client.token.usage`` and ``gen_ai.client.operation.duration`` — the GenAI
  semantic conventions' client metrics, per LLM call, with their attributes and their
  recommended bucket boundaries;
* ``dagwright.*`` — runs, steps, tool calls, per-layer decisions, budgets and LLM cost,
  with bounded attributes only (never parameters, queries or ids).

Names and units come from ``opentelemetry-semantic-conventions`` where it defines them.
"""

from __future__ import annotations

import weakref
from typing import Any

from opentelemetry import metrics
from opentelemetry.metrics import Meter, MeterProvider
from opentelemetry.semconv._incubating.metrics import gen_ai_metrics

from orchestration._version import __version__

_METER_NAME = "dagwright"

# the GenAI conventions' advice for these two histograms
TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304,
                 16777216, 67108864)
DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48,
                    40.96, 81.92)
_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class OtelInstruments:
    """The instruments of one meter. Use :meth:`for_provider` to get them."""

    def __init__(self, meter: Meter) -> None:
        self.token_usage = meter.create_histogram(
            gen_ai_metrics.GEN_AI_CLIENT_TOKEN_USAGE, unit="{token}",
            description="Number of input and output tokens used.",
            explicit_bucket_boundaries_advisory=list(TOKEN_BUCKETS))
        self.operation_duration = meter.create_histogram(
            gen_ai_metrics.GEN_AI_CLIENT_OPERATION_DURATION, unit="s",
            description="GenAI operation duration.",
            explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS))
        self.runs = meter.create_counter(
            "dagwright.runs", unit="{run}", description="Runs by final status.")
        self.run_duration = meter.create_histogram(
            "dagwright.run.duration", unit="s", description="Wall time of runs.",
            explicit_bucket_boundaries_advisory=list(_SECONDS))
        self.steps = meter.create_counter(
            "dagwright.steps", unit="{step}", description="Steps by final status.")
        self.tool_calls = meter.create_counter(
            "dagwright.tool.calls", unit="{call}", description="Tool calls sent, by outcome.")
        self.tool_call_duration = meter.create_histogram(
            "dagwright.tool.call.duration", unit="s", description="Latency of tool calls.",
            explicit_bucket_boundaries_advisory=list(_SECONDS))
        self.layer_events = meter.create_counter(
            "dagwright.layer.events", unit="{event}",
            description="Decisions of the defense layers, by layer and event.")
        self.budget_exceeded = meter.create_counter(
            "dagwright.budget.exceeded", unit="{run}", description="Runs stopped by a budget.")
        self.llm_cost = meter.create_counter(
            "dagwright.llm.cost", unit="1",
            description="LLM cost priced with ORCH_LLM_PRICES (the table's currency).")

    @classmethod
    def for_provider(cls, provider: MeterProvider | None = None) -> OtelInstruments:
        """The instruments on ``provider``'s dagwright meter (the global provider's when
        None), made once per provider: creating an instrument twice makes the SDK warn."""
        target = provider if provider is not None else metrics.get_meter_provider()
        try:
            found = _BY_PROVIDER.get(target)
        except TypeError:  # a provider that cannot be weakly referenced: no cache
            return cls(target.get_meter(_METER_NAME, __version__))
        if found is None:
            found = cls(target.get_meter(_METER_NAME, __version__))
            _BY_PROVIDER[target] = found
        return found


_BY_PROVIDER: weakref.WeakKeyDictionary[Any, OtelInstruments] = weakref.WeakKeyDictionary()
