"""The engine end to end with in-process tools: scheduling, failures, planning, results."""

from __future__ import annotations

import asyncio
import json
import time
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
from orchestration.llm.base import LLMRequest

NO_SYNTH = {"synthesis_enabled": False}


def make_orch(catalog: Catalog, script: Any, **config: Any) -> Orchestrator:
    return Orchestrator(
        catalog=catalog, llm=ScriptedLLM(script),
        config=OrchestratorConfig(**{**NO_SYNTH, **config}), registry=CollectorRegistry(),
    )


def sleeper_catalog(log: list[tuple[str, str, float]]) -> Catalog:
    cat = Catalog()
    t0 = time.perf_counter()

    async def sleep(name: str, seconds: float, fail: bool = False) -> dict[str, Any]:
        log.append(("start", name, time.perf_counter() - t0))
        await asyncio.sleep(seconds)
        log.append(("end", name, time.perf_counter() - t0))
        if fail:
            raise ToolFailed("BOOM", f"{name} failed on purpose", "SERVICE_ERROR", retryable=False)
        return {"name": name, "slept": seconds}

    cat.add_function(sleep, tool="clock", capability="sleep", input_schema={
        "type": "object", "required": ["name", "seconds"],
        "properties": {"name": {"type": "string"}, "seconds": {"type": "number"},
                       "fail": {"type": "boolean"}}})
    return cat


def step(sid: str, seconds: float, *deps: str, fail: bool = False) -> dict[str, Any]:
    return {"id": sid, "tool": "clock", "capability": "sleep", "depends_on": list(deps),
            "params": {"name": sid, "seconds": seconds, "fail": fail}}


def starts(log: list[tuple[str, str, float]]) -> dict[str, float]:
    return {name: t for kind, name, t in log if kind == "start"}


def test_step_starts_as_soon_as_its_own_dependencies_finish() -> None:
    log: list[tuple[str, str, float]] = []
    plan = {"steps": [step("fast", 0.05), step("slow", 0.40),
                      step("after_fast", 0.05, "fast"), step("after_slow", 0.05, "slow")]}
    result = make_orch(sleeper_catalog(log), [plan]).run("go")
    assert result.status == "succeeded", result.error
    s = starts(log)
    # level-by-level scheduling would start after_fast only when slow ends (~0.40 s)
    assert s["after_fast"] < 0.25, s
    assert s["after_slow"] >= 0.40, s


def test_failure_skips_downstream_and_independent_branch_finishes() -> None:
    log: list[tuple[str, str, float]] = []
    plan = {"steps": [step("bad", 0.01, fail=True), step("child", 0.01, "bad"),
                      step("grandchild", 0.01, "child"), step("other", 0.05),
                      step("other_child", 0.01, "other")]}
    result = make_orch(sleeper_catalog(log), [plan]).run("go")
    assert result.status == "partial"
    steps = result.steps
    assert steps["bad"].status == "failed"
    err = steps["bad"].error
    assert err is not None and err.category == ErrorCategory.SERVICE_ERROR
    assert err.code == "BOOM" and err.step_id == "bad" and err.tool == "clock"
    assert steps["child"].status == "skipped"
    assert steps["child"].skipped_reason == "upstream step 'bad' failed"
    assert steps["grandchild"].status == "skipped"
    assert steps["other"].status == "succeeded" and steps["other_child"].status == "succeeded"
    assert steps["other_child"].output == {"name": "other_child", "slept": 0.01}
    assert "child" not in starts(log)
    assert len(steps["bad"].attempts) == 1
    assert steps["bad"].attempts[0].outcome == "failed"


def test_concurrency_is_bounded() -> None:
    running = 0
    peak = 0
    cat = Catalog()

    async def work(i: int) -> int:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.02)
        running -= 1
        return i

    cat.add_function(work, tool="w", capability="work",
                     input_schema={"type": "object", "properties": {"i": {"type": "integer"}}})
    plan = {"steps": [{"id": f"s{i}", "tool": "w", "capability": "work", "params": {"i": i}}
                      for i in range(12)]}
    result = make_orch(cat, [plan], max_concurrency=3).run("go")
    assert result.status == "succeeded"
    assert peak == 3


def test_step_timeout_keeps_other_results() -> None:
    log: list[tuple[str, str, float]] = []
    plan = {"steps": [step("hang", 5.0), step("ok", 0.01)]}
    result = make_orch(sleeper_catalog(log), [plan], step_timeout_s=0.2,
                       tool_timeout_s=0.1).run("go")
    assert result.status == "partial"
    hang = result.steps["hang"]
    assert hang.status == "failed" and hang.error is not None
    assert hang.error.category == ErrorCategory.TIMEOUT
    assert hang.attempts[0].error is not None and hang.attempts[0].error.code == "TOOL_TIMEOUT"
    assert result.steps["ok"].output == {"name": "ok", "slept": 0.01}


