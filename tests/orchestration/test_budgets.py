"""Run budgets: tokens, cost, LLM calls and calls per capability stop a run with a typed reason.

What "stops" means is pinned here: the call that crosses a token or cost budget completes,
the next call a budget refuses is not made, the refused attempt fails ``BUDGET_EXCEEDED``
(nothing sent), steps not started are skipped, no answer is synthesised, and the run is
never ``succeeded``; ``RunResult.budget_exceeded`` and the metrics say which budget.
"""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from orchestration import (
    Catalog,
    ConfigError,
    LLMRequest,
    LLMResponse,
    Orchestrator,
    OrchestratorConfig,
    RunState,
    ScriptedLLM,
    TokenUsage,
    ToolFailed,
)
from orchestration.demo.tools import DemoTools

TWO_STEPS = {"steps": [
    {"id": "a", "tool": "calc", "capability": "half", "params": {"x": 0}},
    {"id": "b", "tool": "calc", "capability": "half", "params": {"x": 8}},
]}


def half(x: float) -> float:
    if x <= 0:
        raise ToolFailed("NOT_POSITIVE", "x must be greater than 0", "INPUT_ERROR")
    return x / 2


def calc_catalog() -> Catalog:
    catalog = Catalog()
    catalog.add_function(half, tool="calc", capability="half",
                         input_schema={"type": "object", "required": ["x"],
                                       "properties": {"x": {"type": "number"}}})
    return catalog


def answer(content: Any, input_tokens: int, output_tokens: int) -> LLMResponse:
    import json

    text = content if isinstance(content, str) else json.dumps(content)
    return LLMResponse(content=text, usage=TokenUsage(input_tokens, output_tokens), model="m1")


