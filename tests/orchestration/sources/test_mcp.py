"""MCP servers as tools, end to end with a real server built on the official SDK.

The server (tests/mcp_servers/calc_server.py) runs as a stdio subprocess or over
streamable HTTP on 127.0.0.1; plans come from a ScriptedLLM and go through every layer.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from orchestration import Approval, Catalog, CatalogError, ErrorCategory
from orchestration.llm.base import LLMRequest
from tests.support.sources import STDIO_COMMAND, block, mcp_http_server, orchestrator

pytest.importorskip("mcp", reason="the 'mcp' extra is not installed")


@pytest.fixture(scope="module")
def calc() -> Iterator[Catalog]:
    """One stdio server for the module's read-mostly tests."""
    catalog = Catalog()
    catalog.add_mcp_server("calc", command=STDIO_COMMAND)
    yield catalog
    catalog.close()


def one_step(capability: str, params: dict[str, Any], sid: str = "s1") -> dict[str, Any]:
    return {"steps": [{"id": sid, "tool": "calc", "capability": capability, "params": params}]}


def history(catalog: Catalog) -> list[dict[str, Any]]:
    """What the server received, asked through the server's own ``history`` tool."""
    result = orchestrator(catalog, [one_step("history", {})]).run("history")
    assert result.status == "succeeded", result.error
    return list(result.steps["s1"].output["result"])


def test_tools_become_capabilities_with_schemas_and_flags(calc: Catalog) -> None:
    names = {cap.name for cap in calc if cap.tool == "calc"}
    assert {"add", "schedule", "note", "refuse", "nap", "history", "crash"} <= names
    add = calc.get("calc", "add")
    assert add.source == "mcp:calc" and add.description == "Add two integers."
    assert add.input_schema["properties"]["a"]["type"] == "integer"
    assert add.input_schema["required"] == ["a", "b"]
    assert add.output_schema is not None and "total" in add.output_schema["properties"]
    # annotations: readOnly/idempotent hints → idempotent; an explicit destructiveHint →
    # requires_approval (an unannotated tool does not pause runs)
    assert (add.idempotent, add.requires_approval) == (True, False)
    schedule = calc.get("calc", "schedule")
    assert (schedule.idempotent, schedule.requires_approval) == (True, False)
    note = calc.get("calc", "note")
    assert (note.idempotent, note.requires_approval) == (False, False)
    assert calc.get("calc", "crash").requires_approval is True
    assert calc.tools["calc"] == "Arithmetic and scheduling for the tests."
    assert "invoker" not in add.model_dump() and "invoker" not in repr(add)


def test_stringified_numbers_are_fixed_by_layer_2_before_the_server_sees_them(calc: Catalog) -> None:
    orch = orchestrator(calc, [one_step("add", {"a": "2", "b": "40"})])
    result = orch.run("add 2 and 40")
    assert result.status == "succeeded", result.error
    step = result.steps["s1"]
    assert step.output == {"total": 42}
    (attempt,) = step.attempts
    assert {(c.path, c.old, c.new) for c in attempt.coercions} == {("$.a", "2", 2), ("$.b", "40", 40)}
    # the server's arguments are StrictInt: it received integers, not the LLM's strings
    assert history(calc)[-1] == {"tool": "add", "a": 2, "b": 40}


def fix_business_hours(request: LLMRequest) -> dict[str, Any]:
    """Layer 3 as a model would answer from the prompt: the tool's error names the range."""
    params = dict(block(request.prompt_text, "failed parameters"))
    error = block(request.prompt_text, "tool error")
    match = re.search(r"between (\d+) and (\d+)", str(error))
    if not match:
        return {"can_fix": False, "analysis": "no range given", "corrected_parameters": {}}
    low, high = int(match.group(1)), int(match.group(2))
    params["hour"] = min(max(int(params["hour"]), low), high)
    return {"can_fix": True, "analysis": f"hour must lie in {low}..{high}",
            "corrected_parameters": params}


def test_server_validation_failure_is_corrected_by_layer_3_from_the_mapped_error(calc: Catalog) -> None:
    def script(request: LLMRequest) -> Any:
        if request.purpose == "plan":
            return one_step("schedule", {"day": "monday", "hour": 20})
        if request.purpose == "validation_feedback":
            return fix_business_hours(request)
        raise AssertionError(request.purpose)

    orch = orchestrator(calc, script)
    result = orch.run("book monday at 8pm")
    assert result.status == "succeeded", result.error
    first, second = result.steps["s1"].attempts
    assert first.error is not None
    assert (first.error.category, first.error.code, first.error.retryable) == (
        ErrorCategory.INPUT_ERROR, "MCP_INVALID_ARGUMENTS", True)
    assert "business hours" in first.error.message
    assert (second.layer, second.outcome, second.params["hour"]) == ("validation_feedback", "succeeded", 17)
    assert result.steps["s1"].output == {"booked": "monday 17:00"}
    prompt = orch.llm.requests_for("validation_feedback")[0].prompt_text  # type: ignore[attr-defined]
    assert "calc.schedule" in prompt and "between 9 and 17" in prompt


