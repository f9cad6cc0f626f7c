"""Prometheus metrics, all named ``orchestration_*`` so the reference PromQL works as written.

Labels are bounded: tool, capability, layer, outcome, category, purpose, status — never
parameters, queries or ids. Metrics are registered once per ``CollectorRegistry``; two
orchestrators sharing a registry share the same metric objects.
"""

from __future__ import annotations

import weakref
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics import MetricWrapperBase

__all__ = ["Metrics"]

_SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
# LLM calls take longer than tool calls: finer where they usually land (0.1 s - 60 s)
_LLM_SECONDS_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_TC = ("tool", "capability")


class Metrics:
    """The metric objects of one registry. Use :meth:`for_registry` to get them."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.registry = registry
        """Where these metrics are registered (what a ``/metrics`` endpoint serves)."""
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        self.runs = Counter("orchestration_runs", "Runs by final status.", ["status"], registry=r)
        self.run_duration = Histogram(
            "orchestration_run_duration_seconds", "Wall time of runs.", ["status"],
            buckets=_SECONDS_BUCKETS, registry=r)
        self.steps = Counter(
            "orchestration_steps", "Steps by final status.", [*_TC, "status"], registry=r)
        self.step_duration = Histogram(
            "orchestration_step_duration_seconds", "Wall time of steps, retries included.",
            list(_TC), buckets=_SECONDS_BUCKETS, registry=r)
        self.tool_calls = Counter(
            "orchestration_tool_calls", "Tool calls sent, by outcome.", [*_TC, "outcome"],
            registry=r)
        self.tool_call_duration = Histogram(
            "orchestration_tool_call_duration_seconds", "Latency of single tool calls.",
            list(_TC), buckets=_SECONDS_BUCKETS, registry=r)
        self.tool_errors = Counter(
            "orchestration_tool_errors", "Failed step attempts by error category.",
            [*_TC, "category"], registry=r)
        self.llm_calls = Counter(
            "orchestration_llm_calls", "LLM calls by purpose and outcome.",
            ["purpose", "outcome"], registry=r)
        self.llm_tokens = Counter(
            "orchestration_llm_tokens", "LLM tokens by purpose and direction (input/output).",
            ["purpose", "direction"], registry=r)
        self.llm_latency = Histogram(
            "orchestration_llm_latency_seconds", "Latency of LLM calls.", ["purpose"],
            buckets=_SECONDS_BUCKETS, registry=r)
        self.planner_retries = Counter(
            "orchestration_planner_retries", "Planner calls repeated, by reason.", ["reason"],
            registry=r)
        self.type_coercion_applied = Counter(
            "orchestration_type_coercion_applied",
            "Layer 2: tool calls whose parameters were coerced.", list(_TC), registry=r)
        self.validation_feedback_attempts = Counter(
            "orchestration_validation_feedback_attempts", "Layer 3 corrections asked.",
            list(_TC), registry=r)
        self.validation_feedback_success = Counter(
            "orchestration_validation_feedback_success",
            "Layer 3 corrections after which the call succeeded.", list(_TC), registry=r)
        self.validation_feedback_failed = Counter(
            "orchestration_validation_feedback_failed",
            "Layer 3 corrections that could not fix the call.", list(_TC), registry=r)
        self.semantic_retry_attempts = Counter(
            "orchestration_semantic_retry_attempts", "Layer 4 re-resolutions asked.",
            list(_TC), registry=r)
        self.semantic_retry_success = Counter(
            "orchestration_semantic_retry_success",
            "Layer 4 re-resolutions after which the call succeeded.", list(_TC), registry=r)
        self.semantic_retry_independent_step = Counter(
            "orchestration_semantic_retry_independent_step",
            "Layer 4 re-resolutions of steps without dependencies.", ["capability"], registry=r)
        # In seconds, as the Prometheus naming conventions ask (it was ..._latency_ms
        # before; docs/observability.md has the migration for dashboards)
        self.semantic_retry_llm_latency = Histogram(
            "orchestration_semantic_retry_llm_latency_seconds",
            "Latency of layer 4 LLM calls.", buckets=_LLM_SECONDS_BUCKETS, registry=r)
        self.transient_overrides = Counter(
            "orchestration_transient_override",
            "Layer 4 declared an error transient, overriding retryable=false.", list(_TC),
            registry=r)
        self.budget_exceeded = Counter(
            "orchestration_budget_exceeded",
            "Runs stopped by a budget (llm_calls, tokens, cost, capability_calls).",
            ["budget"], registry=r)
        self.llm_cost = Counter(
            "orchestration_llm_cost",
            "LLM cost priced with ORCH_LLM_PRICES (the table's currency), by purpose.",
            ["purpose"], registry=r)
        self.corrections_grounded = Counter(
            "orchestration_corrections_grounded",
            "Corrected parameter values whose claimed source the engine verified, by kind "
            "(query, upstream, derived, tool_hint, removed).", [*_TC, "kind"], registry=r)
        self.corrections_ungrounded = Counter(
            "orchestration_corrections_ungrounded",
            "Corrected parameter values whose source could not be verified (not sent unless "
            "grounded_corrections is off), by reason.", [*_TC, "reason"], registry=r)
        self.plan_cache = Counter(
            "orchestration_plan_cache",
            "Plan cache lookups by outcome (hit, miss, invalid, error) and plans kept (stored).",
            ["outcome"], registry=r)
        self.circuit_state = Gauge(
            "orchestration_circuit_state",
            "Circuit breaker state per tool: 0 closed, 1 open, 2 half-open.", ["tool"],
            # several worker processes (PROMETHEUS_MULTIPROC_DIR): the highest value among
            # the live ones (above 0 while any worker's breaker is not closed), one series
            # per tool as the dashboard and alerts read it (the default, "all", would add
            # a pid label and keep the states of workers that are gone)
            multiprocess_mode="livemax", registry=r)
        self.circuit_transitions = Counter(
            "orchestration_circuit_transitions",
            "Circuit breaker state changes per tool, by the state entered.", ["tool", "state"],
            registry=r)
        self.resilience_retries = Counter(
            "orchestration_resilience_retries",
            "Same-parameter retries after transport faults, by category.",
            [*_TC, "category"], registry=r)

    def child(self, metric: MetricWrapperBase, *labels: str) -> Any:
        """``metric.labels(*labels)``, cached.

        ``labels()`` takes a lock and checks its arguments on every call, which costs more
        than the increment itself on the executor's per-step path. Label values are bounded
        by design (tool, capability, outcome, category, purpose), and so is this cache.
        """
        key = (id(metric), labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found

    @classmethod
    def for_registry(cls, registry: CollectorRegistry | None = None) -> Metrics:
        """The metrics registered on ``registry`` (the default registry when None)."""
        reg = registry if registry is not None else REGISTRY
        existing = _BY_REGISTRY.get(reg)
        if existing is None:
            existing = cls(reg)
            _BY_REGISTRY[reg] = existing
        return existing


_BY_REGISTRY: weakref.WeakKeyDictionary[CollectorRegistry, Metrics] = weakref.WeakKeyDictionary()
