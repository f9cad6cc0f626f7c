"""The retry policy (backoff, seeded jitter, merge order) and the resilience decision matrix,
driven through the Orchestrator against the demo tools over real HTTP."""

from __future__ import annotations

import random
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from orchestration import (
    Catalog,
    CatalogError,
    ErrorCategory,
    Orchestrator,
    OrchestratorConfig,
    ScriptedLLM,
    StepFailed,
)
from orchestration.clock import ManualClock
from orchestration.demo.tools import DemoTools, Drop, Hang, ServiceUnavailable, Status
from orchestration.retry_policy import RetryPolicy

QUOTE = {"steps": [{"id": "q", "tool": "stocks", "capability": "quote",
                    "params": {"symbol": "MSFT"}}]}


def run(catalog: Catalog, plan: dict[str, Any], registry: CollectorRegistry,
        clock: ManualClock, tracer_provider: TracerProvider | None = None,
        **config: Any) -> Any:
    orch = Orchestrator(catalog=catalog, llm=ScriptedLLM([plan]), registry=registry,
                        clock=clock, tracer_provider=tracer_provider,
                        config=OrchestratorConfig(synthesis_enabled=False, **config))
    return orch.run("q")


# --- the policy ------------------------------------------------------------------------------

@pytest.mark.parametrize(("backoff", "expected"), [
    ("constant", [0.5, 0.5, 0.5, 0.5, 0.5]),
    ("linear", [0.5, 1.0, 1.5, 2.0, 2.5]),
    ("exponential", [0.5, 1.0, 2.0, 3.0, 3.0]),
])
def test_backoff_strategies_and_cap(backoff: str, expected: list[float]) -> None:
    policy = RetryPolicy(backoff=backoff, base_delay_s=0.5, max_delay_s=3.0)  # type: ignore[arg-type]
    assert [policy.delay(n) for n in range(1, 6)] == expected
    assert policy.delay(10_000) == (3.0 if backoff != "constant" else 0.5)  # no overflow


def test_seeded_jitter_is_reproducible_bounded_and_independent_of_global_random() -> None:
    policy = RetryPolicy(backoff="constant", base_delay_s=1.0, max_delay_s=10, jitter=0.3, seed=42)
    first = [policy.delay(n, "stocks.quote:q") for n in range(1, 40)]
    random.seed(0)
    random.random()
    again = [RetryPolicy(**policy.model_dump()).delay(n, "stocks.quote:q") for n in range(1, 40)]
    assert first == again
    assert all(0.7 <= d <= 1.3 for d in first) and len(set(first)) > 30
    assert first != [policy.delay(n, "stocks.quote:other") for n in range(1, 40)]
    other_seed = policy.model_copy(update={"seed": 43})
    assert first != [other_seed.delay(n, "stocks.quote:q") for n in range(1, 40)]
    capped = RetryPolicy(backoff="constant", base_delay_s=2.0, max_delay_s=2.0, jitter=1.0)
    assert all(capped.delay(n, "k") <= 2.0 for n in range(1, 50))


def test_rate_limit_delay_prefers_retry_after_capped() -> None:
    policy = RetryPolicy(base_delay_s=0.2, retry_after_cap_s=5)
    assert policy.rate_limit_delay(2.0, 1) == 2.0
    assert policy.rate_limit_delay(60.0, 1) == 5.0
    assert policy.rate_limit_delay(None, 2) == 0.4


def test_policy_merges_global_then_capability_then_call() -> None:
    config = OrchestratorConfig(retry_max_attempts=3, retry_backoff="linear",
                                retry_base_delay_s=0.1, retry_seed=9)
    assert RetryPolicy.for_call(config) == RetryPolicy(max_attempts=3, backoff="linear",
                                                       base_delay_s=0.1, seed=9)
    capability = ({"max_attempts": 5, "base_delay_s": 1.0}, "capability 't.c'")
    merged = RetryPolicy.for_call(config, capability, ({"max_attempts": 2}, "step 's'"))
    assert (merged.max_attempts, merged.base_delay_s, merged.backoff, merged.seed) == (
        2, 1.0, "linear", 9)
    assert RetryPolicy.for_call(config, capability, (None, "step 's'")).max_attempts == 5


