"""No secret in any sink: spans, logs (third-party loggers included), the debug store,
reprs and CLI output — for secrets in URLs, nested or encoded JSON, headers and
validation messages; and redaction in linear time, whatever the text."""

from __future__ import annotations

import io
import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry, generate_latest

from orchestration import Catalog, Orchestrator, OrchestratorConfig, ScriptedLLM
from orchestration.cli import main as cli_main
from orchestration.clock import ManualClock
from orchestration.logging_setup import configure_logging
from orchestration.redaction import MASK, Redactor
from tests.support.hostile_tools import Hang, HostileTool, Reply

URL_PASSWORD = "pw-in-the-url-7731"
TOOL_TOKEN = "tok-from-the-tool-88231"
ECHOED_PASSWORD = "echoed-password-5521"
QUERY_SECRET = "query-secret-66120"
HEADER_SECRET = "late-header-secret-40917"
LONG_PASSWORD = "far-too-long-password-99302"


@pytest.fixture
def sinks(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """Spans in memory, dagwright's and httpx's log records in a buffer, a debug store."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    root = logging.getLogger("dagwright")
    saved = (list(root.handlers), root.level, root.propagate)
    httpx_logger = logging.getLogger("httpx")
    httpx_saved = (list(httpx_logger.handlers), httpx_logger.level, list(httpx_logger.filters))
    stream = io.StringIO()
    handler = configure_logging(level="DEBUG", fmt="json", stream=stream)
    httpx_logger.addHandler(handler)  # a service that routes httpx into its logs
    httpx_logger.setLevel(logging.INFO)
    path = tmp_path / "debug.jsonl"
    yield {"provider": provider, "exporter": exporter, "stream": stream, "path": path,
           "registry": CollectorRegistry()}
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])
    root.propagate = saved[2]
    httpx_logger.handlers[:] = httpx_saved[0]
    httpx_logger.setLevel(httpx_saved[1])
    httpx_logger.filters[:] = httpx_saved[2]


def run_with(sinks: dict[str, Any], catalog: Catalog, llm: ScriptedLLM, plan: dict[str, Any],
             **config: Any) -> Any:
    config = {"llm_debug_enabled": True, "llm_debug_path": sinks["path"], **config}
    orch = Orchestrator(catalog, llm, OrchestratorConfig(**config),
                        tracer_provider=sinks["provider"], registry=sinks["registry"],
                        clock=ManualClock())
    return orch.run("q", plan=plan)


def sink_texts(sinks: dict[str, Any]) -> dict[str, str]:
    path: Path = sinks["path"]
    return {
        "traces": "\n".join(s.to_json() for s in sinks["exporter"].get_finished_spans()),
        "logs": sinks["stream"].getvalue(),
        "debug store": path.read_text() if path.exists() else "",
        "metrics": generate_latest(sinks["registry"]).decode(),
    }


def assert_nowhere(sinks: dict[str, Any], *secrets: str) -> None:
    for where, text in sink_texts(sinks).items():
        for secret in secrets:
            assert secret not in text, f"{secret!r} leaked into {where}"
            assert secret[:8] not in text, f"a prefix of {secret!r} leaked into {where}"


def echo_tool(catalog: Catalog, output: Any = None) -> None:
    catalog.add_function(lambda **kw: output if output is not None else {"ok": True},
                         tool="local", capability="echo")


# --- 7. URLs ----------------------------------------------------------------------------

def test_a_password_in_a_catalog_url_reaches_no_sink(
    sinks: dict[str, Any], hostile_tool: HostileTool,
) -> None:
    hostile_tool.always("/slow", Hang(5))
    catalog = Catalog()
    catalog.add_http(tool="t", capability="slow", method="GET",
                     url=hostile_tool.url("/slow", userinfo=f"svc:{URL_PASSWORD}"))
    echo_tool(catalog)
    plan = {"steps": [{"id": "a", "tool": "t", "capability": "slow"},
                      {"id": "b", "tool": "local", "capability": "echo"}]}
    result = run_with(sinks, catalog, ScriptedLLM(["done"]), plan, tool_timeout_s=0.2,
                      retry_max_attempts=1)
    assert result.status == "partial"
    assert "did not answer" in result.steps["a"].error.message
    assert_nowhere(sinks, URL_PASSWORD)
    assert "svc:" not in sink_texts(sinks)["traces"]


def test_query_parameters_in_the_http_clients_own_log_are_redacted(
    sinks: dict[str, Any], hostile_tool: HostileTool,
) -> None:
    catalog = Catalog()
    catalog.add_http(tool="t", capability="get", method="GET", url=hostile_tool.url("/get"))
    plan = {"steps": [{"id": "a", "tool": "t", "capability": "get",
                       "params": {"access_token": QUERY_SECRET, "sig": QUERY_SECRET + "s",
                                  "city": "Paris"}}]}
    result = run_with(sinks, catalog, ScriptedLLM([]), plan, synthesis_enabled=False)
    assert result.status == "succeeded"
    assert hostile_tool.requests_to("/get")[0].query["access_token"] == [QUERY_SECRET]
    logs = sink_texts(sinks)["logs"]
    assert "HTTP Request: GET" in logs and "city=Paris" in logs
    assert_nowhere(sinks, QUERY_SECRET)


# --- 7. JSON inside JSON ----------------------------------------------------------------

def test_a_token_in_a_tool_output_stays_out_of_the_debug_store_when_double_encoded(
    sinks: dict[str, Any],
) -> None:
    catalog = Catalog()
    echo_tool(catalog, {"token": TOOL_TOKEN, "nested": {"refresh_token": TOOL_TOKEN + "r"}})
    plan = {"steps": [{"id": "a", "tool": "local", "capability": "echo"}]}
    llm = ScriptedLLM(["ok"])
    result = run_with(sinks, catalog, llm, plan)
    assert result.status == "succeeded"
    assert TOOL_TOKEN in llm.requests_for("synthesis")[0].prompt_text  # it was in flight
    assert_nowhere(sinks, TOOL_TOKEN)


def test_a_password_echoed_in_a_400_body_stays_out_of_the_layer_3_record(
    sinks: dict[str, Any], hostile_tool: HostileTool,
) -> None:
    echo = json.dumps({"error": "bad request", "request": json.dumps({"password": ECHOED_PASSWORD})})
    hostile_tool.always("/login", Reply(400, raw=echo.encode()))
    catalog = Catalog()
    catalog.add_http(tool="t", capability="login", url=hostile_tool.url("/login"))
    plan = {"steps": [{"id": "a", "tool": "t", "capability": "login", "params": {"user": "u"}}]}
    answer = {"can_fix": False, "analysis": "no", "corrected_parameters": None}
    llm = ScriptedLLM(lambda request: answer if request.purpose == "validation_feedback" else
                      {"should_retry": False, "is_transient_error": False,
                       "corrected_parameters": {}, "analysis": "no"})
    run_with(sinks, catalog, llm, plan, synthesis_enabled=False)
    assert ECHOED_PASSWORD in llm.requests_for("validation_feedback")[0].prompt_text
    assert_nowhere(sinks, ECHOED_PASSWORD)


@pytest.mark.parametrize("text", [
    '{"note": "{\\"token\\": \\"' + TOOL_TOKEN + '\\"}"}',
    json.dumps(json.dumps(json.dumps({"password": TOOL_TOKEN}))),
    f"Set-Cookie: session={TOOL_TOKEN}; Path=/",
    f"X-Api-Key: {TOOL_TOKEN}",
    f"https://api.example.com/v1?key={TOOL_TOKEN}&q=1",
    f"https://{TOOL_TOKEN}@github.com/org/repo.git",
    f"postgres://admin:{TOOL_TOKEN}@db:5432/x",
])
def test_the_redactor_understands_urls_encoded_json_and_headers(text: str) -> None:
    redacted = Redactor().redact(text)
    assert TOOL_TOKEN not in redacted and MASK in redacted
    assert Redactor().redact(redacted) == redacted


def test_a_value_cut_by_a_clip_leaves_no_prefix_of_a_secret(
    sinks: dict[str, Any], hostile_tool: HostileTool,
) -> None:
    secret = "header-secret-" + "z" * 60
    hostile_tool.always("/x", Reply(500, raw=("e" * 170 + " " + secret).encode()))
    catalog = Catalog()
    catalog.add_http(tool="t", capability="x", url=hostile_tool.url("/x"), method="GET",
                     headers={"X-Api-Key": secret})
    plan = {"steps": [{"id": "a", "tool": "t", "capability": "x"}]}
    run_with(sinks, catalog, ScriptedLLM([]), plan, retry_max_attempts=1,
             synthesis_enabled=False)
    assert_nowhere(sinks, secret)


def test_a_password_that_fails_max_length_is_not_quoted_anywhere(sinks: dict[str, Any]) -> None:
    catalog = Catalog()
    catalog.add_function(lambda **kw: kw, tool="t", capability="login", input_schema={
        "type": "object", "properties": {"password": {"type": "string", "maxLength": 8},
                                         "user": {"type": "string"}}})
    plan = {"steps": [{"id": "a", "tool": "t", "capability": "login",
                       "params": {"user": "u", "password": LONG_PASSWORD}}]}
    llm = ScriptedLLM(lambda request: {"can_fix": False, "analysis": "no",
                                       "corrected_parameters": None}
                      if request.purpose == "validation_feedback" else
                      {"should_retry": False, "is_transient_error": False,
                       "corrected_parameters": {}, "analysis": "no"})
    result = run_with(sinks, catalog, llm, plan, synthesis_enabled=False)
    error = result.steps["a"].error
    assert error is not None and "$.password" in error.message and "too long" in error.message
    assert_nowhere(sinks, LONG_PASSWORD)


# --- 7. late capabilities, reprs, CLI ---------------------------------------------------

def test_a_capability_added_after_the_orchestrator_is_built_is_redacted(
    sinks: dict[str, Any], hostile_tool: HostileTool,
) -> None:
    catalog = Catalog()
    echo_tool(catalog)
    orch = Orchestrator(catalog, ScriptedLLM([]),
                        OrchestratorConfig(synthesis_enabled=False, retry_max_attempts=1),
                        tracer_provider=sinks["provider"], registry=sinks["registry"])
    catalog.add_http(tool="late", capability="x", url=hostile_tool.url("/late"),
                     headers={"X-Api-Key": HEADER_SECRET})
    hostile_tool.always("/late", Reply(500, raw=f"rejected key {HEADER_SECRET}".encode()))
    result = orch.run("q", plan={"steps": [{"id": "a", "tool": "late", "capability": "x"}]})
    # the tool echoed the catalog's own key: masked before the run keeps its answer
    assert HEADER_SECRET not in result.steps["a"].error.message
    assert "rejected key" in result.steps["a"].error.message
    assert_nowhere(sinks, HEADER_SECRET)


def test_secrets_in_run_and_step_ids_are_masked_in_spans_run_after_run(
    sinks: dict[str, Any],
) -> None:
    """Run ids (a caller's choice) and step ids (a planner's) are redacted on every span
    they reach, also when the same ids come back in a later run (they are redacted once
    per id, and again when the known secrets change)."""
    catalog = Catalog()
    echo_tool(catalog)
    token = "sk-idtoken0123456789"
    orch = Orchestrator(catalog, ScriptedLLM([]),
                        OrchestratorConfig(synthesis_enabled=False, llm_api_key="lit-key-4471x"),
                        tracer_provider=sinks["provider"], registry=sinks["registry"])
    plan = {"steps": [{"id": token.replace("-", "_").replace("sk_", "sk-", 1),
                       "tool": "local", "capability": "echo"},
                      {"id": "plain", "tool": "local", "capability": "echo"}]}
    for number in range(2):
        result = orch.run("q", plan=plan, run_id=f"run-{number}-lit-key-4471x")
        assert result.status == "succeeded"
    spans = sinks["exporter"].get_finished_spans()
    steps = [s for s in spans if s.name.startswith("execute_tool")]
    assert len(steps) == 4
    assert {s.attributes["dagwright.step.id"] for s in steps} == {"[REDACTED]", "plain"}
    traces = sink_texts(sinks)["traces"]
    assert "lit-key-4471x" not in traces and "sk-idtoken0123" not in traces
    assert traces.count("run-0-[REDACTED]") >= 3  # run span, step spans, their call ids


def test_a_capabilitys_repr_shows_no_header_value_or_url_credential() -> None:
    catalog = Catalog()
    cap = catalog.add_http(tool="t", capability="c", url=f"https://u:{URL_PASSWORD}@h/x",
                           headers={"Authorization": f"Bearer {HEADER_SECRET}",
                                    "Accept": "application/json"})
    for text in (repr(cap), str(cap)):
        assert URL_PASSWORD not in text and HEADER_SECRET not in text
        assert "application/json" in text and "https://" in text


def test_cli_output_masks_catalog_credentials(tmp_path: Path) -> None:
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps({"tools": [{
        "name": "t", "base_url": f"https://svc:{URL_PASSWORD}@tools.example",
        "capabilities": [{"name": "c", "path": f"/c?api_key={QUERY_SECRET}"}]}]}))
    out = io.StringIO()
    assert cli_main(["tools", "--catalog", str(path)], out=out) == 0
    text = out.getvalue()
    assert "t.c" in text and "tools.example" in text
    assert URL_PASSWORD not in text and QUERY_SECRET not in text


# --- 8. linear time ---------------------------------------------------------------------

HOSTILE_TEXTS = {
    "api key prose": "invalid api key: " + "a-" * 16_000,
    "dashes after a keyword": "token" + "-" * 32_000 + "!",
    "keyword soup": "api_key" * 4_600,
    "scheme-like run": "a" * 32_000 + "://",
    "url-like run": "http://" + "a:" * 16_000,
    "query-like run": "?" + "a&" * 16_000,
    "quotes": 'password"' * 3_500,
    "escaped quotes": '\\"token\\": \\"' + "\\\\" * 16_000,
    "truncation markers": ("ab… [truncated 3 chars]" * 1_400),
    "bearer run": "Bearer " + "a" * 32_000,
    "jwt-ish": "eyJ" + "a" * 16_000 + ".eyJ" + "b" * 16_000,
}


@pytest.mark.parametrize("name", list(HOSTILE_TEXTS))
def test_redaction_takes_linear_time_on_hostile_text(name: str) -> None:
    text = HOSTILE_TEXTS[name]
    redactor = Redactor(literals=["some-literal-secret"])
    started = time.perf_counter()
    redactor.redact(text)
    elapsed = time.perf_counter() - started
    assert elapsed < 0.15, f"{name}: {elapsed * 1000:.0f} ms for {len(text)} chars"


def test_a_hostile_error_message_does_not_stall_sibling_steps() -> None:
    from orchestration import ToolFailed

    def hostile() -> None:
        raise ToolFailed("BAD_KEY", "invalid api key: " + "a-" * 3500, retryable=False)

    catalog = Catalog()
    catalog.add_function(hostile, tool="t", capability="hostile")
    catalog.add_function(lambda: {"ok": True}, tool="t", capability="healthy")
    plan = {"steps": [{"id": "h", "tool": "t", "capability": "hostile"},
                      {"id": "ok", "tool": "t", "capability": "healthy"}]}
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    orch = Orchestrator(catalog, ScriptedLLM(lambda r: {
        "should_retry": False, "is_transient_error": False, "corrected_parameters": {},
        "analysis": "no"}), OrchestratorConfig(synthesis_enabled=False, step_timeout_s=2.0),
        tracer_provider=provider, registry=CollectorRegistry())
    started = time.perf_counter()
    result = orch.run("q", plan=plan)
    assert time.perf_counter() - started < 1.5
    assert result.steps["ok"].status == "succeeded"


def test_a_value_is_redacted_whatever_types_carry_its_strings_and_keys() -> None:
    # a service's documents are dicts and lists of str, but a value may come with str
    # subclasses (enums), tuples, list subclasses and read-only mappings: each is walked
    # (the fast path for the plain types must not skip the others)
    import enum
    from types import MappingProxyType

    class Key(enum.StrEnum):
        SECRET = "api_key"
        PLAIN = "name"

    class Items(list[Any]):
        pass

    redactor = Redactor(literals=["hunter22secret"])
    value = {Key.SECRET: "visible?", Key.PLAIN: Key.PLAIN, "nested": (
        Items(["hunter22secret in a list subclass", 3]),
        MappingProxyType({"password": ["a", {"x": "b"}], "n": 1.5, "ok": None}),
    ), "flag": True}
    assert redactor.redact_value(value) == {
        Key.SECRET: MASK, Key.PLAIN: "name", "nested": [
            [f"{MASK} in a list subclass", 3],
            {"password": [MASK, {"x": MASK}], "n": 1.5, "ok": None},
        ], "flag": True}