def metric(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


def test_a_token_budget_stops_the_run_after_the_call_that_crossed_it() -> None:
    def respond(request: LLMRequest) -> LLMResponse:
        if request.purpose == "plan":
            return answer(TWO_STEPS, 600, 100)  # 700 tokens: crosses the budget of 500
        raise AssertionError(f"no {request.purpose} call may be made once the budget is spent")

    llm = ScriptedLLM(respond, model="m1")
    registry = CollectorRegistry()
    result = Orchestrator(calc_catalog(), llm, OrchestratorConfig(
        max_tokens_per_run=500, max_concurrency=1), registry=registry).run("halve 0 and 8")

    assert [r.purpose for r in llm.requests] == ["plan"]  # layer 4 for 'a' was refused
    a, b = result.steps["a"], result.steps["b"]
    assert a.status == "failed" and a.error is not None and a.error.code == "NOT_POSITIVE"
    assert a.error.details["gave_up"] == (
        "layer 4 (semantic retry) could not ask the LLM: LLM budget error: no further LLM call: "
        "the run's LLM token budget is spent: 700 of 500 tokens (ORCH_MAX_TOKENS_PER_RUN)")
    assert b.status == "skipped" and b.skipped_reason == (
        "the run stopped: the run's LLM token budget is spent: 700 of 500 tokens "
        "(ORCH_MAX_TOKENS_PER_RUN) before it started")
    assert result.status == "failed" and result.answer is None
    report = result.budget_exceeded
    assert report is not None and (report.budget, report.limit, report.used) == ("tokens", 500, 700)
    assert result.error is not None and result.error.startswith(
        "run stopped: the run's LLM token budget is spent: 700 of 500 tokens")
    assert metric(registry, "orchestration_budget_exceeded_total", budget="tokens") == 1
    assert metric(registry, "orchestration_llm_calls_total", purpose="semantic_retry",
                  outcome="budget_exceeded") == 1


def test_a_cost_budget_prices_calls_with_the_table_and_stops_the_run() -> None:
    plan = {"steps": [{"id": "b", "tool": "calc", "capability": "half", "params": {"x": 8}}]}
    llm = ScriptedLLM(lambda r: answer(plan, 1000, 500) if r.purpose == "plan"
                      else answer("4", 10, 10), model="m1")
    registry = CollectorRegistry()
    config = OrchestratorConfig(max_cost_per_run=1.5, llm_prices={
        "m1": {"input_per_1k": 1.0, "output_per_1k": 2.0}})
    result = Orchestrator(calc_catalog(), llm, config, registry=registry).run("halve 8")

    assert result.usage.cost == pytest.approx(2.0)  # 1000/1000*1 + 500/1000*2
    assert result.steps["b"].status == "succeeded"  # tools cost nothing: the step ran
    assert [r.purpose for r in llm.requests] == ["plan"]  # synthesis was refused
    assert result.status == "partial" and result.answer is None
    assert result.budget_exceeded is not None and result.budget_exceeded.budget == "cost"
    assert "answer synthesis skipped: the run's LLM cost budget is spent: 2 of 1.5 " \
        "(ORCH_MAX_COST_PER_RUN)" in result.warnings
    assert metric(registry, "orchestration_llm_cost_total", purpose="plan") == pytest.approx(2.0)
    assert metric(registry, "orchestration_budget_exceeded_total", budget="cost") == 1


def test_cost_is_reported_without_a_budget_and_a_budget_needs_a_price() -> None:
    plan = {"steps": [{"id": "b", "tool": "calc", "capability": "half", "params": {"x": 8}}]}
    llm = ScriptedLLM(lambda r: answer(plan, 2000, 0) if r.purpose == "plan"
                      else answer("4", 1000, 1000), model="m1")
    config = OrchestratorConfig(llm_prices={"*": {"input_per_1k": 0.5, "output_per_1k": 1.5}})
    result = Orchestrator(calc_catalog(), llm, config, registry=CollectorRegistry()).run("q")
    assert result.status == "succeeded" and result.budget_exceeded is None
    assert result.usage.cost == pytest.approx(1.0 + 0.5 + 1.5)
    # split by purpose: what planning and the answer each cost (dagwright eval reads it)
    assert result.usage.cost_by_purpose == pytest.approx({"plan": 1.0, "synthesis": 2.0})
    assert Orchestrator(calc_catalog(), llm, registry=CollectorRegistry()).run("q").usage.cost is None

    with pytest.raises(ConfigError, match="ORCH_LLM_PRICES has no price for model 'm1' "
                       r"\(priced: other\); add it, or a \"\*\" entry"):
        Orchestrator(calc_catalog(), ScriptedLLM([], model="m1"), OrchestratorConfig(
            max_cost_per_run=1, llm_prices={"other": {"input_per_1k": 1, "output_per_1k": 1}}))


def test_a_capability_call_cap_stops_the_run_before_the_call_is_sent(
    demo_tools: DemoTools, registry: CollectorRegistry,
) -> None:
    data = demo_tools.catalog_dict()
    for tool in data["tools"]:
        for cap in tool["capabilities"]:
            if (tool["name"], cap["name"]) == ("currency", "convert"):
                cap["max_calls_per_run"] = 2
    catalog = Catalog.from_dict(data)
    plan = {"steps": [
        {"id": f"c{n}", "tool": "currency", "capability": "convert",
         "params": {"amount": n, "from": "USD", "to": "EUR"}} for n in (1, 2, 3)
    ] + [{"id": "q", "tool": "stocks", "capability": "quote", "params": {"symbol": "AAPL"}}]}
    llm = ScriptedLLM(lambda r: "never asked")
    result = Orchestrator(catalog, llm, OrchestratorConfig(max_concurrency=1),
                          registry=registry).run("convert", plan=plan)

    assert len(demo_tools["currency"].requests_to("/convert")) == 2
    assert demo_tools["stocks"].requests_to("/quote") == []
    third = result.steps["c3"]
    assert third.status == "failed" and third.error is not None
    assert (third.error.category.value, third.error.code) == ("BUDGET_EXCEEDED", "BUDGET_EXCEEDED")
    assert [a.outcome for a in third.attempts] == ["not_sent"]
    assert third.error.message == ("not sent: the run's call budget of capability currency.convert "
                                   "is spent: 2 of 2 calls (max_calls_per_run of currency.convert "
                                   "in the catalog)")
    assert result.steps["q"].status == "skipped"
    assert result.status == "partial" and llm.requests == []
    assert result.budget_exceeded is not None
    assert result.budget_exceeded.capability == "currency.convert"
    assert result.usage.tool_calls == {"currency.convert": 2}
    assert metric(registry, "orchestration_budget_exceeded_total", budget="capability_calls") == 1
    # the refused call was never sent, so it is no tool call in the metrics either
    assert metric(registry, "orchestration_tool_calls_total", tool="currency",
                  capability="convert", outcome="succeeded") == 2


def test_the_budget_reason_survives_the_run_state_round_trip() -> None:
    llm = ScriptedLLM([answer(TWO_STEPS, 10, 10)], model="m1")
    orch = Orchestrator(calc_catalog(), llm, OrchestratorConfig(max_llm_calls_per_run=1,
                                                                max_concurrency=1),
                        registry=CollectorRegistry())
    result = orch.run("q")
    assert result.budget_exceeded is not None and result.budget_exceeded.budget == "llm_calls"
    assert result.to_dict()["budget_exceeded"] == {
        "budget": "llm_calls", "limit": 1.0, "used": 1.0, "setting": "ORCH_MAX_LLM_CALLS_PER_RUN",
        "capability": None}
    state = RunState(run_id="r", query="q", budget_exceeded=result.budget_exceeded)
    assert RunState.model_validate_json(state.model_dump_json()).budget_exceeded == result.budget_exceeded