@pytest.mark.parametrize(("overrides", "message"), [
    ({"max_tries": 4}, "unknown retry setting(s) 'max_tries'"),
    ({"backoff": "fibonacci"}, "invalid retry setting: backoff"),
    ({"max_attempts": 0}, "invalid retry setting: max_attempts"),
])
def test_invalid_capability_overrides_are_rejected_naming_the_capability(
    overrides: dict[str, Any], message: str,
) -> None:
    spec = {"tools": [{"name": "bank", "base_url": "http://127.0.0.1:1", "capabilities": [
        {"name": "pay", "path": "/pay", "retry": overrides}]}]}
    with pytest.raises(CatalogError, match=r"capability 'bank\.pay'") as caught:
        Catalog.from_dict(spec, source="catalog.yaml")
    assert message in str(caught.value)
    assert "catalog.yaml" in str(caught.value)


# --- policy merge and jitter, end to end ------------------------------------------------------

def test_capability_and_step_overrides_drive_the_real_retries(
    demo_tools: DemoTools, demo_catalog: Catalog, registry: CollectorRegistry,
) -> None:
    quote = demo_catalog.get("stocks", "quote")
    demo_catalog.add(quote.model_copy(update={"retry": {
        "max_attempts": 4, "backoff": "constant", "base_delay_s": 0.5}}), replace=True)
    demo_tools["stocks"].inject("/quote", *[Status(500, "boom")] * 10)
    clock = ManualClock()
    result = run(demo_catalog, QUOTE, registry, clock)
    q = result.steps["q"]
    assert clock.sleeps == [0.5, 0.5, 0.5] and len(q.attempts) == 4
    assert "retry max_attempts=4" in q.error.details["gave_up"]

    demo_tools.reset()
    demo_tools["stocks"].inject("/quote", *[Status(500, "boom")] * 10)
    per_call = {"steps": [{**QUOTE["steps"][0], "retry": {"max_attempts": 2}}]}
    clock = ManualClock()
    result = run(demo_catalog, per_call, CollectorRegistry(), clock)
    assert clock.sleeps == [0.5] and len(result.steps["q"].attempts) == 2
    assert len(demo_tools["stocks"].requests_to("/quote")) == 2


def test_invalid_call_override_is_rejected_before_anything_runs(
    demo_tools: DemoTools, demo_catalog: Catalog, registry: CollectorRegistry,
) -> None:
    plan = {"steps": [{**QUOTE["steps"][0], "retry": {"attempts": 3}}]}
    result = run(demo_catalog, plan, registry, ManualClock())
    assert result.status == "failed" and result.steps == {}
    assert "step 'q': retry: unknown retry setting(s) 'attempts'" in (result.error or "")
    assert demo_tools["stocks"].requests_to("/quote") == []


def test_seeded_jitter_gives_the_same_waits_on_every_run(
    demo_tools: DemoTools, demo_catalog: Catalog,
) -> None:
    def waits(seed: int) -> list[float]:
        demo_tools.reset()
        demo_tools["stocks"].inject("/quote", Status(502, "bad gateway"), Status(503, "busy"))
        clock = ManualClock()
        result = run(demo_catalog, QUOTE, CollectorRegistry(), clock,
                     retry_jitter=0.5, retry_seed=seed)
        assert result.status == "succeeded"
        return clock.sleeps

    first = waits(7)
    assert first == waits(7)
    assert first != waits(8)
    assert first != [0.2, 0.4] and all(0.1 <= w <= 0.6 for w in first)


# --- the decision matrix ----------------------------------------------------------------------

@pytest.mark.parametrize(("fault", "category"), [
    (Drop(), "CONNECTION_ERROR"),
    (Hang(1.0), "TIMEOUT"),
    (Status(500, "internal kaboom"), "SERVICE_ERROR"),
    (ServiceUnavailable(), "SERVICE_ERROR"),  # structured, retryable true
], ids=["dropped", "timeout", "plain-500", "structured-503-retryable"])
def test_transport_faults_on_idempotent_calls_are_retried_with_the_same_parameters(
    fault: Any, category: str,
    demo_tools: DemoTools, demo_catalog: Catalog, registry: CollectorRegistry,
) -> None:
    demo_tools["stocks"].inject("/quote", fault, fault)
    clock = ManualClock()
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    result = run(demo_catalog, QUOTE, registry, clock, tracer_provider=provider,
                 tool_timeout_s=0.2)

    q = result.steps["q"]
    assert q.status == "succeeded", result.error
    assert [(a.layer, a.outcome) for a in q.attempts] == [
        ("plan", "failed"), ("resilience", "failed"), ("resilience", "succeeded")]
    assert all(a.params == {"symbol": "MSFT"} for a in q.attempts)
    assert clock.sleeps == [0.2, 0.4]  # exponential from the defaults
    assert [r.body for r in demo_tools["stocks"].requests_to("/quote")] == [{"symbol": "MSFT"}] * 3
    assert registry.get_sample_value("orchestration_resilience_retries_total", {
        "tool": "stocks", "capability": "quote", "category": category}) == 2
    retries = [dict(e.attributes or {}) for s in exporter.get_finished_spans()
               for e in s.events if e.name == "resilience_retry"]
    assert [(r["error.category"], r["retry.attempt"], r["retry.delay_s"]) for r in retries] == [
        (category, 1, 0.2), (category, 2, 0.4)]


