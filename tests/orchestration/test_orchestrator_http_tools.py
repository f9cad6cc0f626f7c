"""The engine over real HTTP: demo tools on loopback, an OpenAI-protocol LLM server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from orchestration import Catalog, ErrorCategory, Orchestrator, OrchestratorConfig, ScriptedLLM
from orchestration.demo.tools import DemoTools, Drop, Garbage, Hang, Status
from orchestration.llm.openai_compat import OpenAICompatibleClient
from tests import ROOT
from tests.llm_servers import FakeOpenAIServer

WEATHER_PLAN = {"steps": [
    {"id": "geo", "tool": "weather", "capability": "geocode", "params": {"location": "Paris"}},
    {"id": "fc", "tool": "weather", "capability": "forecast",
     "params": {"lat": "{{geo.lat}}", "lon": "{{geo.lon}}", "days": 2}},
]}
# no resilience retries: these tests look at the first failure itself
ONE_TRY = {"retry_max_attempts": 1, "synthesis_enabled": False}


def orch_with(catalog: Catalog, plan: dict[str, Any], registry: CollectorRegistry,
              **config: Any) -> Orchestrator:
    return Orchestrator(catalog=catalog, llm=ScriptedLLM([plan]),
                        config=OrchestratorConfig(**config), registry=registry)


def test_query_planned_by_an_openai_protocol_server_runs_over_http(
    openai_server: FakeOpenAIServer, demo_tools: DemoTools, demo_catalog: Catalog,
    registry: CollectorRegistry,
) -> None:
    openai_server.answer("Here you go:\n```json\n" + json.dumps(WEATHER_PLAN) + "\n```")
    openai_server.answer("Paris: mild for two days.")
    llm = OpenAICompatibleClient(base_url=openai_server.base_url, model="test-model",
                                 api_key="sk-test")
    orch = Orchestrator(catalog=demo_catalog, llm=llm, registry=registry)
    result = orch.run("Weather in Paris for 2 days?")

    assert result.status == "succeeded", result.error
    assert result.answer == "Paris: mild for two days."
    assert result.steps["fc"].output["lat"] == 48.8566
    assert len(result.steps["fc"].output["daily"]) == 2
    # the tool saw typed values bound from the upstream output
    forecast_calls = demo_tools["weather"].requests_to("/forecast")
    assert [r.body for r in forecast_calls] == [{"lat": 48.8566, "lon": 2.3522, "days": 2}]
    # the LLM server saw a plan request constrained by a JSON schema, then synthesis
    plan_req, synth_req = openai_server.requests
    assert plan_req.body["model"] == "test-model"
    assert plan_req.body["response_format"]["type"] == "json_schema"
    assert "weather.forecast" in plan_req.body["messages"][0]["content"]
    assert "Weather in Paris for 2 days?" in plan_req.body["messages"][1]["content"]
    assert "48.8566" in synth_req.body["messages"][1]["content"]
    assert result.usage.llm_calls == 2
    assert result.usage.input_tokens == 22 and result.usage.output_tokens == 14


def test_broken_plan_json_from_the_server_is_fed_back(
    openai_server: FakeOpenAIServer, demo_catalog: Catalog, registry: CollectorRegistry,
) -> None:
    openai_server.answer('{"steps": [{"id": "geo", "tool": "weather"')
    openai_server.answer(json.dumps(WEATHER_PLAN))
    llm = OpenAICompatibleClient(base_url=openai_server.base_url, model="m")
    orch = Orchestrator(catalog=demo_catalog, llm=llm, registry=registry,
                        config=OrchestratorConfig(synthesis_enabled=False))
    result = orch.run("weather in Paris")
    assert result.status == "succeeded"
    retry_messages = openai_server.requests[1].body["messages"]
    assert retry_messages[-2]["role"] == "assistant"
    assert "not valid JSON" in retry_messages[-1]["content"]


@pytest.mark.parametrize(
    ("fault", "category", "code", "sent"),
    [
        (Garbage(), ErrorCategory.INVALID_RESPONSE, "NON_JSON_RESPONSE", True),
        (Hang(2.0), ErrorCategory.TIMEOUT, "READ_TIMEOUT", True),
        (Drop(), ErrorCategory.CONNECTION_ERROR, "CONNECTION_DROPPED", True),
        (Status(500, "internal kaboom"), ErrorCategory.SERVICE_ERROR, "HTTP_500", True),
    ],
    ids=["garbage", "hang", "drop", "500"],
)
def test_tool_faults_are_typed_named_and_lose_nothing(
    fault: Any, category: ErrorCategory, code: str, sent: bool,
    demo_tools: DemoTools, demo_catalog: Catalog, registry: CollectorRegistry,
) -> None:
    demo_tools["weather"].inject("/geocode", fault)
    plan = {"steps": [*WEATHER_PLAN["steps"],
                      {"id": "q", "tool": "stocks", "capability": "quote",
                       "params": {"symbol": "NVDA"}}]}
    result = orch_with(demo_catalog, plan, registry, tool_timeout_s=0.3, **ONE_TRY).run("q")
    assert result.status == "partial"
    geo = result.steps["geo"]
    assert geo.status == "failed" and geo.error is not None
    assert (geo.error.category, geo.error.code, geo.error.request_sent) == (category, code, sent)
    assert (geo.error.step_id, geo.error.tool, geo.error.capability) == ("geo", "weather", "geocode")
    assert geo.error.describe().startswith("step 'geo' (weather.geocode): ")
    assert geo.attempts[0].error == geo.error.model_copy(
        update={"step_id": None, "tool": None, "capability": None})
    assert result.steps["fc"].status == "skipped"
    assert result.steps["q"].output == {"symbol": "NVDA", "price": 131.38, "currency": "USD"}
    assert "step 'geo' (weather.geocode)" in (result.error or "")


def test_connection_refused_is_not_sent(
    closed_port_url: str, registry: CollectorRegistry,
) -> None:
    catalog = Catalog()
    catalog.add_http(tool="gone", capability="ping", url=closed_port_url + "/ping")
    result = orch_with(catalog, {"steps": [{"id": "p", "tool": "gone", "capability": "ping"}]},
                       registry, **ONE_TRY).run("q")
    err = result.steps["p"].error
    assert err is not None and err.category == ErrorCategory.CONNECTION_ERROR
    assert err.request_sent is False and closed_port_url in err.message


def test_unknown_tool_in_plan_fails_the_run_with_the_reason(
    demo_catalog: Catalog, registry: CollectorRegistry,
) -> None:
    plan = {"steps": [{"id": "x", "tool": "nope", "capability": "x"}]}
    result = Orchestrator(catalog=demo_catalog, llm=ScriptedLLM([plan, plan, plan]),
                          registry=registry).run("q")
    assert result.status == "failed"
    assert "unknown tool 'nope'" in (result.error or "")
    assert "known tools: currency, stocks, weather" in (result.error or "")


def test_from_env_builds_everything_from_orch_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, demo_tools: DemoTools,
    openai_server: FakeOpenAIServer, registry: CollectorRegistry,
) -> None:
    catalog_file = tmp_path / "catalog.json"
    catalog_file.write_text(json.dumps(demo_tools.catalog_dict()))
    monkeypatch.setenv("ORCH_CATALOG", str(catalog_file))
    monkeypatch.setenv("ORCH_LLM_PROVIDER", "openai")
    monkeypatch.setenv("ORCH_LLM_BASE_URL", openai_server.base_url)
    monkeypatch.setenv("ORCH_LLM_MODEL", "env-model")
    monkeypatch.setenv("ORCH_LLM_API_KEY", "sk-from-env")
    monkeypatch.setenv("ORCH_SYNTHESIS_ENABLED", "false")
    monkeypatch.setenv("ORCH_MAX_CONCURRENCY", "2")
    openai_server.answer(json.dumps(WEATHER_PLAN))
    orch = Orchestrator.from_env(registry=registry)
    assert orch.config.max_concurrency == 2
    result = orch.run("weather in Paris")
    assert result.status == "succeeded" and result.answer is None
    req = openai_server.requests[0]
    assert req.body["model"] == "env-model"
    assert req.headers["authorization"] == "Bearer sk-from-env"


def test_catalog_discovery_from_capabilities_endpoint(demo_tools: DemoTools) -> None:
    catalog = Catalog.discover(*demo_tools.urls.values())
    quote = catalog.get("stocks", "quote")
    assert quote.url == demo_tools.urls["stocks"] + "/quote"
    assert quote.input_schema["properties"]["symbol"]["type"] == "string"
    assert {c.key for c in catalog} >= {"weather.geocode", "currency.convert", "stocks.quote"}


def test_example_catalog_file_loads() -> None:
    catalog = Catalog.from_file(ROOT / "config" / "catalog.example.yaml")
    assert catalog.get("currency", "convert").url == "http://127.0.0.1:8701/convert"


def test_example_catalog_matches_the_demo_tools(demo_tools: DemoTools) -> None:
    example = Catalog.from_file(ROOT / "config" / "catalog.example.yaml")
    live = Catalog.from_dict(demo_tools.catalog_dict())
    assert {c.key: (c.input_schema, c.method) for c in example} == {
        c.key: (c.input_schema, c.method) for c in live}


def test_sync_run_works_again_and_again_with_an_http_llm(
    openai_server: FakeOpenAIServer, demo_catalog: Catalog, registry: CollectorRegistry,
) -> None:
    # each run() has its own event loop; the LLM client's pool must follow it
    llm = OpenAICompatibleClient(base_url=openai_server.base_url, model="m")
    orch = Orchestrator(catalog=demo_catalog, llm=llm, registry=registry,
                        config=OrchestratorConfig(synthesis_enabled=False))
    for _ in range(3):
        openai_server.answer(json.dumps(WEATHER_PLAN))
        assert orch.run("weather in Paris").status == "succeeded"
    assert len(openai_server.requests) == 3


def test_a_configured_authorization_header_wins_over_url_userinfo() -> None:
    """A tool whose base_url carries user:password and whose headers set Authorization
    sends the header it was given, not Basic auth made from the URL."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    seen: list[str | None] = []

    class Echo(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            seen.append(self.headers.get("Authorization"))
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = b'{"success": true, "data": {"ok": true}}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        catalog = Catalog.from_dict({"tools": [{
            "name": "api", "base_url": f"http://olduser:oldpass@127.0.0.1:{port}",
            "headers": {"Authorization": "Bearer new-token-123"},
            "capabilities": [{"name": "go", "path": "/go", "input_schema": {"type": "object"}}],
        }]}, source="test")
        orch = Orchestrator(catalog=catalog, llm=ScriptedLLM(["unused"]),
                            config=OrchestratorConfig(store_url="memory://",
                                                      synthesis_enabled=False))
        result = orch.run("go", plan={"steps": [{"id": "g", "tool": "api", "capability": "go",
                                                 "params": {}}]})
        assert result.status == "succeeded"
        assert seen == ["Bearer new-token-123"]
    finally:
        server.shutdown()
        server.server_close()
