"""Issue 4 end to end over real HTTP (demo tools on loopback): layer 4, the transient
override, resilience and the caps that bound work whatever the LLM says."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from orchestration import (
    Catalog,
    ErrorCategory,
    LLMRequest,
    Orchestrator,
    OrchestratorConfig,
    RetryExhausted,
    ScriptedLLM,
)
from orchestration.clock import ManualClock
from orchestration.demo.scenarios import Scenario, scripted_llm_for
from orchestration.demo.scenarios_layer4 import layer4_scenarios
from orchestration.demo.tools import (
    DemoTools,
    Hang,
    NotFoundAs503,
    RateLimited,
    ServiceUnavailable,
    Status,
)

Responder = Callable[[LLMRequest], Any]
BASE = {"synthesis_enabled": False}


def scripted(plan: dict[str, Any], **responders: Responder) -> ScriptedLLM:
    """A scripted LLM: the plan, then the given answer per purpose (anything else fails)."""

    def respond(request: LLMRequest) -> Any:
        if request.purpose == "plan":
            return plan
        if request.purpose in responders:
            return responders[request.purpose](request)
        raise AssertionError(f"unexpected LLM request with purpose {request.purpose!r}")

    return ScriptedLLM(respond)


def block(prompt: str, label: str) -> str:
    match = re.search(rf"<<<{label}\n(.*?)\n{label}>>>", prompt, re.S)
    assert match, f"no {label} block in the prompt"
    return match.group(1)


def orchestrator(catalog: Catalog, llm: ScriptedLLM, registry: CollectorRegistry,
                 clock: ManualClock | None = None,
                 tracer_provider: TracerProvider | None = None, **config: Any) -> Orchestrator:
    return Orchestrator(catalog=catalog, llm=llm, config=OrchestratorConfig(**{**BASE, **config}),
                        registry=registry, clock=clock or ManualClock(),
                        tracer_provider=tracer_provider)


def tracing() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def events(exporter: InMemorySpanExporter, name: str) -> list[dict[str, Any]]:
    return [dict(e.attributes or {}) for s in exporter.get_finished_spans() for e in s.events
            if e.name == name]


def metric(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


# --- the Tesla scenario: layer 3 cannot know the amount, layer 4 computes it ------------------

TESLA_QUERY = "Sell 100 Tesla shares and convert the proceeds to EUR"
TESLA_PLAN = {"steps": [
    {"id": "quote", "tool": "stocks", "capability": "quote", "params": {"symbol": "TSLA"}},
    {"id": "convert", "tool": "currency", "capability": "convert", "depends_on": ["quote"],
     "params": {"amount": 0, "from": "USD", "to": "EUR"}},
]}


def layer3_cannot_know(request: LLMRequest) -> dict[str, Any]:
    return {"can_fix": False, "corrected_parameters": {},
            "analysis": "cannot know the amount from the error alone"}


def tesla_layer4(request: LLMRequest) -> dict[str, Any]:
    """Computes shares × price from what the prompt holds (nothing is hard-coded)."""
    query = block(request.prompt_text, "USER_QUERY")
    shares = int(re.search(r"(\d+) \w+ shares", query).group(1))  # type: ignore[union-attr]
    upstream = block(request.prompt_text, "UPSTREAM_OUTPUTS")
    price = json.loads(upstream.split("returned: ", 1)[1])["price"]
    amount = round(shares * price, 6)
    return {"should_retry": True, "is_transient_error": False,
            "corrected_parameters": {"amount": amount},
            "provenance": {"amount": {"kind": "derived",
                                      "expression": f"{shares} * {{{{quote.price}}}}"}},
            "analysis": f"{shares} shares × {price} = {amount}"}


def test_tesla_proceeds_are_computed_by_layer_4_from_the_trajectory(
    demo_tools: DemoTools, demo_catalog: Catalog, registry: CollectorRegistry,
) -> None:
    llm = scripted(TESLA_PLAN, validation_feedback=layer3_cannot_know, semantic_retry=tesla_layer4)
    provider, exporter = tracing()
    result = orchestrator(demo_catalog, llm, registry, tracer_provider=provider).run(TESLA_QUERY)

    assert result.status == "succeeded", result.error
    convert = result.steps["convert"]
    assert [(a.layer, a.outcome) for a in convert.attempts] == [
        ("plan", "failed"), ("semantic_retry", "succeeded")]
    first = convert.attempts[0].error
    assert first is not None and first.http_status == 400
    assert first.message == "amount must be greater than 0"
    assert convert.attempts[1].params == {"amount": 46828.5, "from": "USD", "to": "EUR"}
    assert convert.attempts[1].analysis == "100 shares × 468.285 = 46828.5"
    # the claimed derivation was checked before the call was sent
    claim = convert.attempts[1].provenance["amount"]
    assert (claim.kind, claim.source, claim.grounded) == ("derived", "100 * {{quote.price}}", True)
    assert claim.value == pytest.approx(46828.5)
    assert convert.output["converted"] == 43082.22
    assert [r.body["amount"] for r in demo_tools["currency"].requests_to("/convert")] == [0, 46828.5]

    # the prompt provably holds the query, step 1's output, the failed call and the error
    (request,) = llm.requests_for("semantic_retry")
    prompt = request.prompt_text
    assert request.step_id == "convert"
    assert block(prompt, "USER_QUERY") == TESLA_QUERY
    assert block(prompt, "UPSTREAM_OUTPUTS") == (
        'step quote (stocks.quote) returned: {"currency": "USD", "price": 468.285, "symbol": "TSLA"}')
    assert json.loads(block(prompt, "FAILED_PARAMETERS")) == {"amount": 0, "from": "USD", "to": "EUR"}
    assert "amount must be greater than 0" in block(prompt, "ERROR")
    assert "must be > 0" in block(prompt, "INPUT_SCHEMA")
    assert set(request.response_schema["required"]) == {  # type: ignore[index]
        "should_retry", "corrected_parameters", "provenance", "analysis", "is_transient_error"}
    # amount 0 is a placeholder: layer 3 did not guess, it handed the step to layer 4
    assert llm.requests_for("validation_feedback") == []
    assert "placeholder" in block(prompt, "LAYER_3_ANALYSIS")

    tc = {"tool": "currency", "capability": "convert"}
    assert metric(registry, "orchestration_semantic_retry_attempts_total", **tc) == 1
    assert metric(registry, "orchestration_semantic_retry_success_total", **tc) == 1
    assert metric(registry, "orchestration_semantic_retry_llm_latency_seconds_count") == 1
    assert metric(registry, "orchestration_semantic_retry_independent_step_total",
                  capability="convert") == 0
    assert metric(registry, "orchestration_corrections_grounded_total", kind="derived", **tc) == 1
    (grounded,) = events(exporter, "correction_grounded")
    assert grounded["param"] == "amount" and grounded["provenance.kind"] == "derived"
    (start,) = events(exporter, "contextual_re_resolution.start")
    (complete,) = events(exporter, "contextual_re_resolution.complete")
    assert start["independent_step"] is False and start["trigger"] == "input_error"
    assert start["validation_feedback"] == "placeholder"
    assert complete["should_retry"] is True and complete["changed_parameters"] == 1
    assert complete["analysis"] == "100 shares × 468.285 = 46828.5"


def test_tesla_fails_with_its_history_when_layer_4_is_off(
    demo_catalog: Catalog, registry: CollectorRegistry,
) -> None:
    llm = scripted(TESLA_PLAN, validation_feedback=layer3_cannot_know)
    result = orchestrator(demo_catalog, llm, registry, semantic_retry_enabled=False).run(TESLA_QUERY)
    convert = result.steps["convert"]
    assert result.status == "partial" and convert.status == "failed"
    assert convert.error is not None and convert.error.code == "INVALID_AMOUNT"
    assert llm.requests_for("semantic_retry") == []


# --- "Tokio" → "Tokyo" through a 503 that carries a structured not-found ------------------------

def test_tokio_is_corrected_through_a_503_carrying_a_structured_error(
    demo_tools: DemoTools, demo_catalog: Catalog, registry: CollectorRegistry,
) -> None:
    demo_tools["weather"].inject("/geocode", NotFoundAs503())

    def fix_from_hint(request: LLMRequest) -> dict[str, Any]:
        error = json.loads(block(request.prompt_text, "ERROR"))
        name = re.search(r"did you mean '([^']+)'", error["details"]["hint"]).group(1)  # type: ignore[union-attr]
        return {"should_retry": True, "is_transient_error": False,
                "corrected_parameters": {"location": name},
                "provenance": {"location": {"kind": "tool_hint", "quote": f"did you mean '{name}'"}},
                "analysis": f"the tool suggests {name}"}

    plan = {"steps": [
        {"id": "geo", "tool": "weather", "capability": "geocode", "params": {"location": "Tokio"}},
        {"id": "fc", "tool": "weather", "capability": "forecast",
         "params": {"lat": "{{geo.lat}}", "lon": "{{geo.lon}}", "days": 1}},
    ]}
    llm = scripted(plan, semantic_retry=fix_from_hint)
    provider, exporter = tracing()
    result = orchestrator(demo_catalog, llm, registry, tracer_provider=provider).run(
        "Weather in Tokio tomorrow?")

    assert result.status == "succeeded", result.error
    geo = result.steps["geo"]
    err = geo.attempts[0].error
    assert err is not None and (err.http_status, err.category, err.code, err.retryable) == (
        503, ErrorCategory.SERVICE_ERROR, "LOCATION_NOT_FOUND", False)
    assert [a.layer for a in geo.attempts] == ["plan", "semantic_retry"]
    # resilience did not repeat the same parameters; layer 4 sent the corrected ones
    assert [r.body for r in demo_tools["weather"].requests_to("/geocode")] == [
        {"location": "Tokio"}, {"location": "Tokyo"}]
    assert result.steps["fc"].output["lat"] == 35.6897
    assert metric(registry, "orchestration_semantic_retry_independent_step_total",
                  capability="geocode") == 1
    (start,) = events(exporter, "contextual_re_resolution.start")
    assert start["independent_step"] is True and start["trigger"] == "structured_503"
    prompt = llm.requests_for("semantic_retry")[0].prompt_text
    assert block(prompt, "UPSTREAM_OUTPUTS").startswith("(none")
    assert block(prompt, "USER_QUERY") == "Weather in Tokio tomorrow?"


# --- a timeout reported with retryable:false, recovered by the transient override ------------

def test_transient_timeout_with_retryable_false_is_recovered_by_the_override(
    demo_tools: DemoTools, demo_catalog: Catalog, registry: CollectorRegistry,
) -> None:
    demo_tools["stocks"].inject("/quote", ServiceUnavailable(retryable=False))

    def transient(request: LLMRequest) -> dict[str, Any]:
        error = json.loads(block(request.prompt_text, "ERROR"))
        assert error["tool_says_retryable"] is False
        return {"should_retry": False, "is_transient_error": "timed out" in error["message"],
                "corrected_parameters": {}, "analysis": "the service timed out; parameters are fine"}

    plan = {"steps": [{"id": "q", "tool": "stocks", "capability": "quote",
                       "params": {"symbol": "NVDA"}}]}
    clock = ManualClock()
    provider, exporter = tracing()
    result = orchestrator(demo_catalog, scripted(plan, semantic_retry=transient), registry,
                          clock=clock, tracer_provider=provider, retry_base_delay_s=0.7).run("NVDA?")

    assert result.status == "succeeded", result.error
    q = result.steps["q"]
    assert [(a.layer, a.outcome) for a in q.attempts] == [
        ("plan", "failed"), ("transient_override", "succeeded")]
    assert q.attempts[1].params == {"symbol": "NVDA"} and q.attempts[1].delay_s == 0.7
    assert clock.sleeps == [0.7]
    assert q.output["price"] == 131.38
    assert len(demo_tools["stocks"].requests_to("/quote")) == 2
    tc = {"tool": "stocks", "capability": "quote"}
    assert metric(registry, "orchestration_transient_override_total", **tc) == 1
    assert metric(registry, "orchestration_semantic_retry_success_total", **tc) == 1
    (override,) = events(exporter, "transient_override")
    assert override["tool_retryable"] is False and override["error.code"] == "REQUEST_TIMEOUT"


# --- auth stops at once, no LLM call beyond planning -------------------------------------------

@pytest.mark.parametrize("fault", [
    Status(401, "invalid API key"),
    Status(403, {"success": False, "error": {"code": "FORBIDDEN", "message": "no access",
                                             "category": "AUTH_ERROR", "retryable": False}}),
], ids=["plain-401", "envelope-403"])
def test_auth_error_stops_at_once_with_zero_llm_calls(
    fault: Status, demo_tools: DemoTools, demo_catalog: Catalog, registry: CollectorRegistry,
) -> None:
    demo_tools["stocks"].inject("/quote", fault)
    plan = {"steps": [{"id": "q", "tool": "stocks", "capability": "quote",
                       "params": {"symbol": "TSLA"}}]}
    never: Responder = lambda r: pytest.fail(f"{r.purpose} must not be asked")  # noqa: E731
    llm = scripted(plan, validation_feedback=never, semantic_retry=never)
    clock = ManualClock()
    result = orchestrator(demo_catalog, llm, registry, clock=clock).run("q")

    q = result.steps["q"]
    assert q.status == "failed" and q.error is not None
    assert q.error.category == ErrorCategory.AUTH_ERROR
    assert "authentication" in q.error.details["gave_up"]
    assert len(q.attempts) == 1 and clock.sleeps == []
    assert len(demo_tools["stocks"].requests_to("/quote")) == 1
    assert [r.purpose for r in llm.requests] == ["plan"]
    assert result.usage.llm_calls == 1


# --- a non-idempotent POST that times out is not re-sent (unless it takes a key) --------------

def payments_catalog(demo_tools: DemoTools, demo_catalog: Catalog, **fields: Any) -> Catalog:
    convert = demo_catalog.get("currency", "convert")
    demo_catalog.add_http(tool="payments", capability="transfer", url=convert.url or "",
                          method="POST", input_schema=convert.input_schema, idempotent=False,
                          **fields)
    return demo_catalog


PAY_PLAN = {"steps": [{"id": "pay", "tool": "payments", "capability": "transfer",
                       "params": {"amount": 10, "from": "USD", "to": "EUR"}}]}


def test_non_idempotent_post_that_times_out_is_not_re_sent(
    demo_tools: DemoTools, demo_catalog: Catalog, registry: CollectorRegistry,
) -> None:
    catalog = payments_catalog(demo_tools, demo_catalog)
    demo_tools["currency"].inject("/convert", Hang(1.0))
    clock = ManualClock()
    result = orchestrator(catalog, scripted(PAY_PLAN), registry, clock=clock,
                          tool_timeout_s=0.2).run("pay")

    pay = result.steps["pay"]
    assert pay.status == "failed" and pay.error is not None
    assert (pay.error.code, pay.error.request_sent) == ("READ_TIMEOUT", True)
    assert pay.error.details["gave_up"].startswith("not re-sent: non-idempotent capability")
    assert pay.attempts[-1].note is not None and "not re-sent" in pay.attempts[-1].note
    assert len(pay.attempts) == 1 and clock.sleeps == []
    assert len(demo_tools["currency"].requests_to("/convert")) == 1
    assert metric(registry, "orchestration_resilience_retries_total", tool="payments",
                  capability="transfer", category="TIMEOUT") == 0


def test_non_idempotent_post_with_an_idempotency_key_is_re_sent_with_the_same_key(
    demo_tools: DemoTools, demo_catalog: Catalog, registry: CollectorRegistry,
) -> None:
    catalog = payments_catalog(demo_tools, demo_catalog, idempotency_key_header="Idempotency-Key")
    demo_tools["currency"].inject("/convert", Hang(1.0))
    clock = ManualClock()
    result = orchestrator(catalog, scripted(PAY_PLAN), registry, clock=clock,
                          tool_timeout_s=0.2).run("pay")

    pay = result.steps["pay"]
    assert pay.status == "succeeded", result.error
    assert [a.layer for a in pay.attempts] == ["plan", "resilience"]
    sent = demo_tools["currency"].requests_to("/convert")
    assert len(sent) == 2 and sent[0].body == sent[1].body
    keys = {r.header("Idempotency-Key") for r in sent}
    assert len(keys) == 1 and None not in keys and len(keys.pop() or "") == 32
    assert clock.sleeps == [0.2]
    assert metric(registry, "orchestration_resilience_retries_total", tool="payments",
                  capability="transfer", category="TIMEOUT") == 1


# --- a 429 honours retry_after, capped --------------------------------------------------------

@pytest.mark.parametrize(("fault", "cap", "waited"), [
    (RateLimited(2.5), 30.0, 2.5),
    (RateLimited(100), 4.0, 4.0),
    (Status(429, "slow down", headers={"Retry-After": "3"}), 30.0, 3.0),
], ids=["envelope", "capped", "header-only"])
def test_rate_limit_waits_for_retry_after(
    fault: Any, cap: float, waited: float,
    demo_tools: DemoTools, demo_catalog: Catalog, registry: CollectorRegistry,
) -> None:
    demo_tools["stocks"].inject("/quote", fault)
    plan = {"steps": [{"id": "q", "tool": "stocks", "capability": "quote",
                       "params": {"symbol": "AAPL"}}]}
    clock = ManualClock()
    result = orchestrator(demo_catalog, scripted(plan), registry, clock=clock,
                          retry_after_cap_s=cap).run("q")
    assert result.status == "succeeded", result.error
    assert clock.sleeps == [waited]
    assert result.steps["q"].attempts[1].delay_s == waited
    assert metric(registry, "orchestration_resilience_retries_total", tool="stocks",
                  capability="quote", category="RATE_LIMIT") == 1


# --- caps stop an LLM that always says "retry" -------------------------------------------------

def always_retry(request: LLMRequest) -> dict[str, Any]:
    """Never gives up: each time a new spelling, so even 'changed parameters' never ends."""
    failed = json.loads(block(request.prompt_text, "FAILED_PARAMETERS"))
    return {"should_retry": True, "is_transient_error": False, "analysis": "try another spelling",
            "corrected_parameters": {"location": failed["location"] + "!"}}


ATLANTIS = {"steps": [{"id": "geo", "tool": "weather", "capability": "geocode",
                       "params": {"location": "Atlantis"}}]}


@pytest.mark.parametrize(("config", "stopped_by", "attempts"), [
    ({"semantic_retry_max_attempts": 3}, "semantic_retry_max_attempts=3", 4),
    ({"semantic_retry_max_attempts": 100, "max_attempts_per_step": 5},
     "max_attempts_per_step=5", 5),
    ({"semantic_retry_max_attempts": 100, "max_attempts_per_step": 100,
      "max_llm_calls_per_run": 4}, "max_llm_calls_per_run=4", 4),
    # with grounding enforced, the first made-up spelling is already refused
    ({"semantic_retry_max_attempts": 100, "grounded_corrections": True},
     "ungrounded correction", 2),
], ids=["layer-4-attempts", "attempts-per-step", "llm-budget", "grounding"])
def test_caps_stop_an_llm_that_always_says_retry(
    config: dict[str, Any], stopped_by: str, attempts: int,
    demo_tools: DemoTools, demo_catalog: Catalog, registry: CollectorRegistry,
) -> None:
    demo_tools["weather"].inject("/geocode", *[NotFoundAs503()] * 120)
    llm = scripted(ATLANTIS, semantic_retry=always_retry)
    # audit mode (grounding recorded, not enforced) unless the case says otherwise: the
    # caps must bound an LLM whose every answer is sent
    result = orchestrator(demo_catalog, llm, registry,
                          **{"grounded_corrections": False, **config}).run("Where is Atlantis?")

    geo = result.steps["geo"]
    assert geo.status == "failed" and geo.error is not None
    assert stopped_by in geo.error.details["gave_up"]
    assert len(geo.attempts) == attempts
    sent = attempts - (1 if config.get("grounded_corrections") else 0)
    assert len(demo_tools["weather"].requests_to("/geocode")) == sent
    assert all(a.provenance["location"].reason == "no_provenance" for a in geo.attempts[1:])
    with pytest.raises(RetryExhausted) as caught:
        result.raise_for_status()
    assert stopped_by in str(caught.value)
    assert caught.value.attempts == geo.attempts
    assert [a.layer for a in caught.value.attempts] == ["plan"] + ["semantic_retry"] * (attempts - 1)
    assert all(a.error is not None and a.analysis for a in caught.value.attempts[1:])
    assert caught.value.attempts[-1].params == {"location": "Atlantis" + "!" * (attempts - 1)}


def test_step_deadline_stops_an_llm_that_always_says_retry(
    demo_tools: DemoTools, demo_catalog: Catalog, registry: CollectorRegistry,
) -> None:
    demo_tools["weather"].inject("/geocode", *[NotFoundAs503()] * 50)

    def slow_always_retry(request: LLMRequest) -> Any:
        return always_retry(request)

    llm = ScriptedLLM(lambda r: ATLANTIS if r.purpose == "plan" else slow_always_retry(r),
                      latency_s=0.05)
    result = orchestrator(demo_catalog, llm, registry, semantic_retry_max_attempts=100,
                          max_attempts_per_step=100, step_timeout_s=0.4,
                          grounded_corrections=False).run("Atlantis?")
    geo = result.steps["geo"]
    assert geo.error is not None and geo.error.code == "STEP_DEADLINE_EXCEEDED"
    assert "step deadline (0.4s)" in geo.error.message
    assert 2 <= len(geo.attempts) < 12 and geo.duration_s < 1.5
    with pytest.raises(RetryExhausted, match="STEP_DEADLINE_EXCEEDED"):
        geo.raise_for_status()


# --- the demo scenarios behave as they say ---------------------------------------------------

@pytest.mark.parametrize("scenario", layer4_scenarios(), ids=lambda s: s.name)
def test_layer4_demo_scenarios(
    scenario: Scenario, demo_tools: DemoTools, demo_catalog: Catalog, registry: CollectorRegistry,
) -> None:
    if scenario.setup:
        scenario.setup(demo_tools)
    llm = ScriptedLLM(scripted_llm_for(scenario))
    result = Orchestrator(catalog=demo_catalog, llm=llm, registry=registry, clock=ManualClock(),
                          config=OrchestratorConfig(retry_base_delay_s=0.05)).run(scenario.query)
    assert result.status == scenario.expect_status, result.error
    layers = {a.layer for s in result.steps.values() for a in s.attempts}
    expected_layer = {"tesla": "semantic_retry", "tokio": "semantic_retry",
                      "transient": "transient_override", "rate-limit": "resilience",
                      "auth": "plan"}[scenario.name]
    assert expected_layer in layers