def test_exhausted_retries_name_the_cap_and_keep_every_attempt(
    demo_tools: DemoTools, demo_catalog: Catalog, registry: CollectorRegistry,
) -> None:
    demo_tools["stocks"].inject("/quote", *[Status(500, "down")] * 5)
    result = run(demo_catalog, QUOTE, registry, ManualClock(), retry_max_attempts=3)
    q = result.steps["q"]
    assert q.error is not None and q.error.code == "HTTP_500"
    assert q.error.details["gave_up"] == (
        "resilience retries exhausted: 2 retries after SERVICE_ERROR (retry max_attempts=3)")
    assert [a.delay_s for a in q.attempts] == [0.0, 0.2, 0.4]
    with pytest.raises(StepFailed, match=r"stopped: resilience retries exhausted") as caught:
        result.raise_for_status()
    assert len(caught.value.attempts) == 3


def test_refused_connection_is_retried_even_when_not_idempotent(
    closed_port_url: str, registry: CollectorRegistry,
) -> None:
    catalog = Catalog()
    catalog.add_http(tool="bank", capability="pay", url=closed_port_url + "/pay", idempotent=False)
    clock = ManualClock()
    result = run(catalog, {"steps": [{"id": "p", "tool": "bank", "capability": "pay"}]},
                 registry, clock, retry_max_attempts=3)
    p = result.steps["p"]
    assert [a.error.code for a in p.attempts] == ["CONNECTION_REFUSED"] * 3
    assert clock.sleeps == [0.2, 0.4]
    assert "retries exhausted" in p.error.details["gave_up"]


def test_non_idempotent_5xx_is_not_re_sent(
    demo_tools: DemoTools, demo_catalog: Catalog, registry: CollectorRegistry,
) -> None:
    convert = demo_catalog.get("currency", "convert")
    demo_catalog.add_http(tool="bank", capability="pay", url=convert.url or "",
                          input_schema=convert.input_schema)  # POST: not idempotent by default
    demo_tools["currency"].inject("/convert", Status(502, "bad gateway"))
    plan = {"steps": [{"id": "p", "tool": "bank", "capability": "pay",
                       "params": {"amount": 1, "from": "USD", "to": "EUR"}}]}
    result = run(demo_catalog, plan, registry, ManualClock())
    assert result.steps["p"].error.details["gave_up"].startswith("not re-sent")
    assert len(demo_tools["currency"].requests_to("/convert")) == 1


def test_structured_5xx_marked_not_retryable_stops_unless_it_is_a_503(
    demo_tools: DemoTools, demo_catalog: Catalog, registry: CollectorRegistry,
) -> None:
    envelope = {"success": False, "error": {"code": "DB_CORRUPT", "message": "ledger corrupt",
                                            "category": "SERVICE_ERROR", "retryable": False}}
    demo_tools["stocks"].inject("/quote", Status(500, envelope))
    llm = ScriptedLLM([QUOTE])
    result = Orchestrator(catalog=demo_catalog, llm=llm, registry=registry, clock=ManualClock(),
                          config=OrchestratorConfig(synthesis_enabled=False)).run("q")
    q = result.steps["q"]
    assert q.error is not None and q.error.category == ErrorCategory.SERVICE_ERROR
    assert "retryable=false" in q.error.details["gave_up"]
    assert len(q.attempts) == 1 and len(llm.requests) == 1  # layer 4 never saw it


def test_retries_switched_off_leave_the_error_untouched(
    demo_tools: DemoTools, demo_catalog: Catalog, registry: CollectorRegistry,
) -> None:
    demo_tools["stocks"].inject("/quote", Drop())
    result = run(demo_catalog, QUOTE, registry, ManualClock(), retry_max_attempts=1)
    q = result.steps["q"]
    assert len(q.attempts) == 1 and "gave_up" not in q.error.details
    assert q.error.code == "CONNECTION_DROPPED"
