"""No second send: a non-idempotent call that may have been processed is never sent again —
by resilience, layer 3 or 4, a repair plan — and "the same call" means the same after
coercion. A call that declares an idempotency key carries the same key every time."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry

from orchestration import Catalog, Orchestrator, OrchestratorConfig, ScriptedLLM
from orchestration.clock import ManualClock
from orchestration.llm.base import LLMRequest
from tests.support.hostile_tools import HostileTool, Reply

AMOUNT = {"type": "object", "properties": {"amount": {"type": "integer", "minimum": 1}},
          "required": ["amount"], "additionalProperties": False}
STRUCTURED_503 = Reply(503, {"success": False, "error": {
    "code": "LEDGER_BUSY", "message": "ledger busy", "category": "SERVICE_ERROR",
    "retryable": False}})
PLAIN_503 = Reply(503, raw=b"upstream unavailable")
PAID = Reply(200, {"success": True, "data": {"paid": True}})


def bank(tool: HostileTool, **fields: Any) -> Catalog:
    catalog = Catalog()
    catalog.add_http(tool="bank", capability="pay", url=tool.url("/pay"), method="POST",
                     input_schema=AMOUNT, idempotent=False, **fields)
    return catalog


def by_purpose(**answers: list[Any]) -> ScriptedLLM:
    queues = {purpose: list(items) for purpose, items in answers.items()}

    def answer(request: LLMRequest) -> Any:
        return queues[request.purpose].pop(0)

    return ScriptedLLM(answer)


def run(catalog: Catalog, llm: ScriptedLLM, amount: Any, **config: Any) -> Any:
    config.setdefault("synthesis_enabled", False)
    # about the re-send guard: layer 4's sources are checked in test_grounding.py
    config.setdefault("grounded_corrections", False)
    plan = {"steps": [{"id": "p", "tool": "bank", "capability": "pay",
                       "params": {"amount": amount}}]}
    return Orchestrator(catalog=catalog, llm=llm, registry=CollectorRegistry(),
                        config=OrchestratorConfig(**config),
                        clock=ManualClock()).run("pay 100", plan=plan)


def layer4(corrected: dict[str, Any]) -> dict[str, Any]:
    return {"should_retry": True, "corrected_parameters": corrected,
            "analysis": "retry", "is_transient_error": False}


# --- 6a. layer 4 ------------------------------------------------------------------------

def test_a_layer_4_change_of_form_only_does_not_re_send_the_call(hostile_tool: HostileTool) -> None:
    hostile_tool.queue("/pay", STRUCTURED_503, PAID)
    llm = by_purpose(semantic_retry=[layer4({"amount": "100"})])
    result = run(bank(hostile_tool), llm, 100)
    step = result.steps["p"]
    assert len(hostile_tool.requests_to("/pay")) == 1
    assert step.status == "failed" and step.error is not None
    assert step.error.code == "LEDGER_BUSY"
    assert step.error.details["gave_up"].startswith("not re-sent")
    assert [(a.layer, a.outcome) for a in step.attempts] == [
        ("plan", "failed"), ("semantic_retry", "not_sent")]
    assert step.attempts[1].params == {"amount": 100}  # compared after coercion


def test_a_layer_4_change_that_makes_a_different_call_is_sent(hostile_tool: HostileTool) -> None:
    hostile_tool.queue("/pay", STRUCTURED_503, PAID)
    llm = by_purpose(semantic_retry=[layer4({"amount": 99})])
    result = run(bank(hostile_tool), llm, 100)
    assert result.status == "succeeded", result.error
    assert [r.body for r in hostile_tool.requests_to("/pay")] == [{"amount": 100}, {"amount": 99}]


def test_a_layer_3_correction_back_to_a_possibly_processed_call_is_not_sent(
    hostile_tool: HostileTool,
) -> None:
    # 100 is sent and times out ambiguously (503); a 400 on 7 then makes layer 3 go back to
    # 100 — which may already have been processed
    hostile_tool.queue("/pay", PLAIN_503)
    fix = {"can_fix": True, "analysis": "back", "corrected_parameters": {"amount": "100"}}
    llm = by_purpose(validation_feedback=[fix])
    catalog = bank(hostile_tool)
    plan = {"steps": [{"id": "p", "tool": "bank", "capability": "pay", "params": {"amount": 100}}]}
    orch = Orchestrator(catalog=catalog, llm=llm, registry=CollectorRegistry(),
                        config=OrchestratorConfig(synthesis_enabled=False, retry_max_attempts=1,
                                                  validation_error_patterns=["unavailable"]),
                        clock=ManualClock())
    result = orch.run("q", plan=plan)
    assert len(hostile_tool.requests_to("/pay")) == 1
    assert [a.outcome for a in result.steps["p"].attempts] == ["failed", "not_sent"]


# --- 6b. repair plans -------------------------------------------------------------------

def test_a_repair_step_that_is_the_same_call_after_coercion_is_rejected(
    hostile_tool: HostileTool,
) -> None:
    hostile_tool.queue("/pay", PLAIN_503, PAID)
    repair = {"steps": [{"id": "p2", "tool": "bank", "capability": "pay",
                         "params": {"amount": "100"}}]}
    llm = by_purpose(replan=[repair, {"steps": []}])
    result = run(bank(hostile_tool), llm, 100, replan_max=1)
    assert len(hostile_tool.requests_to("/pay")) == 1
    assert "p2" not in result.steps
    feedback = llm.requests_for("replan")[1].messages[-1]["content"]
    assert "same call" in feedback and "'p'" in feedback


def test_a_repair_step_making_a_different_call_runs(hostile_tool: HostileTool) -> None:
    hostile_tool.queue("/pay", PLAIN_503, PAID)
    repair = {"steps": [{"id": "p2", "tool": "bank", "capability": "pay",
                         "params": {"amount": 50}}]}
    llm = by_purpose(replan=[repair])
    result = run(bank(hostile_tool), llm, 100, replan_max=1)
    assert result.steps["p2"].status == "succeeded", result.error
    assert [r.body for r in hostile_tool.requests_to("/pay")] == [{"amount": 100}, {"amount": 50}]


# --- 10. idempotency keys ---------------------------------------------------------------

def test_a_repair_step_making_the_same_call_sends_the_same_idempotency_key(
    hostile_tool: HostileTool,
) -> None:
    hostile_tool.queue("/pay", PLAIN_503, PAID)
    fix = {"can_fix": True, "analysis": "positive", "corrected_parameters": {"amount": 100}}
    repair = {"steps": [{"id": "p2", "tool": "bank", "capability": "pay",
                         "params": {"amount": "100"}}]}
    llm = by_purpose(validation_feedback=[fix], replan=[repair])
    result = run(bank(hostile_tool, idempotency_key_header="Idempotency-Key"), llm, -5,
                 replan_max=1, retry_max_attempts=1)
    assert result.steps["p2"].status == "succeeded", result.error
    sent = hostile_tool.requests_to("/pay")
    assert [r.body for r in sent] == [{"amount": 100}, {"amount": 100}]
    keys = [r.headers["idempotency-key"] for r in sent]
    assert keys[0] == keys[1] and len(keys[0]) == 32


def test_idempotency_keys_differ_between_different_calls_and_runs(
    hostile_tool: HostileTool,
) -> None:
    catalog = bank(hostile_tool, idempotency_key_header="Idempotency-Key")
    hostile_tool.always("/pay", PAID)
    for amount in (1, 2, 1):
        run(catalog, ScriptedLLM([]), amount)
    keys = [r.headers["idempotency-key"] for r in hostile_tool.requests_to("/pay")]
    assert len(set(keys)) == 3  # another call, another run: another key
