"""Observability of a run that exercises every layer: spans, events, metrics, logs, debug store.

One workload drives all four layers and resilience over real HTTP (the demo tools, with
injected faults) and a scripted LLM; the same workload feeds the real-Prometheus test
(tests/test_prometheus_real.py). Spans come from the SDK's in-memory exporter through a
provider passed to the Orchestrator — nothing global is installed.
"""

from __future__ import annotations

import io
import json
import logging
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from prometheus_client import CollectorRegistry, generate_latest

from orchestration import Catalog, LLMRequest, Orchestrator, OrchestratorConfig, RunResult, ScriptedLLM
from orchestration.cli import main as cli_main
from orchestration.clock import ManualClock
from orchestration.debug_store import LLMDebugStore, iter_records, read_run
from orchestration.demo.tools import DemoTools, Drop, NotFoundAs503, ServiceUnavailable, Status
from orchestration.llm.base import LLMResponse
from orchestration.logging_setup import configure_logging, get_logger, log_context
from orchestration.redaction import MASK, Redactor
from orchestration.telemetry import serve_metrics
from orchestration.telemetry.exporters import tracer_provider_from_config

# --------------------------------------------------------------------------- the workload

EVERY_LAYER_QUERY = (
    "Sell 100 Tesla shares and convert the proceeds to EUR; convert a 10 USD fee to JPY "
    "and 250 USD to GBP; and the weather in Tokio for the next 2 days"
)
EVERY_LAYER_PLAN: dict[str, Any] = {"steps": [
    # resilience: the first quote's connection is dropped (idempotent: retried as is)
    {"id": "tsla", "tool": "stocks", "capability": "quote", "params": {"symbol": "TSLA"}},
    # layer 4, the Tesla case: layer 3 cannot know the amount, the trajectory can
    {"id": "proceeds", "tool": "currency", "capability": "convert",
     "params": {"amount": 0, "from": "USD", "to": "EUR"}, "depends_on": ["tsla"]},
    # layer 3: "ten" is no number layer 2 can read; the form fix is in the query ("10 USD")
    {"id": "fee", "tool": "currency", "capability": "convert",
     "params": {"amount": "ten", "from": "USD", "to": "JPY"}},
    # layer 2: a stringly-typed number
    {"id": "pocket", "tool": "currency", "capability": "convert",
     "params": {"amount": "250", "from": "USD", "to": "GBP"}},
    # layer 4 on an independent step: "Tokio" not found, reported as a structured 503
    {"id": "geo", "tool": "weather", "capability": "geocode", "params": {"location": "Tokio"}},
    # transient override: a 503 timeout with retryable=false (and layer 2 for "2")
    {"id": "forecast", "tool": "weather", "capability": "forecast",
     "params": {"lat": "{{geo.lat}}", "lon": "{{geo.lon}}", "days": "2"}},
]}
STEP_IDS = [s["id"] for s in EVERY_LAYER_PLAN["steps"]]


def inject_every_layer_faults(tools: DemoTools) -> None:
    tools["stocks"].inject("/quote", Drop())
    tools["weather"].inject("/geocode", NotFoundAs503())
    tools["weather"].inject("/forecast", ServiceUnavailable(retryable=False))


def every_layer_llm(extra: dict[str, Any] | None = None) -> ScriptedLLM:
    """The scripted model: a broken plan first (planner retry), then answers per step."""
    state = {"plans": 0, "fee": 0}
    extra = extra or {}

    def respond(request: LLMRequest) -> str | dict[str, Any]:
        if request.purpose in extra:
            return extra[request.purpose](request)  # type: ignore[no-any-return]
        if request.purpose == "plan":
            state["plans"] += 1
            return '{"steps": [{"id": "tsla", "tool": ' if state["plans"] == 1 else EVERY_LAYER_PLAN
        if request.purpose == "validation_feedback":
            if request.step_id == "fee":
                state["fee"] += 1
                amount = "10 USD" if state["fee"] == 1 else 10  # the first fix is still invalid
                return {"can_fix": True, "analysis": "the query says a 10 USD fee",
                        "corrected_parameters": {"amount": amount, "from": "USD", "to": "JPY"}}
            return {"can_fix": False, "analysis": "the amount depends on the sale's proceeds",
                    "corrected_parameters": None}
        if request.purpose == "semantic_retry":
            answers = {
                "proceeds": {"should_retry": True, "corrected_parameters": {"amount": 46828.5},
                             "provenance": {"amount": {"kind": "derived",
                                                       "expression": "100 * {{tsla.price}}"}},
                             "analysis": "100 x 468.285 = 46828.5", "is_transient_error": False},
                "geo": {"should_retry": True, "corrected_parameters": {"location": "Tokyo"},
                        "provenance": {"location": {"kind": "tool_hint", "quote": "Tokyo"}},
                        "analysis": "the tool suggests Tokyo for Tokio",
                        "is_transient_error": False},
                "forecast": {"should_retry": False, "corrected_parameters": {},
                             "analysis": "a timeout; the service may recover",
                             "is_transient_error": True},
            }
            return answers[str(request.step_id)]
        if request.purpose == "synthesis":
            return "46828.5 USD is about 43082 EUR; Tokyo stays mild."
        raise LookupError(request.purpose)

    return ScriptedLLM(respond)


def run_every_layer(
    tools: DemoTools, catalog: Catalog, registry: CollectorRegistry, **kwargs: Any
) -> tuple[RunResult, ScriptedLLM]:
    """One run through resilience, layers 2-4, the transient override and planner retries."""
    inject_every_layer_faults(tools)
    llm = every_layer_llm()
    config = kwargs.pop("config", None) or OrchestratorConfig()
    orch = Orchestrator(catalog, llm, config, registry=registry, clock=ManualClock(), **kwargs)
    result = orch.run(EVERY_LAYER_QUERY)
    assert result.status == "succeeded", (result.error, {
        s.id: [(a.layer, a.outcome) for a in s.attempts] for s in result.steps.values()})
    return result, llm