def test_run_deadline_fails_running_and_skips_unstarted() -> None:
    log: list[tuple[str, str, float]] = []
    plan = {"steps": [step("long", 5.0), step("later", 0.01, "long")]}
    t0 = time.perf_counter()
    result = make_orch(sleeper_catalog(log), [plan], run_timeout_s=0.3,
                       tool_timeout_s=10).run("go")
    assert time.perf_counter() - t0 < 2
    assert result.status == "failed"
    assert result.steps["long"].error is not None
    assert result.steps["long"].error.code == "RUN_DEADLINE_EXCEEDED"
    assert result.steps["later"].status == "skipped"


def test_references_keep_types_and_interpolate() -> None:
    seen: list[dict[str, Any]] = []
    cat = Catalog()
    cat.add_function(lambda: {"price": 468.285, "tags": ["a", "b"], "sym": "TSLA"},
                     tool="s", capability="quote")

    def record(**kw: Any) -> dict[str, Any]:
        seen.append(kw)
        return kw

    cat.add_function(record, tool="s", capability="record")
    plan = {"steps": [
        {"id": "q", "tool": "s", "capability": "quote"},
        {"id": "r", "tool": "s", "capability": "record", "params": {
            "price": "{{q.price}}", "tag": "{{q.tags[1]}}", "all": "{{ q.tags }}",
            "text": "{{q.sym}} costs {{q.price}}"}},
    ]}
    result = make_orch(cat, [plan]).run("go")
    assert result.status == "succeeded"
    assert seen == [{"price": 468.285, "tag": "b", "all": ["a", "b"], "text": "TSLA costs 468.285"}]


def test_missing_reference_field_is_a_binding_error_naming_the_fields() -> None:
    cat = Catalog()
    cat.add_function(lambda: {"price": 1.0}, tool="s", capability="quote")
    cat.add_function(lambda **kw: kw, tool="s", capability="record")
    plan = {"steps": [
        {"id": "q", "tool": "s", "capability": "quote"},
        {"id": "r", "tool": "s", "capability": "record", "params": {"amount": "{{q.total}}"}},
    ]}
    result = make_orch(cat, [plan], semantic_retry_enabled=False).run("go")
    r = result.steps["r"]
    assert r.status == "failed" and r.error is not None
    assert r.error.category == ErrorCategory.BINDING_ERROR
    assert "q has no field 'total'" in r.error.message and "fields: price" in r.error.message
    assert r.attempts[0].outcome == "unbound"


def test_python_tool_crash_and_garbage_are_classified() -> None:
    cat = Catalog()

    def crash() -> None:
        raise ZeroDivisionError("oops")

    cat.add_function(crash, tool="p", capability="crash")
    cat.add_function(lambda: object(), tool="p", capability="garbage")
    plan = {"steps": [{"id": "a", "tool": "p", "capability": "crash"},
                      {"id": "b", "tool": "p", "capability": "garbage"}]}
    result = make_orch(cat, [plan]).run("go")
    assert result.status == "failed"
    a, b = result.steps["a"].error, result.steps["b"].error
    assert a is not None and a.category == ErrorCategory.INTERNAL_ERROR
    assert "ZeroDivisionError: oops" in a.message
    assert b is not None and b.category == ErrorCategory.INVALID_RESPONSE


def test_planner_feeds_back_errors_then_succeeds() -> None:
    cat = Catalog()
    cat.add_function(lambda x: x * 2, tool="m", capability="double",
                     input_schema={"type": "object", "properties": {"x": {"type": "number"}}})
    good = {"steps": [{"id": "d", "tool": "m", "capability": "double", "params": {"x": 2}}]}
    llm = ScriptedLLM([
        "I think {broken json",
        {"steps": [{"id": "d", "tool": "m", "capability": "triple", "params": {}}]},
        good,
        "The answer is 4.",
    ])
    orch = Orchestrator(catalog=cat, llm=llm, registry=CollectorRegistry())
    result = orch.run("double 2")
    assert result.status == "succeeded"
    assert result.steps["d"].output == 4
    assert result.answer == "The answer is 4."
    plans = llm.requests_for("plan")
    assert len(plans) == 3
    assert "not valid JSON" in plans[1].messages[-1]["content"]
    assert "has no capability 'triple'" in plans[2].messages[-1]["content"]
    assert result.usage.llm_calls == 4
    assert result.usage.by_purpose["plan"]["calls"] == 3
    synth = llm.requests_for("synthesis")[0]
    assert "double 2" in synth.prompt_text and '"output": "4"' in synth.prompt_text


