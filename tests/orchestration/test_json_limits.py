"""Bounded JSON: nesting depth and response size, for LLM answers, tool bodies, params and
outputs alike (ORCH_MAX_JSON_DEPTH, ORCH_MAX_RESPONSE_BYTES).

Every case goes through the public API and asserts a typed result: a run that fails or a
step that fails with a named error — never an exception out of ``run()`` or ``to_dict()``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from orchestration import (
    Catalog,
    ErrorCategory,
    Orchestrator,
    OrchestratorConfig,
    ScriptedLLM,
    ToolFailed,
)
from orchestration.capability import Capability
from orchestration.errors import ConfigError, InvalidInput
from orchestration.sources import CallResult
from tests.support.hostile_tools import Drip, HostileTool, Huge, Reply

DEEP = "[" * 1000 + "]" * 1000


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def orch(catalog: Catalog, script: Any, **config: Any) -> Orchestrator:
    config.setdefault("synthesis_enabled", False)
    return Orchestrator(catalog=catalog, llm=ScriptedLLM(script),
                        config=OrchestratorConfig(**config), registry=CollectorRegistry())


def echo_catalog(**schema: Any) -> Catalog:
    catalog = Catalog()
    catalog.add_function(lambda **kw: kw, tool="t", capability="echo",
                         input_schema={"type": "object", **schema})
    return catalog


ECHO_PLAN = {"steps": [{"id": "a", "tool": "t", "capability": "echo", "params": {"x": 1}}]}


# --- 1. deep nesting --------------------------------------------------------------------

def test_a_deeply_nested_plan_answer_fails_the_run_with_a_typed_error() -> None:
    result = orch(echo_catalog(), [DEEP] * 3).run("q")
    assert result.status == "failed"
    assert "nested deeper than" in (result.error or "")
    json.dumps(result.to_dict())


def test_the_depth_limit_is_named_in_the_planner_feedback() -> None:
    llm = ScriptedLLM([DEEP, ECHO_PLAN])
    result = Orchestrator(catalog=echo_catalog(), llm=llm, registry=CollectorRegistry(),
                          config=OrchestratorConfig(synthesis_enabled=False)).run("q")
    assert result.status == "succeeded"
    assert "ORCH_MAX_JSON_DEPTH" in llm.requests[1].messages[-1]["content"]


def test_a_deeply_nested_layer_3_answer_is_an_unusable_answer_not_a_crash() -> None:
    catalog = echo_catalog(properties={"x": {"type": "integer"}}, required=["x"])
    plan = {"steps": [{"id": "a", "tool": "t", "capability": "echo", "params": {"x": "abc"}}]}
    result = orch(catalog, [plan, DEEP, DEEP], semantic_retry_enabled=False).run("q")
    step = result.steps["a"]
    assert step.status == "failed" and step.error is not None
    assert step.error.code == "INVALID_PARAMETERS"  # the validation error, with layer 3's verdict
    assert step.error.details["validation_feedback"]["verdict"] == "unusable_answers"
    assert "nested deeper than" in step.error.details["validation_feedback"]["reason"]


def test_a_deeply_nested_layer_4_answer_gives_up_with_a_reason() -> None:
    catalog = echo_catalog(properties={"x": {"type": "integer"}}, required=["x"])
    plan = {"steps": [{"id": "a", "tool": "t", "capability": "echo", "params": {"x": "abc"}}]}
    result = orch(catalog, [plan, DEEP], validation_feedback_enabled=False).run("q")
    step = result.steps["a"]
    assert step.status == "failed" and step.error is not None
    assert step.error.code == "INVALID_PARAMETERS"
    assert "malformed" in step.error.details["gave_up"]
    assert "nested deeper than" in step.error.details["gave_up"]


def test_a_deeply_nested_tool_body_is_a_malformed_response(hostile_tool: HostileTool) -> None:
    hostile_tool.queue("/deep", Reply(raw=DEEP.encode()))
    catalog = Catalog()
    catalog.add_http(tool="t", capability="deep", url=hostile_tool.url("/deep"))
    plan = {"steps": [{"id": "a", "tool": "t", "capability": "deep"}]}
    result = orch(catalog, [plan], retry_max_attempts=1).run("q")
    error = result.steps["a"].error
    assert error is not None
    assert (error.category, error.code) == (ErrorCategory.INVALID_RESPONSE, "MALFORMED_RESPONSE")
    assert "nested deeper than 64" in error.message
    assert len(result.steps["a"].attempts) == 1
    json.dumps(result.to_dict())


def test_plan_params_nested_too_deep_are_a_plan_issue() -> None:
    plan = {"steps": [{"id": "a", "tool": "t", "capability": "echo", "params": {"x": nested(300)}}]}
    result = orch(echo_catalog(), []).run("q", plan=plan)
    assert result.status == "failed"
    assert "step 'a'" in (result.error or "") and "nested deeper than" in (result.error or "")
    json.dumps(result.to_dict())


def test_a_python_tool_output_nested_too_deep_fails_the_step_and_to_dict_works() -> None:
    catalog = Catalog()
    catalog.add_function(lambda: nested(300), tool="t", capability="deep")
    plan = {"steps": [{"id": "a", "tool": "t", "capability": "deep"}]}
    result = orch(catalog, []).run("q", plan=plan)
    error = result.steps["a"].error
    assert error is not None and error.category is ErrorCategory.INVALID_RESPONSE
    assert "nested deeper than" in error.message
    json.dumps(result.to_dict())


def test_depth_within_the_limit_passes_everywhere() -> None:
    catalog = Catalog()
    catalog.add_function(lambda x: {"got": x}, tool="t", capability="echo")
    plan = {"steps": [{"id": "a", "tool": "t", "capability": "echo", "params": {"x": nested(60)}}]}
    result = orch(catalog, []).run("q", plan=plan)
    assert result.status == "succeeded", result.error
    assert result.to_dict()["steps"]["a"]["output"]["got"] == nested(60)


def test_the_depth_limit_is_configurable_and_checked() -> None:
    catalog = Catalog()
    catalog.add_function(lambda: nested(20), tool="t", capability="deep")
    plan = {"steps": [{"id": "a", "tool": "t", "capability": "deep"}]}
    result = orch(catalog, [], max_json_depth=10).run("q", plan=plan)
    assert result.steps["a"].error is not None
    assert "ORCH_MAX_JSON_DEPTH=10" in result.steps["a"].error.message
    with pytest.raises(ValueError, match="max_json_depth"):
        OrchestratorConfig(max_json_depth=500)
    assert issubclass(ConfigError, Exception)


# --- 11. response size ------------------------------------------------------------------

@pytest.mark.parametrize("announce", [True, False], ids=["content-length", "chunked"])
def test_a_reply_over_the_size_limit_is_refused_while_it_streams(
    hostile_tool: HostileTool, announce: bool,
) -> None:
    hostile_tool.queue("/huge", Huge(20_000_000, announce=announce))
    catalog = Catalog()
    catalog.add_http(tool="t", capability="huge", url=hostile_tool.url("/huge"), method="GET")
    plan = {"steps": [{"id": "a", "tool": "t", "capability": "huge"}]}
    started = time.perf_counter()
    result = orch(catalog, [plan], max_response_bytes=1_000_000, retry_max_attempts=1).run("q")
    error = result.steps["a"].error
    assert error is not None
    assert (error.category, error.code) == (ErrorCategory.INVALID_RESPONSE, "RESPONSE_TOO_LARGE")
    assert "ORCH_MAX_RESPONSE_BYTES=1000000" in error.message
    assert error.request_sent is True
    assert time.perf_counter() - started < 5


def test_a_python_tool_reply_over_the_size_limit_is_refused() -> None:
    catalog = Catalog()
    catalog.add_function(lambda: "x" * 20_000, tool="t", capability="big")
    plan = {"steps": [{"id": "a", "tool": "t", "capability": "big"}]}
    result = orch(catalog, [], max_response_bytes=10_000).run("q", plan=plan)
    error = result.steps["a"].error
    assert error is not None and error.code == "RESPONSE_TOO_LARGE"


def test_a_reply_within_the_limit_is_read_whole(hostile_tool: HostileTool) -> None:
    hostile_tool.queue("/ok", Drip(json.dumps({"v": "y" * 5000}).encode(), every_s=0, chunk=512))
    catalog = Catalog()
    catalog.add_http(tool="t", capability="ok", url=hostile_tool.url("/ok"), method="GET")
    plan = {"steps": [{"id": "a", "tool": "t", "capability": "ok"}]}
    result = orch(catalog, [plan], max_response_bytes=10_000).run("q")
    assert result.status == "succeeded", result.error
    assert result.steps["a"].output == {"v": "y" * 5000}


@pytest.mark.parametrize(("output", "code"), [
    ({"v": float("nan")}, "NOT_JSON_SERIALISABLE"),
    ({"v": "\ud800"}, "NOT_JSON_SERIALISABLE"),
    ({"v": {1, 2}}, "NOT_JSON_SERIALISABLE"),
    ({"v": "x" * 20_000}, "RESPONSE_TOO_LARGE"),
    ({"v": "\x00" * 2_000}, "RESPONSE_TOO_LARGE"),  # 2,000 chars, 12,000 bytes escaped
    ({"v": 10 ** 30000}, "NOT_JSON_SERIALISABLE"),  # past Python's int-to-text limit
])
def test_a_small_flat_python_tool_output_meets_the_same_rules(output: Any, code: str) -> None:
    """Small flat objects skip the encoder pass when their types prove them encodable; the
    ones that do not (a non-finite number, a lone surrogate, a set, too large once
    escaped, a huge int) are still refused."""
    catalog = Catalog()
    catalog.add_function(lambda: output, tool="t", capability="flat")
    plan = {"steps": [{"id": "a", "tool": "t", "capability": "flat"}]}
    result = orch(catalog, [], max_response_bytes=10_000).run("q", plan=plan)
    error = result.steps["a"].error
    assert error is not None and error.code == code, error


def test_a_small_flat_output_within_the_limit_passes_as_is() -> None:
    output = {"s": "café"[:3], "i": 2**62, "f": 0.5, "b": True, "n": None, "u": "ünï"}
    catalog = Catalog()
    catalog.add_function(lambda: output, tool="t", capability="flat")
    plan = {"steps": [{"id": "a", "tool": "t", "capability": "flat"}]}
    result = orch(catalog, [], max_response_bytes=10_000).run("q", plan=plan)
    assert result.status == "succeeded", result.error
    assert result.steps["a"].output == output


# --- text that is not valid Unicode, recorded in a real run store --------------------------

LONE = "\ud800"  # what the JSON escape \ud800 decodes to without its pair


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_lone_surrogates_are_typed_errors_naming_where_they_were(
    store: str, tmp_path: Path, request: pytest.FixtureRequest,
) -> None:
    """Before: a plan parameter holding a lone surrogate raised PydanticSerializationError
    out of run(), from the run recorder. Now each door names the place: the query
    (InvalidInput), a given plan and a planner's answer (a failed run saying where), and
    the store holds a readable record of what ran."""
    url = (f"sqlite:///{tmp_path}/runs.db" if store == "sqlite" else
           str(request.getfixturevalue("postgres_server").create_database(
               f"surrogate_{tmp_path.name[-8:].lower()}")))
    bad_plan = {"steps": [{"id": "a", "tool": "t", "capability": "echo",
                           "params": {"v": "ok " + LONE}}]}
    planner_answer = json.dumps(bad_plan)  # ASCII: the model's text holds the escape itself
    assert "\\ud800" in planner_answer
    runner = orch(echo_catalog(), [planner_answer] * 3, store_url=url)
    with pytest.raises(InvalidInput, match=r"the query is not valid Unicode: character 4"):
        runner.run("pay " + LONE)
    given = runner.run("echo", plan=bad_plan)
    assert given.status == "failed"
    assert "step 'a': param $.v" in (given.error or "") and "lone surrogate" in (given.error or "")
    planned = runner.run("echo")
    assert planned.status == "failed" and "lone surrogate" in (planned.error or "")
    for result in (given, planned):
        json.dumps(result.to_dict(), ensure_ascii=False).encode("utf-8")
        stored = runner.get_run(result.run_id)
        assert stored is not None and stored.status == "failed"


def _raises_on_an_undecodable_name(path: str = "report") -> Any:
    # a file name that is not UTF-8, as Python decodes it (surrogateescape): '\udcff'
    raise FileNotFoundError(f"no such file: {os.fsdecode(b'/data/' + bytes([0xFF]) + b'.csv')}")


def _fails_naming_it(path: str = "report") -> Any:
    raise ToolFailed("NO_FILE", f"no such file: {os.fsdecode(bytes([0xFF]))}",
                     details={"path": os.fsdecode(bytes([0xFE]))})


@pytest.mark.parametrize("tool", [_raises_on_an_undecodable_name, _fails_naming_it],
                         ids=["raised", "tool_failed"])
def test_a_tool_error_holding_a_lone_surrogate_is_recorded_escaped(tmp_path: Path, tool: Any) -> None:
    """Before: the step's error could not be written to the run store, and
    PydanticSerializationError escaped run(). The text is kept, the character escaped."""
    catalog = Catalog()
    catalog.add_function(tool, tool="files", capability="read")
    runner = orch(catalog, [], store_url=f"sqlite:///{tmp_path}/runs.db")
    result = runner.run("read", plan={"steps": [
        {"id": "read", "tool": "files", "capability": "read", "params": {}}]})
    error = result.steps["read"].error
    assert result.status == "failed" and error is not None
    assert "no such file" in error.message and "\\udcff" in error.message
    json.dumps(result.to_dict(), ensure_ascii=False).encode("utf-8")
    stored = runner.get_run(result.run_id)
    assert stored is not None and stored.steps["read"].error is not None
    assert stored.steps["read"].error.message == error.message


# --- the same rules for a source's tools (OpenAPI, MCP) -----------------------------------

def _openapi_catalog(tmp_path: Path, url: str) -> Catalog:
    spec = {"openapi": "3.0.3", "info": {"title": "t", "version": "1"},
            "paths": {"/body": {"get": {"operationId": "body", "responses": {"200": {
                "description": "ok", "content": {"application/json": {"schema": {}}}}}}}}}
    document = tmp_path / "api.json"
    document.write_text(json.dumps(spec))
    return Catalog.from_openapi(document, base_url=url, name="api")


@pytest.mark.parametrize(("body", "problem"), [
    (DEEP.encode(), "nested deeper than 200 levels, the most ORCH_MAX_JSON_DEPTH allows"),
    (json.dumps(nested(100)).encode(), "nested deeper than 64"),
    (b'{"v": NaN}', "NaN is not a JSON number"),
    (b'{"v": "\\ud800"}', "lone surrogate"),
], ids=["recursion", "deeper-than-the-limit", "nan", "lone-surrogate"])
def test_an_openapi_tool_body_meets_the_rules_of_an_http_tools(
    hostile_tool: HostileTool, tmp_path: Path, body: bytes, problem: str,
) -> None:
    """Before: an OpenAPI operation's answer was read with json.loads, so a body nested
    past Python's recursion limit surfaced as INVOKER_RAISED, and a NaN, a lone surrogate
    or 100 levels (past ORCH_MAX_JSON_DEPTH) became the step's output, a record the store
    cannot write as JSON or one deeper than the setting allows."""
    hostile_tool.queue("/body", Reply(raw=body))
    catalog = _openapi_catalog(tmp_path, hostile_tool.url(""))
    plan = {"steps": [{"id": "a", "tool": "api", "capability": "body"}]}
    result = orch(catalog, [], retry_max_attempts=1).run("q", plan=plan)
    error = result.steps["a"].error
    assert error is not None, result.steps["a"].output
    assert error.category is ErrorCategory.INVALID_RESPONSE, error
    assert problem in error.message
    json.dumps(result.to_dict(), ensure_ascii=False, allow_nan=False).encode("utf-8")
    catalog.close()


def test_an_openapi_tool_body_over_the_size_limit_is_refused(
    hostile_tool: HostileTool, tmp_path: Path,
) -> None:
    hostile_tool.queue("/body", Huge(2_000_000, announce=False))
    catalog = _openapi_catalog(tmp_path, hostile_tool.url(""))
    plan = {"steps": [{"id": "a", "tool": "api", "capability": "body"}]}
    result = orch(catalog, [], max_response_bytes=1_000_000, retry_max_attempts=1).run(
        "q", plan=plan)
    error = result.steps["a"].error
    assert error is not None
    assert (error.category, error.code) == (ErrorCategory.INVALID_RESPONSE, "RESPONSE_TOO_LARGE")
    catalog.close()


class _Answers:
    """An invoker (the interface MCP and OpenAPI sources implement) answering ``data``."""

    def __init__(self, data: Any) -> None:
        self.data = data

    async def call(self, params: dict[str, Any], *, timeout_s: float,
                   headers: Any) -> CallResult:
        return CallResult(data=self.data)


@pytest.mark.parametrize(("data", "code"), [
    ({"v": float("nan")}, "NOT_JSON_SERIALISABLE"),
    ({"v": nested(100)}, "NOT_JSON_SERIALISABLE"),
    ({"v": "x" * 20_000}, "RESPONSE_TOO_LARGE"),
], ids=["nan", "too-deep", "too-large"])
def test_a_source_invokers_answer_meets_the_rules_of_a_python_tools(data: Any, code: str) -> None:
    """Before: what a source's invoker answered (an MCP result decoded with json.loads)
    became the step's output unchecked."""
    catalog = Catalog()
    catalog.add(Capability(tool="src", name="read", invoker=_Answers(data), source="mcp:src"))
    plan = {"steps": [{"id": "a", "tool": "src", "capability": "read"}]}
    result = orch(catalog, [], max_response_bytes=10_000, retry_max_attempts=1).run("q", plan=plan)
    error = result.steps["a"].error
    assert error is not None and error.code == code, error
    assert error.category is ErrorCategory.INVALID_RESPONSE
    json.dumps(result.to_dict(), allow_nan=False)
