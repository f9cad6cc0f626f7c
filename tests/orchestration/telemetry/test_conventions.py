"""Telemetry on the OpenTelemetry conventions: GenAI client metrics and dagwright's own OTel
metrics through a MeterProvider the service passes in, chat spans of a real HTTP LLM,
in-process tool calls, and URLs with credentials in them.

Metrics are read with the SDK's InMemoryMetricReader; nothing global is installed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader, Metric
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from prometheus_client import CollectorRegistry

from orchestration import (
    Catalog,
    LLMRequest,
    Orchestrator,
    OrchestratorConfig,
    ScriptedLLM,
    ToolFailed,
)
from orchestration.clock import ManualClock
from orchestration.demo.tools import DemoTools, Status
from orchestration.llm.openai_compat import OpenAICompatibleClient
from tests.llm_servers import FakeOpenAIServer
from tests.orchestration.telemetry.test_observability import run_every_layer


@pytest.fixture
def spans() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


@pytest.fixture
def meters() -> Iterator[tuple[MeterProvider, InMemoryMetricReader]]:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    yield provider, reader
    provider.shutdown()


def collected(reader: InMemoryMetricReader) -> dict[str, Metric]:
    data = reader.get_metrics_data()
    assert data is not None
    return {m.name: m for rm in data.resource_metrics for sm in rm.scope_metrics
            for m in sm.metrics}


def points(metric: Metric) -> list[Any]:
    return list(metric.data.data_points)


def test_genai_client_metrics_and_dagwright_counters_reach_the_services_meter_provider(
    demo_tools: DemoTools, demo_catalog: Catalog, registry: CollectorRegistry,
    meters: tuple[MeterProvider, InMemoryMetricReader],
) -> None:
    provider, reader = meters
    result, llm = run_every_layer(demo_tools, demo_catalog, registry, meter_provider=provider)
    metrics = collected(reader)

    tokens = metrics["gen_ai.client.token.usage"]
    assert tokens.unit == "{token}"
    by_type: dict[str, int] = {}
    for point in points(tokens):
        assert isinstance(point, HistogramDataPoint)
        assert point.explicit_bounds[:4] == (1, 4, 16, 64)  # the conventions' advice
        attrs = dict(point.attributes)
        assert attrs["gen_ai.operation.name"] == "chat"
        assert attrs["gen_ai.provider.name"] == "scripted"
        assert attrs["gen_ai.request.model"] == attrs["gen_ai.response.model"] == "scripted"
        by_type[attrs["gen_ai.token.type"]] = by_type.get(attrs["gen_ai.token.type"], 0) + int(point.sum)
    assert by_type == {"input": result.usage.input_tokens, "output": result.usage.output_tokens}

    duration = metrics["gen_ai.client.operation.duration"]
    assert duration.unit == "s"
    calls = {dict(p.attributes)["dagwright.llm.purpose"]: p.count for p in points(duration)}
    assert calls == {purpose: len(llm.requests_for(purpose))
                     for purpose in ("plan", "validation_feedback", "semantic_retry", "synthesis")}

    layers: dict[tuple[str, str], int] = {}
    for point in points(metrics["dagwright.layer.events"]):
        attrs = dict(point.attributes)
        key = (attrs["dagwright.layer"], attrs["dagwright.layer.event"])
        layers[key] = layers.get(key, 0) + int(point.value)
    assert layers[("type_coercion", "type_coercion_applied")] == 2
    assert layers[("validation_feedback", "validation_feedback_started")] == 2
    assert layers[("validation_feedback", "validation_feedback_success")] == 1
    assert layers[("semantic_retry", "contextual_re_resolution.start")] == 3
    assert layers[("semantic_retry", "transient_override")] == 1
    assert layers[("resilience", "resilience_retry")] == 1

    runs = {dict(p.attributes)["dagwright.run.status"]: p.value for p in points(metrics["dagwright.runs"])}
    assert runs == {"succeeded": 1}
    steps = sum(p.value for p in points(metrics["dagwright.steps"]))
    assert steps == len(result.steps)
    sent = sum(p.value for p in points(metrics["dagwright.tool.calls"]))
    assert sent == sum(1 for s in result.steps.values() for a in s.attempts
                       if a.outcome in ("succeeded", "failed"))
    # bounded attributes only: no run ids, step ids or parameters in any metric
    for metric in metrics.values():
        for point in points(metric):
            assert not {"dagwright.run.id", "dagwright.step.id"} & set(point.attributes)


def test_a_failed_http_call_carries_its_status_code_as_error_type(
    demo_tools: DemoTools, demo_catalog: Catalog, registry: CollectorRegistry,
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = spans
    demo_tools["stocks"].inject("/lookup", Status(401, {"error": "invalid credentials"}))
    orch = Orchestrator(demo_catalog, ScriptedLLM([]), OrchestratorConfig(synthesis_enabled=False),
                        registry=registry, tracer_provider=provider, clock=ManualClock())
    plan = {"steps": [{"id": "who", "tool": "stocks", "capability": "lookup",
                       "params": {"company": "Tesla"}}]}
    result = orch.run("Which ticker is Tesla?", plan=plan)
    finished = exporter.get_finished_spans()
    call = next(s for s in finished if s.kind is SpanKind.CLIENT)
    assert call.name == "POST /lookup"
    assert call.attributes["http.response.status_code"] == 401
    assert call.attributes["error.type"] == "401"
    root = next(s for s in finished if s.name == "invoke_agent dagwright")
    assert root.attributes["error.type"] == "steps_failed" and result.status == "failed"


def test_chat_spans_of_a_real_http_llm_name_the_server_and_the_response(
    openai_server: FakeOpenAIServer, registry: CollectorRegistry,
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = spans
    catalog = Catalog()
    catalog.add_function(lambda: 42, tool="calc", capability="answer",
                         description="The answer.\nSecond line is not a description.")
    openai_server.answer('{"steps": [{"id": "a", "tool": "calc", "capability": "answer"}]}')
    openai_server.answer("42", model="gpt-test-2024")
    llm = OpenAICompatibleClient(base_url=openai_server.base_url, model="gpt-test")
    result = Orchestrator(catalog, llm, registry=registry, tracer_provider=provider).run("q")
    assert result.status == "succeeded"
    finished = exporter.get_finished_spans()
    chats = [s for s in finished if s.name == "chat gpt-test"]
    assert len(chats) == 2
    for chat in chats:
        assert chat.kind is SpanKind.CLIENT
        assert chat.attributes["gen_ai.provider.name"] == "openai"
        assert chat.attributes["server.address"] == "127.0.0.1"
        assert chat.attributes["server.port"] == openai_server.port
        assert str(chat.attributes["gen_ai.response.id"]).startswith("chatcmpl-")
    assert chats[1].attributes["gen_ai.response.model"] == "gpt-test-2024"
    root = next(s for s in finished if s.name == "invoke_agent dagwright")
    assert root.attributes["gen_ai.provider.name"] == "openai"
    assert root.attributes["gen_ai.request.model"] == "gpt-test"

    # an in-process tool runs here, and its one call is recorded on the step's span (one
    # span per step on the happy path): INTERNAL, no HTTP attributes, no call span
    assert not [s for s in finished if s.name.startswith("tool_call")]
    step = next(s for s in finished if s.name == "execute_tool calc.answer")
    assert step.kind is SpanKind.INTERNAL
    assert not any(k.startswith(("http.", "url.", "server.")) for k in step.attributes)
    assert step.attributes["gen_ai.tool.type"] == "function"
    assert step.attributes["gen_ai.tool.description"] == "The answer."
    assert step.attributes["dagwright.attempt"] == 1
    assert step.attributes["dagwright.layer"] == "plan"


def test_an_in_process_step_called_again_shows_one_span_per_call(
    registry: CollectorRegistry, spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    """A step's first call has no span of its own only while it is the step's only call:
    once the step calls again, the first call gets its span after the fact (its real
    start and end, its failure), so a retried step shows every call in order."""
    provider, exporter = spans
    calls: list[int] = []

    def flaky(n: int) -> dict[str, int]:
        calls.append(n)
        if len(calls) == 1:
            raise ToolFailed("BUSY", "try again", "SERVICE_ERROR", retryable=True)
        return {"n": n}

    catalog = Catalog()
    catalog.add_function(flaky, tool="svc", capability="flaky",
                         input_schema={"type": "object", "properties": {"n": {"type": "integer"}}})
    plan = {"steps": [{"id": "f", "tool": "svc", "capability": "flaky", "params": {"n": 3}}]}
    orch = Orchestrator(catalog, ScriptedLLM([]), OrchestratorConfig(synthesis_enabled=False),
                        registry=registry, tracer_provider=provider, clock=ManualClock())
    result = orch.run("q", plan=plan)
    assert result.status == "succeeded" and len(result.steps["f"].attempts) == 2
    finished = exporter.get_finished_spans()
    step = next(s for s in finished if s.name == "execute_tool svc.flaky")
    tool_calls = sorted((s for s in finished if s.name == "tool_call svc.flaky"),
                        key=lambda s: s.start_time or 0)
    assert [c.attributes["dagwright.attempt"] for c in tool_calls] == [1, 2]
    assert [c.attributes["dagwright.layer"] for c in tool_calls] == ["plan", "resilience"]
    for call in tool_calls:
        assert call.kind is SpanKind.INTERNAL
        assert call.parent is not None and call.parent.span_id == step.context.span_id
        assert call.attributes["dagwright.step.id"] == "f"
        assert step.start_time <= call.start_time <= call.end_time <= step.end_time
    first, second = tool_calls
    assert first.end_time <= second.start_time
    assert first.status.status_code is StatusCode.ERROR
    assert first.attributes["error.type"] == "SERVICE_ERROR"
    assert second.status.status_code is StatusCode.UNSET
    assert step.attributes["dagwright.attempt"] == 2


def test_url_full_never_carries_credentials_of_the_catalog_url(
    demo_tools: DemoTools, registry: CollectorRegistry,
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = spans
    base = demo_tools.urls["stocks"].replace("http://", "http://svc-user:pa55word-xyz@")
    catalog = Catalog()
    catalog.add_http(tool="stocks", capability="quote", url=f"{base}/quote?region=eu",
                     input_schema={"type": "object", "properties": {"symbol": {"type": "string"}}})

    def respond(request: LLMRequest) -> Any:
        return "ok"

    plan = {"steps": [{"id": "q", "tool": "stocks", "capability": "quote",
                       "params": {"symbol": "AAPL"}}]}
    Orchestrator(catalog, ScriptedLLM(respond), registry=registry,
                 tracer_provider=provider).run("q", plan=plan)
    call = next(s for s in exporter.get_finished_spans() if s.kind is SpanKind.CLIENT)
    host = demo_tools.urls["stocks"].removeprefix("http://")
    assert call.attributes["url.full"] == f"http://REDACTED:REDACTED@{host}/quote?region=REDACTED"
    assert all("pa55word-xyz" not in span.to_json() for span in exporter.get_finished_spans())