def test_planning_error_keeps_every_attempt() -> None:
    cat = Catalog()
    cat.add_function(lambda: 1, tool="m", capability="one")
    llm = ScriptedLLM(["nope", "still nope", "{}"])
    result = Orchestrator(catalog=cat, llm=llm, config=OrchestratorConfig(planner_max_retries=2),
                          registry=CollectorRegistry()).run("q")
    assert result.status == "failed"
    assert result.error is not None and "no valid plan after 3 attempt(s)" in result.error
    assert "attempt 3:" in result.error and "steps" in result.error


def test_result_to_dict_is_json_and_usage_counts() -> None:
    cat = Catalog()
    cat.add_function(lambda: {"v": 1}, tool="m", capability="one")

    def script(req: LLMRequest) -> Any:
        if req.purpose == "plan":
            return {"steps": [{"id": "a", "tool": "m", "capability": "one"}]}
        return "v is 1"

    orch = Orchestrator(catalog=cat, llm=ScriptedLLM(script), registry=CollectorRegistry())
    result = orch.run("what is v")
    data = json.loads(json.dumps(result.to_dict()))
    assert data["status"] == "succeeded" and data["answer"] == "v is 1"
    assert data["steps"]["a"]["attempts"][0]["layer"] == "plan"
    assert data["plan"]["steps"][0]["id"] == "a"
    assert result.usage.llm_calls == 2 and result.usage.input_tokens > 0
    assert result.usage.wall_time_s > 0


async def test_arun_inside_a_loop_and_run_refuses_there() -> None:
    cat = Catalog()
    cat.add_function(lambda: 1, tool="m", capability="one")
    orch = make_orch(cat, lambda r: {"steps": [{"id": "a", "tool": "m", "capability": "one"}]})
    result = await orch.arun("q")
    assert result.steps["a"].output == 1
    with pytest.raises(RuntimeError, match=r"use 'await orchestrator\.arun"):
        orch.run("q")
    await orch.aclose()


async def test_cancelling_a_run_cancels_in_flight_calls() -> None:
    cancelled = asyncio.Event()
    cat = Catalog()

    async def forever() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    cat.add_function(forever, tool="m", capability="forever")
    orch = make_orch(cat, [{"steps": [{"id": "a", "tool": "m", "capability": "forever"}]}],
                     tool_timeout_s=120, step_timeout_s=120)
    task = asyncio.create_task(orch.arun("q"))
    await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cancelled.is_set()


def test_llm_budget_caps_the_run() -> None:
    cat = Catalog()
    cat.add_function(lambda: 1, tool="m", capability="one")
    llm = ScriptedLLM(lambda r: "not a plan")
    result = Orchestrator(catalog=cat, llm=llm, registry=CollectorRegistry(),
                          config=OrchestratorConfig(max_llm_calls_per_run=2,
                                                    planner_max_retries=5)).run("q")
    assert result.status == "failed"
    assert len(llm.requests) == 2
    assert result.error is not None and "limit of 2 LLM calls" in result.error


def test_run_deadline_bounds_planning_and_synthesis() -> None:
    cat = Catalog()
    cat.add_function(lambda: 1, tool="m", capability="one")
    slow = ScriptedLLM(lambda r: {"steps": [{"id": "a", "tool": "m", "capability": "one"}]},
                       latency_s=5.0)
    t0 = time.perf_counter()
    result = Orchestrator(catalog=cat, llm=slow, registry=CollectorRegistry(),
                          config=OrchestratorConfig(run_timeout_s=0.2)).run("q")
    assert time.perf_counter() - t0 < 2
    assert result.status == "failed"
    assert "run deadline (0.2s, ORCH_RUN_TIMEOUT_S) passed before a plan was ready" in (result.error or "")

    async def answer(request: LLMRequest) -> Any:
        if request.purpose == "plan":
            return {"steps": [{"id": "a", "tool": "m", "capability": "one"}]}
        await asyncio.sleep(5)
        return "too late"

    t0 = time.perf_counter()
    result = Orchestrator(catalog=cat, llm=ScriptedLLM(answer), registry=CollectorRegistry(),
                          config=OrchestratorConfig(run_timeout_s=0.3)).run("q")
    assert time.perf_counter() - t0 < 2
    assert result.status == "succeeded" and result.answer is None
    assert any("answer synthesis skipped" in w for w in result.warnings)
