"""Replanning: a run whose plan hits a dead end is completed by a repair plan."""

from __future__ import annotations

import json
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from orchestration import (
    Catalog,
    ErrorCategory,
    Orchestrator,
    OrchestratorConfig,
    RunResult,
    ScriptedLLM,
)
from orchestration.clock import ManualClock
from orchestration.demo.tools import DemoTools
from orchestration.llm.base import LLMRequest

QUERY = "What is Tesla's share price in euros?"
# The planner takes the company name for a ticker: stocks.quote answers NOT_FOUND for good.
FIRST_PLAN = {"steps": [
    {"id": "fx", "tool": "currency", "capability": "rates", "params": {"base": "USD"}},
    {"id": "q", "tool": "stocks", "capability": "quote", "params": {"symbol": "TESLA"}},
    {"id": "conv", "tool": "currency", "capability": "convert",
     "params": {"amount": "{{q.price}}", "from": "USD", "to": "EUR"}},
]}
# The repair goes through another capability and reuses the completed fx step.
REPAIR = {"steps": [
    {"id": "find", "tool": "stocks", "capability": "lookup", "params": {"company": "Tesla"}},
    {"id": "q2", "tool": "stocks", "capability": "quote", "params": {"symbol": "{{find.symbol}}"}},
    {"id": "conv2", "tool": "currency", "capability": "convert",
     "params": {"amount": "{{q2.price}}", "from": "{{fx.base}}", "to": "EUR"}},
]}
# Layers 3 and 4 decline, so the failed quote is final.
DEAD_END = {"validation_feedback_enabled": False, "semantic_retry_enabled": False}


def scripted(replans: list[Any], synthesis: str = "Tesla trades at about 430.82 EUR.",
             ) -> ScriptedLLM:
    queue = list(replans)

    def answer(request: LLMRequest) -> Any:
        if request.purpose == "plan":
            return FIRST_PLAN
        if request.purpose == "replan":
            return queue.pop(0)
        return synthesis

    return ScriptedLLM(answer)


def run(catalog: Catalog, llm: ScriptedLLM, registry: CollectorRegistry,
        provider: TracerProvider | None = None, **config: Any) -> RunResult:
    cfg = OrchestratorConfig(**{**DEAD_END, "synthesis_enabled": False, **config})
    return Orchestrator(catalog=catalog, llm=llm, config=cfg, registry=registry,
                        clock=ManualClock(), tracer_provider=provider).run(QUERY)


def test_replan_completes_a_run_whose_first_plan_hit_a_dead_end(
    demo_tools: DemoTools, demo_catalog: Catalog, registry: CollectorRegistry,
) -> None:
    llm = scripted([REPAIR])
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    result = run(demo_catalog, llm, registry, provider, replan_max=1, synthesis_enabled=True)

    assert result.status == "succeeded", result.error
    assert result.error is None
    steps = result.steps
    assert list(steps) == ["fx", "q", "conv", "find", "q2", "conv2"]
    failed = steps["q"]
    assert failed.status == "failed" and failed.error is not None
    assert failed.error.category == ErrorCategory.NOT_FOUND and failed.error.code == "SYMBOL_NOT_FOUND"
    assert steps["conv"].status == "skipped"
    assert [steps[s].status for s in ("fx", "find", "q2", "conv2")] == ["succeeded"] * 4
    assert steps["conv2"].output["converted"] == round(468.285 * 0.92, 2)
    # the completed step was reused, not re-run; its output was bound into the repair
    assert len(demo_tools["currency"].requests_to("/rates")) == 1
    assert demo_tools["currency"].requests_to("/convert")[0].body == {
        "amount": 468.285, "from": "USD", "to": "EUR"}
    # the plan records both the original steps and the repair round
    assert [s["id"] for s in result.plan["steps"]] == list(steps)  # type: ignore[index]
    assert result.plan["replans"] == [  # type: ignore[index]
        {"round": 1, "replaces": ["q", "conv"], "steps": ["find", "q2", "conv2"]}]
    assert "replan round 1: q, conv replaced by find, q2, conv2" in result.warnings
    assert result.usage.by_purpose["replan"]["calls"] == 1

    replan = llm.requests_for("replan")[0]
    system, user = (m["content"] for m in replan.messages)
    assert "New step ids must differ from every existing one: conv, fx, q." in system
    assert "### stocks.lookup" in system
    outputs = user[user.index("<<<OUTPUTS"):user.index("OUTPUTS>>>")]
    assert '"step": "fx"' in outputs and '"EUR": 0.92' in outputs
    failures = user[user.index("<<<FAILURES"):user.index("FAILURES>>>")]
    assert "SYMBOL_NOT_FOUND" in failures and '"params_tried": {"symbol": "TESLA"}' in failures
    assert "- conv (currency.convert): upstream step 'q' failed" in user

    # the answer is composed from what the repair produced, not from the dead end
    synthesis = llm.requests_for("synthesis")[0].prompt_text
    assert '"step": "conv2"' in synthesis and "SYMBOL_NOT_FOUND" not in synthesis
    assert result.answer == "Tesla trades at about 430.82 EUR."

    replan_span = next(s for s in spans.get_finished_spans()
                       if (s.attributes or {}).get("dagwright.plan.purpose") == "replan")
    assert replan_span.attributes is not None
    assert replan_span.name == "plan dagwright"
    assert replan_span.attributes["gen_ai.operation.name"] == "plan"
    assert replan_span.attributes["dagwright.replan.round"] == 1
    assert replan_span.attributes["dagwright.replan.open_steps"] == "q,conv"