def test_the_same_failure_stays_an_input_error_with_layers_3_and_4_off(calc: Catalog) -> None:
    result = orchestrator(calc, [one_step("schedule", {"day": "monday", "hour": 20})],
                          validation_feedback_enabled=False, semantic_retry_enabled=False
                          ).run("book")
    assert result.status == "failed"
    error = result.steps["s1"].error
    assert error is not None and error.code == "MCP_INVALID_ARGUMENTS"
    assert len(result.steps["s1"].attempts) == 1  # an input error is never re-sent as is


def test_results_and_tool_errors_are_mapped(calc: Catalog) -> None:
    plan = {"steps": [
        {"id": "note", "tool": "calc", "capability": "note", "params": {"text": "hi"}},
        {"id": "refuse", "tool": "calc", "capability": "refuse", "params": {"reason": "closed today"}},
        {"id": "nap", "tool": "calc", "capability": "nap", "params": {"seconds": 3}},
    ]}
    started = time.perf_counter()
    result = orchestrator(calc, [plan], tool_timeout_s=0.5, retry_max_attempts=1,
                          validation_feedback_enabled=False, semantic_retry_enabled=False
                          ).run("several")
    steps = result.steps
    # text content that is JSON comes back decoded
    assert steps["note"].output == {"stored": "hi", "length": 2}
    refuse = steps["refuse"].error
    assert refuse is not None and refuse.category == ErrorCategory.INPUT_ERROR
    assert refuse.code == "MCP_TOOL_ERROR" and "closed today" in refuse.message
    assert refuse.retryable  # MCP's channel for feedback: layer 3 is asked (switched off here)
    nap = steps["nap"].error
    assert nap is not None and nap.category == ErrorCategory.TIMEOUT
    assert time.perf_counter() - started < 3  # the timeout did not wait for the tool


def test_a_crash_is_a_service_error_and_the_next_call_reopens_the_session() -> None:
    catalog = Catalog()
    catalog.add_mcp_server("calc", command=STDIO_COMMAND)
    try:
        orch = orchestrator(catalog, [one_step("crash", {})])
        paused = orch.run("crash it")  # destructiveHint: a person approves the call first
        assert paused.status == "awaiting_approval"
        assert [(p.step_id, p.capability) for p in paused.pending_approvals] == [("s1", "crash")]
        result = orch.resume(paused.run_id, approvals={"s1": Approval(approved=True)})
        error = result.steps["s1"].error
        assert error is not None and error.category == ErrorCategory.SERVICE_ERROR
        assert error.code == "MCP_CONNECTION_CLOSED" and error.request_sent
        # crash is not idempotent: a call that may have acted is not re-sent
        assert len(result.steps["s1"].attempts) == 1
        again = orchestrator(catalog, [one_step("add", {"a": 1, "b": 1})]).run("add")
        assert again.status == "succeeded" and again.steps["s1"].output == {"total": 2}
    finally:
        catalog.close()


def test_sync_runs_reuse_one_session_and_close_is_bounded() -> None:
    catalog = Catalog()
    catalog.add_mcp_server("calc", command=STDIO_COMMAND)
    try:
        for n in range(3):  # three asyncio.run loops, one server process
            result = orchestrator(catalog, [one_step("add", {"a": n, "b": 1})]).run("add")
            assert result.status == "succeeded"
        assert [h["a"] for h in history(catalog)] == [0, 1, 2]
        started = time.perf_counter()
        catalog.close()
        assert time.perf_counter() - started < 5
        # a closed catalog still works: the session reopens (a new server, empty history)
        assert history(catalog) == []
    finally:
        catalog.close()


async def test_orchestrator_aclose_closes_the_sessions() -> None:
    catalog = Catalog()
    catalog.add_mcp_server("calc", command=STDIO_COMMAND)
    async with orchestrator(catalog, [one_step("add", {"a": 1, "b": 2})]) as orch:
        result = await orch.arun("add")
        assert result.steps["s1"].output == {"total": 3}
        runtime = catalog._runtime
        assert runtime is not None and runtime.running
    assert not runtime.running  # __aexit__ closed the catalog's sources and their loop