def run_auth_failure(tools: DemoTools, catalog: Catalog, registry: CollectorRegistry) -> RunResult:
    """A run whose only step meets a 401: it stops at once, no LLM asked, the run fails."""
    tools["stocks"].inject("/lookup", Status(401, {"error": "invalid credentials"}))
    llm = ScriptedLLM([])
    orch = Orchestrator(catalog, llm, OrchestratorConfig(synthesis_enabled=False),
                        registry=registry, clock=ManualClock())
    plan = {"steps": [{"id": "who", "tool": "stocks", "capability": "lookup",
                       "params": {"company": "Tesla"}}]}
    result = orch.run("Which ticker is Tesla?", plan=plan)
    assert result.status == "failed" and not llm.requests
    return result


def run_budget_stop(tools: DemoTools, catalog: Catalog, registry: CollectorRegistry) -> RunResult:
    """A run a capability's call budget stops, its LLM calls priced: the budget and cost
    metrics get data."""
    data = tools.catalog_dict()
    for tool in data["tools"]:
        for cap in tool["capabilities"]:
            if (tool["name"], cap["name"]) == ("currency", "convert"):
                cap["max_calls_per_run"] = 1
    plan = {"steps": [{"id": f"c{n}", "tool": "currency", "capability": "convert",
                       "params": {"amount": n, "from": "USD", "to": "EUR"}} for n in (1, 2)]}
    config = OrchestratorConfig(max_concurrency=1, llm_prices={
        "scripted": {"input_per_1k": 0.5, "output_per_1k": 1.5}})
    orch = Orchestrator(Catalog.from_dict(data), ScriptedLLM([plan]), config, registry=registry,
                        clock=ManualClock())
    result = orch.run("Convert 1 and 2 USD to EUR")
    assert result.budget_exceeded is not None and result.status == "partial"
    return result


def run_circuit_trip(tools: DemoTools, catalog: Catalog, registry: CollectorRegistry) -> RunResult:
    """Two runs on a tool that answers 500: the first opens its breaker (threshold 1), the
    second fails fast: the circuit metrics get data."""
    tools["weather"].inject("/geocode", Status(500, "boom"))
    orch = Orchestrator(catalog, ScriptedLLM([]), OrchestratorConfig(
        synthesis_enabled=False, retry_max_attempts=1, circuit_failure_threshold=1,
        semantic_retry_enabled=False), registry=registry, clock=ManualClock())
    plan = {"steps": [{"id": "geo", "tool": "weather", "capability": "geocode",
                       "params": {"location": "Paris"}}]}
    assert orch.run("Where is Paris?", plan=plan).steps["geo"].error.code == "HTTP_500"  # type: ignore[union-attr]
    refused = orch.run("Where is Paris?", plan=plan)
    assert refused.steps["geo"].error.code == "CIRCUIT_OPEN"  # type: ignore[union-attr]
    return refused


def run_plan_cache_hit(tools: DemoTools, catalog: Catalog, registry: CollectorRegistry) -> RunResult:
    """The same query twice with ORCH_PLAN_CACHE on: the second run's plan is the first's
    (a miss, a plan kept, a hit): the plan cache metric gets data."""
    plan = {"steps": [{"id": "q", "tool": "stocks", "capability": "quote",
                       "params": {"symbol": "TSLA"}}]}
    llm = ScriptedLLM([plan])
    orch = Orchestrator(catalog, llm, OrchestratorConfig(
        plan_cache=True, store_url="memory://", synthesis_enabled=False), registry=registry,
        clock=ManualClock())
    orch.run("Price of TSLA?")
    again = orch.run("Price of TSLA?")
    assert again.plan_source == "cache" and len(llm.requests) == 1
    return again


def test_a_breaker_that_opens_shows_in_metrics_spans_and_logs(
    demo_tools: DemoTools, demo_catalog: Catalog, registry: CollectorRegistry,
    spans: tuple[TracerProvider, InMemorySpanExporter], caplog: pytest.LogCaptureFixture,
) -> None:
    provider, exporter = spans
    demo_tools["weather"].inject("/geocode", Status(503, "down"))
    orch = Orchestrator(demo_catalog, ScriptedLLM([]), OrchestratorConfig(
        synthesis_enabled=False, retry_max_attempts=1, circuit_failure_threshold=1),
        registry=registry, clock=ManualClock(), tracer_provider=provider)
    plan = {"steps": [{"id": "geo", "tool": "weather", "capability": "geocode",
                       "params": {"location": "Paris"}}]}
    with caplog.at_level(logging.INFO, logger="dagwright.circuit"):
        orch.run("Where is Paris?", plan=plan)
        orch.run("Where is Paris?", plan=plan)
    assert registry.get_sample_value("orchestration_circuit_state", {"tool": "weather"}) == 1
    assert registry.get_sample_value("orchestration_tool_errors_total", {
        "tool": "weather", "capability": "geocode", "category": "CIRCUIT_OPEN"}) == 1
    # the refused call was not sent: no second call counted
    assert registry.get_sample_value("orchestration_tool_calls_total", {
        "tool": "weather", "capability": "geocode", "outcome": "failed"}) == 1
    steps = [s for s in exporter.get_finished_spans() if s.name.startswith("execute_tool")]
    names = [[e.name for e in s.events] for s in steps]
    assert "circuit_open" in names[0] and "circuit_refused" in names[1]
    opened = next(e for e in steps[0].events if e.name == "circuit_open")
    assert opened.attributes is not None and opened.attributes["circuit.previous_state"] == "closed"
    assert [r.getMessage() for r in caplog.records if r.name == "dagwright.circuit"] == [
        "circuit of tool weather: closed -> open (1 consecutive failures within 60s "
        "(last: HTTP_503))"]