def test_replanning_is_off_by_default(demo_tools: DemoTools, demo_catalog: Catalog,
                                      registry: CollectorRegistry) -> None:
    llm = scripted([REPAIR])
    result = run(demo_catalog, llm, registry)
    assert result.status == "partial"
    assert llm.requests_for("replan") == []
    assert result.plan is not None and "replans" not in result.plan
    assert result.error is not None and "SYMBOL_NOT_FOUND" in result.error


def test_invalid_repair_plan_is_fed_back_with_every_issue(
    demo_tools: DemoTools, demo_catalog: Catalog, registry: CollectorRegistry,
) -> None:
    bad = {"steps": [
        {"id": "q", "tool": "stocks", "capability": "lookup", "params": {"company": "Tesla"}},
        {"id": "again", "tool": "stocks", "capability": "quote", "params": {"symbol": "TESLA"}},
        {"id": "c2", "tool": "currency", "capability": "convert",
         "params": {"amount": "{{conv.converted}}", "from": "{{fx.currency}}", "to": "EUR"}},
    ]}
    llm = scripted([bad, REPAIR])
    result = run(demo_catalog, llm, registry, replan_max=1)
    assert result.status == "succeeded", result.error
    feedback = llm.requests_for("replan")[1].messages[-1]["content"]
    assert "step 'q': this id is already used by a step of the run" in feedback
    assert "step 'again': repeats the call that failed in step 'q'" in feedback
    assert "step 'c2': uses step 'conv', which skipped; only succeeded steps (fx)" in feedback
    assert ("step 'c2': param $.from: {{fx.currency}} cannot be read: the output of fx has no "
            "field 'currency' (it has: base, rates)") in feedback
    assert registry.get_sample_value("orchestration_planner_retries_total",
                                     {"reason": "validation"}) == 1


def test_empty_repair_means_nothing_can_be_done(
    demo_tools: DemoTools, demo_catalog: Catalog, registry: CollectorRegistry,
) -> None:
    llm = scripted([{"steps": []}])
    result = run(demo_catalog, llm, registry, replan_max=2)
    assert result.status == "partial"
    assert len(llm.requests_for("replan")) == 1
    assert "replan round 1: the planner found no repair for q, conv" in result.warnings
    assert list(result.steps) == ["fx", "q", "conv"]


def test_failed_repair_gets_a_second_round_when_allowed(
    demo_tools: DemoTools, demo_catalog: Catalog, registry: CollectorRegistry,
) -> None:
    wrong_company = json.loads(json.dumps(REPAIR).replace('"Tesla"', '"Teslaa Motors Group"'))
    llm = scripted([wrong_company, {"steps": [
        {"id": "find3", "tool": "stocks", "capability": "lookup", "params": {"company": "tesla"}},
        {"id": "q3", "tool": "stocks", "capability": "quote", "params": {"symbol": "{{find3.symbol}}"}},
        {"id": "conv3", "tool": "currency", "capability": "convert",
         "params": {"amount": "{{q3.price}}", "from": "USD", "to": "EUR"}}]}])
    result = run(demo_catalog, llm, registry, replan_max=2)
    assert result.status == "succeeded", result.error
    assert [r["replaces"] for r in result.plan["replans"]] == [  # type: ignore[index]
        ["q", "conv"], ["find", "q2", "conv2"]]
    assert result.steps["find"].status == "failed" and result.steps["conv3"].status == "succeeded"
    second = llm.requests_for("replan")[1].prompt_text
    assert "COMPANY_NOT_FOUND" in second and "SYMBOL_NOT_FOUND" in second