def test_refresh_picks_up_new_tools_and_a_run_keeps_its_snapshot() -> None:
    catalog = Catalog()
    catalog.add_mcp_server("calc", command=STDIO_COMMAND, refresh_s=0.2)
    try:
        assert not catalog.has("calc", "extra")
        before = catalog.snapshot()
        assert orchestrator(catalog, [one_step("toggle_extra", {"present": True})]).run("on").status \
            == "succeeded"
        _wait_until(lambda: catalog.has("calc", "extra"))
        assert not before.has("calc", "extra")  # a snapshot never changes
        assert catalog.get("calc", "extra").input_schema["properties"]["x"]["type"] == "integer"

        # one run: step 1 removes the tool and waits past a refresh; step 2 still finds
        # the capability in the run's snapshot, and the server answers "unknown tool"
        plan = {"steps": [
            {"id": "off", "tool": "calc", "capability": "toggle_extra", "params": {"present": False}},
            {"id": "wait", "tool": "calc", "capability": "nap", "params": {"seconds": 0.8},
             "depends_on": ["off"]},
            {"id": "use", "tool": "calc", "capability": "extra", "params": {"x": 4},
             "depends_on": ["wait"]},
        ]}
        result = orchestrator(catalog, [plan], semantic_retry_enabled=False).run("off then use")
        assert result.steps["off"].status == "succeeded"
        assert not catalog.has("calc", "extra")  # the live catalog was refreshed mid-run
        error = result.steps["use"].error
        assert error is not None and error.category == ErrorCategory.NOT_FOUND
        assert error.code == "MCP_UNKNOWN_TOOL"
    finally:
        catalog.close()


def _wait_until(condition: Any, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.05)


def test_streamable_http_server_runs_a_plan_with_layer_2() -> None:
    with mcp_http_server() as url:
        catalog = Catalog()
        catalog.add_mcp_server("calc", url=url)
        try:
            assert catalog.get("calc", "add").source == "mcp:calc"
            result = orchestrator(catalog, [one_step("add", {"a": "5", "b": "6"})]).run("add")
            assert result.status == "succeeded", result.error
            assert result.steps["s1"].output == {"total": 11}
            assert history(catalog)[-1] == {"tool": "add", "a": 5, "b": 6}
        finally:
            catalog.close()


def test_http_headers_reach_the_server_and_a_refusal_names_the_status() -> None:
    with mcp_http_server(token="s3cret") as url:
        with pytest.raises(CatalogError, match=r"MCP server 'calc'.*HTTP 401"):
            Catalog().add_mcp_server("calc", url=url)
        catalog = Catalog()
        catalog.add_mcp_server("calc", url=url, headers={"Authorization": "Bearer s3cret"})
        try:
            assert catalog.has("calc", "add")
        finally:
            catalog.close()


def test_bad_server_definitions_are_clear_errors() -> None:
    with pytest.raises(CatalogError, match="exactly one of command"):
        Catalog().add_mcp_server("calc")
    with pytest.raises(CatalogError, match="list of strings"):
        Catalog().add_mcp_server("calc", command="python server.py")  # type: ignore[arg-type]
    with pytest.raises(CatalogError, match=r"MCP server 'ghost' \(command /nonexistent/mcp-server\)"):
        Catalog().add_mcp_server("ghost", command=["/nonexistent/mcp-server"], connect_timeout_s=5)
    with pytest.raises(CatalogError, match="has no tool"):
        Catalog().add_mcp_server("calc", command=STDIO_COMMAND, tools=["add", "divide"])


def test_tools_filter_and_overrides() -> None:
    catalog = Catalog()
    catalog.add_mcp_server("calc", command=STDIO_COMMAND, tools=["add", "note"],
                           overrides={"note": {"idempotent": True, "requires_approval": False,
                                               "layers": {"max_validation_retries": 1}}})
    try:
        assert sorted(c.name for c in catalog) == ["add", "note"]
        note = catalog.get("calc", "note")
        assert (note.idempotent, note.requires_approval) == (True, False)
        assert note.layers == {"max_validation_retries": 1}
    finally:
        catalog.close()


def test_calls_from_many_loops_at_once_share_the_session(calc: Catalog) -> None:
    async def many() -> list[Any]:
        cap = calc.get("calc", "add")
        assert cap.invoker is not None
        return await asyncio.gather(*(cap.invoker.call({"a": i, "b": i}, timeout_s=10, headers={})
                                      for i in range(20)))

    results = asyncio.run(many())
    assert [r.data for r in results] == [{"total": 2 * i} for i in range(20)]


def test_a_text_result_nested_past_the_decoders_recursion_limit_is_kept_as_text() -> None:
    """Before: json.loads raised RecursionError out of result_data, and the call came back
    as INVOKER_RAISED (an engine fault) rather than the tool's answer."""
    import mcp.types as mcp_types

    from orchestration.sources.mcp import result_data

    text = "[" * 100_000 + "]" * 100_000
    result = mcp_types.CallToolResult(content=[mcp_types.TextContent(type="text", text=text)])
    assert result_data(result) == text
    two = mcp_types.CallToolResult(content=[mcp_types.TextContent(type="text", text=text),
                                            mcp_types.TextContent(type="text", text="[1]")])
    assert result_data(two) == [text, [1]]