# --------------------------------------------------------------------------- fixtures


@pytest.fixture
def spans() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


@pytest.fixture
def log_stream() -> Iterator[io.StringIO]:
    """dagwright's records as JSON lines in a buffer; the logging setup is restored after."""
    root = logging.getLogger("dagwright")
    saved = (list(root.handlers), root.level, root.propagate)
    stream = io.StringIO()
    configure_logging(level="DEBUG", fmt="json", stream=stream)
    yield stream
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])
    root.propagate = saved[2]


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


# --------------------------------------------------------------------------- traces


def test_span_tree_and_layer_events_of_a_run_through_every_layer(
    demo_tools: DemoTools, demo_catalog: Catalog, registry: CollectorRegistry,
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = spans
    result, llm = run_every_layer(demo_tools, demo_catalog, registry, tracer_provider=provider)
    finished = exporter.get_finished_spans()
    by_id = {s.context.span_id: s for s in finished}

    def parent(span: ReadableSpan) -> ReadableSpan | None:
        return by_id.get(span.parent.span_id) if span.parent is not None else None

    # one trace, rooted at the run's invoke_agent span
    assert {f"{s.context.trace_id:032x}" for s in finished} == {result.trace_id}
    roots = [s for s in finished if s.parent is None]
    assert [r.name for r in roots] == ["invoke_agent dagwright"]
    root = roots[0]
    assert root.kind is SpanKind.INTERNAL  # the agent runs in this process
    assert root.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert root.attributes["gen_ai.agent.name"] == "dagwright"
    assert root.attributes["gen_ai.provider.name"] == "scripted"
    assert root.attributes["gen_ai.request.model"] == "scripted"
    assert root.attributes["gen_ai.usage.input_tokens"] == result.usage.input_tokens > 0
    assert root.attributes["gen_ai.usage.output_tokens"] == result.usage.output_tokens > 0
    assert root.attributes["dagwright.run.id"] == result.run_id
    assert root.attributes["dagwright.run.status"] == "succeeded"

    # run -> the conventions' plan span -> two chat spans (the broken plan, then the good one)
    plan_span = next(s for s in finished if s.name == "plan dagwright")
    assert plan_span.kind is SpanKind.INTERNAL
    assert plan_span.attributes["gen_ai.operation.name"] == "plan"
    assert plan_span.attributes["dagwright.plan.purpose"] == "plan"
    assert parent(plan_span) is root
    plan_chats = [s for s in finished if s.attributes.get("dagwright.llm.purpose") == "plan"]
    assert len(plan_chats) == 2 and all(parent(c) is plan_span for c in plan_chats)
    for chat in plan_chats:
        assert chat.name == "chat scripted"
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.request.model"] == "scripted"
        assert chat.attributes["gen_ai.provider.name"] == "scripted"
        assert chat.attributes["gen_ai.output.type"] == "json"
        assert chat.attributes["gen_ai.usage.input_tokens"] > 0
        assert chat.attributes["gen_ai.usage.output_tokens"] > 0
        assert "gen_ai.system" not in chat.attributes  # deprecated for gen_ai.provider.name

    # run -> one execute_tool span per step, with the GenAI and dagwright attributes
    steps = {s.attributes["dagwright.step.id"]: s for s in finished
             if s.attributes.get("gen_ai.operation.name") == "execute_tool"}
    assert sorted(steps) == sorted(STEP_IDS)
    for step_id, span in steps.items():
        step = result.steps[step_id]
        key = f"{step.tool}.{step.capability}"
        assert parent(span) is root
        assert span.name == f"execute_tool {key}"
        assert span.attributes["gen_ai.tool.name"] == key
        assert span.attributes["gen_ai.tool.call.id"] == f"{result.run_id}:{step_id}"
        assert span.attributes["gen_ai.tool.type"] == "extension"
        assert span.attributes["gen_ai.tool.description"] == \
            demo_catalog.get(step.tool, step.capability).description.strip().splitlines()[0]
        assert span.attributes["dagwright.run.id"] == result.run_id
        assert span.attributes["dagwright.capability"] == key
        assert span.attributes["dagwright.attempt"] == len(step.attempts)
        assert span.attributes["dagwright.layer"] == step.attempts[-1].layer
        assert span.attributes["dagwright.step.status"] == "succeeded"

    # step -> HTTP client spans, one per attempt that was sent, nested under their own step
    # although the steps ran concurrently
    for step_id, step_span in steps.items():
        calls = sorted((s for s in finished if "http.request.method" in (s.attributes or {})
                        and s.attributes["dagwright.step.id"] == step_id),
                       key=lambda s: s.start_time or 0)
        assert calls and all(parent(c) is step_span for c in calls)
        sent = [a for a in result.steps[step_id].attempts if a.outcome in ("succeeded", "failed")]
        assert [(c.attributes["dagwright.layer"], c.attributes["dagwright.attempt"]) for c in calls] \
            == [(a.layer, a.number) for a in sent]
        cap = demo_catalog.get(result.steps[step_id].tool, result.steps[step_id].capability)
        path = cap.url.split("127.0.0.1:", 1)[1].split("/", 1)[1]
        for number, call in enumerate(calls):
            assert call.kind is SpanKind.CLIENT and call.name == f"POST /{path}"
            assert call.attributes["http.request.method"] == "POST"
            assert call.attributes["server.address"] == "127.0.0.1"
            assert call.attributes["url.full"] == cap.url
            assert call.attributes["url.template"] == f"/{path}"
            assert call.attributes.get("http.request.resend_count") == (number or None)
        last = calls[-1]  # the call that succeeded: its status code too
        assert last.attributes["http.response.status_code"] == 200
        assert "error.type" not in last.attributes
        for call, attempt in zip(calls, sent, strict=True):
            if attempt.outcome == "failed":  # a 4xx/5xx is its status code, no answer its category
                assert attempt.error is not None
                status = call.attributes.get("http.response.status_code")
                assert call.attributes["error.type"] == (
                    str(status) if status else attempt.error.category.value)
    failed_calls = [s for s in finished if "error.type" in (s.attributes or {})
                    and "http.request.method" in s.attributes]
    assert {s.attributes["error.type"] for s in failed_calls} >= {"CONNECTION_ERROR", "503"}

    # layer LLM calls are children of the step they repair; synthesis of the run
    for purpose in ("validation_feedback", "semantic_retry"):
        chats = [s for s in finished if s.attributes.get("dagwright.llm.purpose") == purpose]
        assert len(chats) == len(llm.requests_for(purpose))
        for chat in chats:
            assert parent(chat) is steps[chat.attributes["dagwright.step.id"]]
    synthesis = next(s for s in finished if s.attributes.get("dagwright.llm.purpose") == "synthesis")
    assert parent(synthesis) is root

    # each layer's decisions as span events on the step it acted on
    events = {sid: [e.name for e in span.events] for sid, span in steps.items()}
    assert events["tsla"] == ["resilience_retry"]
    assert events["pocket"] == ["type_coercion_applied"]
    assert events["fee"] == ["validation_feedback_started", "validation_feedback_failed",
                             "validation_feedback_started", "validation_feedback_success"]
    # amount 0 is a placeholder: layer 3 hands over without asking; layer 4's derivation
    # and the tool's hint are checked before the corrected calls are sent
    assert events["proceeds"] == ["validation_feedback_handover",
                                  "contextual_re_resolution.start",
                                  "contextual_re_resolution.complete", "correction_grounded"]
    assert events["geo"] == ["contextual_re_resolution.start", "contextual_re_resolution.complete",
                             "correction_grounded"]
    assert events["forecast"] == ["type_coercion_applied", "contextual_re_resolution.start",
                                  "contextual_re_resolution.complete", "transient_override"]

    def event(step_id: str, name: str) -> dict[str, Any]:
        return dict(next(e for e in steps[step_id].events if e.name == name).attributes or {})

    assert event("tsla", "resilience_retry")["error.category"] == "CONNECTION_ERROR"
    assert event("pocket", "type_coercion_applied")["coercion.paths"] == "$.amount"
    done = event("proceeds", "contextual_re_resolution.complete")
    assert done["should_retry"] is True and done["changed_parameters"] == 1
    assert done["independent_step"] is False
    assert event("proceeds", "correction_grounded")["provenance.kind"] == "derived"
    assert event("geo", "correction_grounded")["provenance.kind"] == "tool_hint"
    assert event("geo", "contextual_re_resolution.start")["independent_step"] is True
    assert event("forecast", "transient_override")["tool_retryable"] is False


def test_tools_receive_a_traceparent_that_joins_the_run_trace(
    demo_tools: DemoTools, demo_catalog: Catalog, registry: CollectorRegistry,
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = spans
    result, _ = run_every_layer(demo_tools, demo_catalog, registry, tracer_provider=provider)
    tool_call_spans = {f"{s.context.span_id:016x}" for s in exporter.get_finished_spans()
                       if "http.request.method" in (s.attributes or {})}
    requests = [r for name in ("stocks", "currency", "weather") for r in demo_tools[name].requests]
    assert len(requests) == len(tool_call_spans) == 10
    for request in requests:
        version, trace_id, parent_id, flags = str(request.header("traceparent")).split("-")
        assert (version, trace_id) == ("00", result.trace_id)
        assert int(flags, 16) & 1  # sampled
        assert parent_id in tool_call_spans  # the tool's span would be a child of our call


def test_span_attributes_never_carry_parameters_or_the_query(
    demo_tools: DemoTools, demo_catalog: Catalog, registry: CollectorRegistry,
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = spans
    run_every_layer(demo_tools, demo_catalog, registry, tracer_provider=provider)
    for span in exporter.get_finished_spans():
        values = [str(v) for v in (span.attributes or {}).values()]
        for e in span.events:  # the LLM's own analysis may quote values: that is its job
            values += [str(v) for k, v in (e.attributes or {}).items() if k != "analysis"]
        text = " ".join(values)
        for private in ("Tesla shares", "Tokio", "46828.5", "250"):
            assert private not in text, (span.name, private)


# --------------------------------------------------------------------------- metrics

ALLOWED_LABELS = {"tool", "capability", "layer", "outcome", "category", "purpose", "status",
                  "direction", "reason", "budget", "kind", "le"}


def test_metrics_of_every_layer_have_bounded_labels(
    demo_tools: DemoTools, demo_catalog: Catalog, registry: CollectorRegistry,
) -> None:
    result, _ = run_every_layer(demo_tools, demo_catalog, registry)
    run_auth_failure(demo_tools, demo_catalog, registry)

    def value(name: str, **labels: str) -> float:
        sample = registry.get_sample_value(name, labels)
        assert sample is not None, (name, labels)
        return sample

    convert = {"tool": "currency", "capability": "convert"}
    assert value("orchestration_runs_total", status="succeeded") == 1
    assert value("orchestration_runs_total", status="failed") == 1
    assert value("orchestration_run_duration_seconds_count", status="succeeded") == 1
    assert value("orchestration_steps_total", status="succeeded", **convert) == 3
    assert value("orchestration_step_duration_seconds_count", **convert) == 3
    assert value("orchestration_type_coercion_applied_total", **convert) == 1
    assert value("orchestration_type_coercion_applied_total", tool="weather", capability="forecast") == 1
    assert value("orchestration_validation_feedback_attempts_total", **convert) == 2
    assert value("orchestration_validation_feedback_success_total", **convert) == 1
    assert value("orchestration_validation_feedback_failed_total", **convert) == 1
    assert value("orchestration_corrections_grounded_total", kind="derived", **convert) == 1
    assert value("orchestration_corrections_grounded_total", kind="tool_hint", tool="weather",
                 capability="geocode") == 1
    assert registry.get_sample_value("orchestration_corrections_ungrounded_total",
                                     {**convert, "reason": "no_provenance"}) is None
    for capability, tool in (("convert", "currency"), ("geocode", "weather"), ("forecast", "weather")):
        assert value("orchestration_semantic_retry_attempts_total", tool=tool, capability=capability) == 1
        assert value("orchestration_semantic_retry_success_total", tool=tool, capability=capability) == 1
    independent = [s for m in registry.collect() for s in m.samples
                   if s.name == "orchestration_semantic_retry_independent_step_total"]
    assert [(set(s.labels), s.labels["capability"].endswith("geocode"), s.value) for s in independent] \
        == [({"capability"}, True, 1.0)]
    assert value("orchestration_semantic_retry_llm_latency_seconds_count") == 3
    assert value("orchestration_transient_override_total", tool="weather", capability="forecast") == 1
    assert value("orchestration_resilience_retries_total", tool="stocks", capability="quote",
                 category="CONNECTION_ERROR") == 1
    assert value("orchestration_tool_errors_total", tool="stocks", capability="lookup",
                 category="AUTH_ERROR") == 1
    assert value("orchestration_tool_errors_total", category="INPUT_ERROR", **convert) == 1
    assert value("orchestration_tool_errors_total", category="VALIDATION_ERROR", **convert) == 2
    assert sum(s.value for m in registry.collect() for s in m.samples
               if s.name == "orchestration_planner_retries_total") == 1
    for purpose, calls in (("plan", 2), ("validation_feedback", 2), ("semantic_retry", 3),
                           ("synthesis", 1)):
        assert value("orchestration_llm_calls_total", purpose=purpose, outcome="ok") == calls
        assert value("orchestration_llm_tokens_total", purpose=purpose, direction="input") == \
            result.usage.by_purpose[purpose]["input_tokens"]

    exposition = generate_latest(registry).decode()
    for metric in registry.collect():
        for sample in metric.samples:
            assert set(sample.labels) <= ALLOWED_LABELS, sample
    for private in (result.run_id, "Tokio", "Tesla", "46828.5", "TSLA"):
        assert private not in exposition


def test_serve_metrics_exposes_a_registry_over_http(registry: CollectorRegistry,
                                                    demo_tools: DemoTools, demo_catalog: Catalog) -> None:
    run_auth_failure(demo_tools, demo_catalog, registry)
    server = serve_metrics(0, registry, addr="127.0.0.1")
    try:
        body = httpx.get(server.url, timeout=5).text
    finally:
        server.close()
    assert 'orchestration_runs_total{status="failed"} 1.0' in body
    assert 'orchestration_tool_errors_total{capability="lookup",category="AUTH_ERROR",tool="stocks"} 1.0' in body


def test_serve_metrics_listens_on_loopback_unless_told(registry: CollectorRegistry) -> None:
    server = serve_metrics(0, registry)
    try:
        assert server.url.startswith("http://127.0.0.1:")
        assert httpx.get(server.url, timeout=5).status_code == 200
    finally:
        server.close()


def test_the_cli_serves_metrics_on_orch_metrics_host(
    demo_tools: DemoTools, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    """`dagwright run --metrics-port` listens where ORCH_METRICS_HOST says (loopback by
    default), not on every interface."""
    import orchestration.telemetry as telemetry

    seen: list[str] = []
    real = telemetry.serve_metrics

    def recording(port: int, registry: CollectorRegistry | None = None, *,
                  addr: str = "127.0.0.1") -> Any:
        seen.append(addr)
        return real(port, registry, addr="127.0.0.1")  # tests listen on loopback only

    monkeypatch.setattr(telemetry, "serve_metrics", recording)
    script = tmp_path / "script.json"
    plan = {"steps": [{"id": "q", "tool": "stocks", "capability": "quote",
                       "params": {"symbol": "NVDA"}}]}
    script.write_text(json.dumps([plan, plan]))
    catalog_file = tmp_path / "catalog.json"
    catalog_file.write_text(json.dumps(demo_tools.catalog_dict()))
    for name, value in {"ORCH_LLM_PROVIDER": "scripted", "ORCH_LLM_SCRIPT": str(script),
                        "ORCH_CATALOG": str(catalog_file), "ORCH_SYNTHESIS_ENABLED": "false",
                        "ORCH_STORE_URL": "memory://"}.items():
        monkeypatch.setenv(name, value)
    assert cli_main(["run", "q", "--json", "--metrics-port", "0"], out=io.StringIO()) == 0
    monkeypatch.setenv("ORCH_METRICS_HOST", "0.0.0.0")
    monkeypatch.setenv("ORCH_METRICS_PORT", "0")
    assert cli_main(["run", "q", "--json"], out=io.StringIO()) == 0
    assert seen == ["127.0.0.1", "0.0.0.0"]


# --------------------------------------------------------------------------- logs


def test_log_records_carry_run_step_and_trace_ids(
    demo_tools: DemoTools, demo_catalog: Catalog, registry: CollectorRegistry,
    spans: tuple[TracerProvider, InMemorySpanExporter], log_stream: io.StringIO,
) -> None:
    provider, exporter = spans
    result, _ = run_every_layer(demo_tools, demo_catalog, registry, tracer_provider=provider)
    records = json_lines(log_stream.getvalue())
    assert records and all(r["run_id"] == result.run_id for r in records)
    assert all(r["logger"].startswith("dagwright.") for r in records)
    assert all(r["trace_id"] == result.trace_id for r in records)
    messages = [r["message"] for r in records]
    assert messages[0] == "run started"
    end = next(r for r in records if r["message"].startswith("run succeeded"))
    assert end["steps"] == {"succeeded": 6} and end["llm_calls"] == 8
    # layer decisions are logged with the id of the step they were made for
    decisions = {(r["event"], r.get("step_id")) for r in records if r["logger"] == "dagwright.events"}
    assert {("resilience_retry", "tsla"), ("validation_feedback_success", "fee"),
            ("type_coercion_applied", "pocket"), ("contextual_re_resolution.complete", "geo"),
            ("contextual_re_resolution.complete", "proceeds"),
            ("transient_override", "forecast")} <= decisions
    # the step's log lines point at the step's own span
    step_spans = {f"{s.context.span_id:016x}": s.attributes["dagwright.step.id"]
                  for s in exporter.get_finished_spans()
                  if s.attributes.get("gen_ai.operation.name") == "execute_tool"}
    for r in records:
        if r["logger"] == "dagwright.events" and r.get("span_id") in step_spans:
            assert step_spans[r["span_id"]] == r["step_id"]


def test_a_services_own_handler_sees_the_ids_without_any_dagwright_setup(
    demo_tools: DemoTools, demo_catalog: Catalog, registry: CollectorRegistry,
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.DEBUG, logger="dagwright"):
        result, _ = run_every_layer(demo_tools, demo_catalog, registry)
    records = [r for r in caplog.records if r.name.startswith("dagwright.")]
    assert len(records) > 10
    assert {getattr(r, "run_id", None) for r in records} == {result.run_id}
    by_event = {(getattr(r, "event", None), getattr(r, "step_id", None)) for r in records}
    assert ("transient_override", "forecast") in by_event
    assert all(hasattr(r, "trace_id") for r in records)  # None: this service traces nothing


def test_a_failed_step_is_logged_with_its_id_and_cause(
    demo_tools: DemoTools, demo_catalog: Catalog, registry: CollectorRegistry,
    log_stream: io.StringIO,
) -> None:
    result = run_auth_failure(demo_tools, demo_catalog, registry)
    records = json_lines(log_stream.getvalue())
    failed = next(r for r in records if r["message"].startswith("step who failed"))
    assert failed["level"] == "WARNING" and failed["step_id"] == "who"
    assert failed["category"] == "AUTH_ERROR" and failed["run_id"] == result.run_id
    assert "no LLM asked" in failed["gave_up"]
    assert records[-1]["message"].startswith("run failed") and records[-1]["level"] == "WARNING"


def test_text_format_and_context_scoping() -> None:
    stream = io.StringIO()
    logger = get_logger("test.scoping")
    root = logging.getLogger("dagwright")
    saved = (list(root.handlers), root.level, root.propagate)
    try:
        configure_logging(level="INFO", fmt="text", stream=stream)
        with log_context(run_id="r1", redactor=Redactor([r"acct-\d+"])):
            with log_context(step_id="s1"):
                logger.info("charging acct-42 with Bearer abcdef123")
            logger.info("outside the step")
        logger.info("outside the run")
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        root.propagate = saved[2]
    lines = stream.getvalue().splitlines()
    assert "[run=r1 step=s1 trace=-] charging [REDACTED] with Bearer [REDACTED]" in lines[0]
    assert "[run=r1 step=- trace=-] outside the step" in lines[1]
    assert "[run=- step=- trace=-] outside the run" in lines[2]


# --------------------------------------------------------------------------- secrets

HEADER_SECRET = "hdr-9f8e7d6c5b4a39281706"
BEARER_TOKEN = "tok.ZXhhbXBsZS1iZWFyZXItdG9rZW4"
PARAM_SECRET = "sk-plantedPARAMsecret0123456789"
ACCOUNT = "acct-775533"  # only the operator's ORCH_REDACT_PATTERNS knows this shape
LLM_SECRET = "sk-ant-plantedLLMsecretABCDEFGH"
SECRETS = (HEADER_SECRET, BEARER_TOKEN, PARAM_SECRET, ACCOUNT, LLM_SECRET)


def test_no_secret_reaches_traces_logs_debug_store_or_metrics(
    demo_tools: DemoTools, registry: CollectorRegistry, tmp_path: Path,
    spans: tuple[TracerProvider, InMemorySpanExporter], log_stream: io.StringIO,
) -> None:
    provider, exporter = spans
    data = demo_tools.catalog_dict()
    for tool in data["tools"]:
        tool["headers"] = {"X-Api-Key": HEADER_SECRET, "Authorization": f"Bearer {BEARER_TOKEN}"}
    catalog = Catalog.from_dict(data)
    plan = {"steps": [
        {"id": "who", "tool": "stocks", "capability": "lookup",
         "params": {"company": f"Acme {PARAM_SECRET} {ACCOUNT}"}},
        {"id": "fx", "tool": "currency", "capability": "convert",
         "params": {"amount": 10, "from": "USD", "to": "EUR"}},
    ]}

    def respond(request: LLMRequest) -> str | dict[str, Any]:
        if request.purpose == "plan":
            return plan
        if request.purpose == "validation_feedback":
            return {"can_fix": False, "corrected_parameters": None,
                    "analysis": f"company {PARAM_SECRET} unknown; my key is {LLM_SECRET}"}
        if request.purpose == "semantic_retry":
            return {"should_retry": False, "is_transient_error": False, "corrected_parameters": {},
                    "analysis": f"no company called Acme; Authorization: Bearer {BEARER_TOKEN}"}
        return f"10 USD is 9.2 EUR (account {ACCOUNT}, key {LLM_SECRET})"

    llm = ScriptedLLM(respond)
    debug_path = tmp_path / "llm-debug.jsonl"
    config = OrchestratorConfig(llm_debug_enabled=True, llm_debug_path=debug_path,
                                redact_patterns=[r"acct-\d{6}"])
    orch = Orchestrator(catalog, llm, config, registry=registry, tracer_provider=provider,
                        clock=ManualClock())
    result = orch.run(f"Find Acme's ticker and convert 10 USD to EUR (account {ACCOUNT})")
    assert result.status == "partial"

    # the secrets really were in flight: headers sent, params and answers in LLM payloads
    sent = demo_tools["stocks"].requests_to("/lookup")[0]
    assert sent.header("x-api-key") == HEADER_SECRET
    assert sent.header("authorization") == f"Bearer {BEARER_TOKEN}"
    assert PARAM_SECRET in llm.requests_for("validation_feedback")[0].prompt_text
    assert LLM_SECRET in llm.requests_for("semantic_retry")[0].prompt_text
    assert PARAM_SECRET in result.steps["who"].error.message  # the caller's own data keeps it

    outputs = {
        "traces": "\n".join(s.to_json() for s in exporter.get_finished_spans()),
        "logs": log_stream.getvalue(),
        "debug store": debug_path.read_text(),
        "metrics": generate_latest(registry).decode(),
    }
    for where, text in outputs.items():
        assert text, where
        for secret in SECRETS:
            assert secret not in text, f"{secret!r} leaked into {where}"
    # redacted, not dropped: the records are there with the mask in place of the secret
    assert MASK in outputs["debug store"] and MASK in outputs["logs"] and MASK in outputs["traces"]
    records = list(iter_records(debug_path))
    assert {r["site"] for r in records} == {"plan", "validation_feedback", "semantic_retry",
                                           "synthesis"}


@pytest.mark.parametrize(("text", "expected"), [
    ("Authorization: Bearer abc.def-123", "Authorization: [REDACTED]"),
    ('{"authorization": "Basic dXNlcjpwYXNz"}', '{"authorization": "[REDACTED]"}'),
    ("token Bearer eyJhbGciOi.x-y", "token Bearer [REDACTED]"),
    ("use sk-proj-ABCDEFGH12345678 now", "use [REDACTED] now"),
    ("https://t/q?api_key=SUPERSECRET&city=Paris", "https://t/q?api_key=[REDACTED]&city=Paris"),
    ('"X-Api-Key": "k-123456"', '"X-Api-Key": "[REDACTED]"'),
    ("password=hunter22 ok", "password=[REDACTED] ok"),
    ("id AKIAABCDEFGHIJKLMNOP", "id [REDACTED]"),
    ('"max_tokens": 100, "input_tokens": 5', '"max_tokens": 100, "input_tokens": 5'),
    ('"api_key": {"type": "string"}', '"api_key": {"type": "string"}'),
    ("the token is fine", "the token is fine"),
])
def test_redactor_builtin_patterns(text: str, expected: str) -> None:
    redactor = Redactor()
    assert redactor.redact(text) == expected
    assert redactor.redact(expected) == expected  # idempotent


def test_redactor_knows_config_patterns_api_key_and_catalog_header_values() -> None:
    catalog = Catalog.from_dict({"tools": [{
        "name": "t", "base_url": "http://127.0.0.1:1",
        "headers": {"X-Token": "plain-value-123", "Accept": "application/json"},
        "capabilities": [{"name": "c", "path": "/c"}]}]})
    config = OrchestratorConfig(llm_api_key="opaque-provider-key", redact_patterns=[r"acct-\d+"])
    redactor = Redactor.from_config(config, catalog)
    text = "plain-value-123 opaque-provider-key acct-9 application/json"
    assert redactor.redact(text) == "[REDACTED] [REDACTED] [REDACTED] application/json"
    assert redactor.redact_value({"headers": {"X-Token": "v", "Accept": "json"}, "input_tokens": 3}) \
        == {"headers": {"X-Token": MASK, "Accept": "json"}, "input_tokens": 3}


# --------------------------------------------------------------------------- debug store


def test_debug_store_keeps_every_exchange_per_site_and_the_cli_shows_a_run(
    demo_tools: DemoTools, demo_catalog: Catalog, registry: CollectorRegistry, tmp_path: Path,
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, _ = spans
    path = tmp_path / "debug.jsonl"
    config = OrchestratorConfig(llm_debug_enabled=True, llm_debug_path=path, llm_debug_max_chars=1000)
    result, llm = run_every_layer(demo_tools, demo_catalog, registry, config=config,
                                  tracer_provider=provider)
    records = read_run(path, result.run_id)
    assert [r["site"] for r in records] == [r.purpose for r in llm.requests]
    assert all(r["run_id"] == result.run_id and r["trace_id"] == result.trace_id for r in records)
    layer_records = [r for r in records if r["site"] in ("validation_feedback", "semantic_retry")]
    assert sorted((r["site"], r["step_id"]) for r in layer_records) == [
        ("semantic_retry", "forecast"), ("semantic_retry", "geo"), ("semantic_retry", "proceeds"),
        ("validation_feedback", "fee"), ("validation_feedback", "fee")]
    tesla = next(r for r in layer_records if r["site"] == "semantic_retry" and r["step_id"] == "proceeds")
    assert json.loads(tesla["response"])["corrected_parameters"] == {"amount": 46828.5}
    assert tesla["usage"]["input_tokens"] > 0 and tesla["response_schema"] == "semantic_retry"
    # bounded: the plan prompt is longer than the 1000 chars kept, with a visible marker
    plan = records[0]
    assert plan["truncated"] is True
    assert sum(len(m["content"]) for m in plan["messages"]) < 1000 + 200
    assert "[debug store: truncated" in "".join(m["content"] for m in plan["messages"])
    assert plan["response"] == '{"steps": [{"id": "tsla", "tool": '  # the broken answer, kept as is

    out = io.StringIO()
    assert cli_main(["debug", result.run_id[:10], "--path", str(path)], out=out) == 0
    shown = out.getvalue()
    assert shown.startswith(f"run {result.run_id}: 8 LLM exchange(s)")
    assert "site=semantic_retry step=proceeds" in shown and "100 x 468.285 = 46828.5" in shown
    assert cli_main(["debug", "nope", "--path", str(path)], out=io.StringIO()) == 1


def test_debug_store_file_is_capped_and_rotates(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    store = LLMDebugStore(path, max_chars=1000, max_file_bytes=20_000)
    request = LLMRequest(purpose="semantic_retry", messages=[{"role": "user", "content": "x" * 5000}],
                         run_id="r", step_id="s")
    for _ in range(40):
        store.record(request, LLMResponse(content="y" * 5000), None, 0.01)
    store.close()
    backup = path.with_name("d.jsonl.1")
    assert path.stat().st_size <= 20_000 and backup.stat().st_size <= 20_000
    records = list(iter_records(path))
    assert 10 <= len(records) < 40 and store.records_written == 40
    assert all(len(r["response"]) < 1100 and r["truncated"] for r in records)


def test_debug_store_write_failure_never_breaks_the_run(
    demo_tools: DemoTools, demo_catalog: Catalog, registry: CollectorRegistry, tmp_path: Path,
) -> None:
    folder = tmp_path / "debug"
    config = OrchestratorConfig(llm_debug_enabled=True, llm_debug_path=folder / "llm.jsonl")
    orch = Orchestrator(demo_catalog, every_layer_llm(), config, registry=registry,
                        clock=ManualClock())
    assert orch.debug_store is not None
    folder.rmdir()
    folder.write_text("")  # the store's folder is now a file: every write fails
    inject_every_layer_faults(demo_tools)
    assert orch.run(EVERY_LAYER_QUERY).status == "succeeded"
    assert orch.debug_store.records_dropped == 8 and orch.debug_store.records_written == 0


# --------------------------------------------------------------------------- exporters


def test_exporter_none_installs_nothing_and_console_prints_spans(
    demo_tools: DemoTools, demo_catalog: Catalog, registry: CollectorRegistry,
) -> None:
    assert tracer_provider_from_config(OrchestratorConfig()) is None
    out = io.StringIO()
    provider = tracer_provider_from_config(OrchestratorConfig(otel_exporter="console"), console_out=out)
    assert provider is not None
    run_every_layer(demo_tools, demo_catalog, registry, tracer_provider=provider)
    provider.shutdown()
    assert '"name": "invoke_agent dagwright"' in out.getvalue()
    assert '"service.name": "dagwright"' in out.getvalue()


class _OTLPReceiver(BaseHTTPRequestHandler):
    received: list[tuple[str, bytes]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.received.append((self.path, body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_otlp_exporter_sends_the_run_to_the_configured_endpoint(
    demo_tools: DemoTools, demo_catalog: Catalog, registry: CollectorRegistry,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http",
                        reason="the 'otlp' extra is not installed")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _OTLPReceiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _OTLPReceiver.received = []
    try:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{server.server_port}")
        monkeypatch.setenv("OTEL_SERVICE_NAME", "checkout-agent")
        provider = tracer_provider_from_config(OrchestratorConfig(otel_exporter="otlp"))
        assert provider is not None
        run_every_layer(demo_tools, demo_catalog, registry, tracer_provider=provider)
        provider.shutdown()
    finally:
        server.shutdown()
        server.server_close()
    paths = {p for p, _ in _OTLPReceiver.received}
    body = b"".join(b for _, b in _OTLPReceiver.received)
    assert paths == {"/v1/traces"}
    assert b"invoke_agent dagwright" in body and b"execute_tool weather.forecast" in body
    assert b"checkout-agent" in body


def test_cli_run_exports_spans_logs_json_and_serves_metrics(
    demo_tools: DemoTools, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    catalog_file = tmp_path / "catalog.json"
    catalog_file.write_text(json.dumps(demo_tools.catalog_dict()))
    script = tmp_path / "script.json"
    plan = {"steps": [{"id": "q", "tool": "stocks", "capability": "quote", "params": {"symbol": "NVDA"}}]}
    script.write_text(json.dumps([plan, "NVDA is at 131.38 USD."]))
    for name, value in {"ORCH_LLM_PROVIDER": "scripted", "ORCH_LLM_SCRIPT": str(script),
                        "ORCH_CATALOG": str(catalog_file), "ORCH_OTEL_EXPORTER": "console",
                        "ORCH_LOG_FORMAT": "json",
                        # `dagwright run` logs INFO when told (else warnings beside its progress)
                        "ORCH_LOG_LEVEL": "INFO"}.items():
        monkeypatch.setenv(name, value)
    root = logging.getLogger("dagwright")
    saved = (list(root.handlers), root.level, root.propagate)
    try:
        out = io.StringIO()
        assert cli_main(["run", "NVDA price?", "--json", "--metrics-port", "0"], out=out) == 0
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        root.propagate = saved[2]
    result = json.loads(out.getvalue())
    err = capsys.readouterr().err
    logs = [json.loads(line) for line in err.splitlines() if line.startswith('{"ts"')]
    assert {r["run_id"] for r in logs} == {result["run_id"]}
    assert {r["trace_id"] for r in logs} == {result["trace_id"]}
    assert re.search(r'"name": "execute_tool stocks.quote"', err)