def test_repair_that_fails_again_leaves_the_run_partial(
    demo_tools: DemoTools, demo_catalog: Catalog, registry: CollectorRegistry,
) -> None:
    wrong_company = json.loads(json.dumps(REPAIR).replace('"Tesla"', '"Teslaa Motors Group"'))
    llm = scripted([wrong_company])
    result = run(demo_catalog, llm, registry, replan_max=1)
    assert result.status == "partial"
    # only the latest failure is reported as the run's error; the earlier one was replaced
    assert result.error is not None and "COMPANY_NOT_FOUND" in result.error
    assert "SYMBOL_NOT_FOUND" not in result.error


def test_replan_failure_is_a_warning_not_a_crash(
    demo_tools: DemoTools, demo_catalog: Catalog, registry: CollectorRegistry,
) -> None:
    llm = scripted(["no idea", "still none", "nope"])
    result = run(demo_catalog, llm, registry, replan_max=1)
    assert result.status == "partial"
    warning = next(w for w in result.warnings if w.startswith("replan round 1 failed"))
    assert "no valid repair plan after 3 attempt(s)" in warning


def test_no_replan_when_the_llm_budget_is_spent(
    demo_tools: DemoTools, demo_catalog: Catalog, registry: CollectorRegistry,
) -> None:
    llm = scripted([REPAIR])
    result = run(demo_catalog, llm, registry, replan_max=1, max_llm_calls_per_run=1)
    assert result.status == "partial"
    assert llm.requests_for("replan") == []
    assert any("LLM call budget is spent" in w for w in result.warnings)




def test_layer_4_in_a_repair_round_sees_outputs_of_earlier_rounds(registry: CollectorRegistry) -> None:
    """A repair step that fails with an input error gets layer 4, whose prompt holds the
    output of a step that finished in the first round (not part of the repair plan)."""
    calls: list[float] = []

    def price(symbol: str) -> dict[str, Any]:
        if symbol != "TSLA":
            from orchestration import ToolFailed
            raise ToolFailed("SYMBOL_NOT_FOUND", f"no symbol {symbol}", "NOT_FOUND")
        return {"price": 250.0}

    def pay(amount: float) -> dict[str, Any]:
        if amount <= 0:
            from orchestration import ToolFailed
            raise ToolFailed("BAD_AMOUNT", "amount must be greater than 0", "INPUT_ERROR",
                             retryable=True)
        calls.append(amount)
        return {"paid": amount}

    catalog = Catalog()
    number = {"type": "object", "required": ["amount"], "properties": {"amount": {"type": "number"}}}
    catalog.add_function(price, tool="stocks", capability="price",
                         input_schema={"type": "object", "properties": {"symbol": {"type": "string"}}})
    catalog.add_function(pay, tool="bank", capability="pay", input_schema=number,
                         idempotent=False)
    first = {"steps": [
        {"id": "p", "tool": "stocks", "capability": "price", "params": {"symbol": "TSLA"}},
        {"id": "bad", "tool": "stocks", "capability": "price", "params": {"symbol": "TESLA"}},
    ]}
    repair = {"steps": [{"id": "buy", "tool": "bank", "capability": "pay", "params": {"amount": 0},
                         "depends_on": ["p"]}]}
    prompts: list[str] = []

    def answer(request: LLMRequest) -> Any:
        if request.purpose == "plan":
            return first
        if request.purpose == "replan":
            return repair
        if request.purpose == "semantic_retry":
            prompts.append(request.prompt_text)
            if "bad" in request.prompt_text and "Failed call: step 'bad'" in request.prompt_text:
                return {"should_retry": False, "is_transient_error": False,
                        "corrected_parameters": {}, "analysis": "unknown company"}
            return {"should_retry": True, "is_transient_error": False,
                    "corrected_parameters": {"amount": 250.0}, "analysis": "the price of p",
                    # p finished in an earlier round: its output still grounds the value
                    "provenance": {"amount": {"kind": "upstream", "path": "p.price"}}}
        return "done"

    cfg = OrchestratorConfig(validation_feedback_enabled=False, synthesis_enabled=False,
                             replan_max=1, semantic_retry_independent_steps=True)
    result = Orchestrator(catalog=catalog, llm=ScriptedLLM(answer), config=cfg, registry=registry,
                          clock=ManualClock()).run("buy one TSLA share")
    assert result.steps["buy"].status == "succeeded", result.steps["buy"].error
    assert calls == [250.0]
    repair_prompt = next(p for p in prompts if "Failed call: step 'buy'" in p)
    # p finished in the first round: the repair plan does not hold it, the run does
    assert 'step p (stocks.price) returned: {"price": 250.0}' in repair_prompt
