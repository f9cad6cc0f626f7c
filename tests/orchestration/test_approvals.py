"""Human approval: a run pauses before a call that needs a person, and goes on after.

Driven through the public API; the pause and the resume happen in different processes
in the first test (the store is a SQLite file they share).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from orchestration import (
    PLAN_APPROVAL,
    Approval,
    ApprovalError,
    Catalog,
    InvalidInput,
    Orchestrator,
    OrchestratorConfig,
    ScriptedLLM,
)
from tests import ROOT
from tests.support.side_effects import SideEffectTools

QUERY = "pay for one share and file the receipt"


def plan() -> dict[str, Any]:
    return {"steps": [
        {"id": "quote", "tool": "stocks", "capability": "quote", "params": {"symbol": "TSLA"}},
        {"id": "pay", "tool": "bank", "capability": "pay",
         "params": {"amount": "{{quote.price}}", "to": "broker"}},
        {"id": "receipt", "tool": "bank", "capability": "receipt",
         "params": {"paid": "{{pay.paid}}"}},
        {"id": "fx", "tool": "stocks", "capability": "quote", "params": {"symbol": "EURUSD"}},
    ]}


def approval_catalog(tools: SideEffectTools) -> dict[str, Any]:
    spec = tools.catalog()
    for tool in spec["tools"]:
        for cap in tool["capabilities"]:
            if cap["name"] == "pay":
                cap["requires_approval"] = True
    return spec


def orchestrator(tools: SideEffectTools, store: str = "memory://", **config: Any) -> Orchestrator:
    cfg = OrchestratorConfig(store_url=store, synthesis_enabled=False, **config)
    return Orchestrator(catalog=Catalog.from_dict(approval_catalog(tools), source="t"),
                        llm=ScriptedLLM(["unused"]), config=cfg)


def test_a_paused_run_is_approved_in_another_process(tools: SideEffectTools, tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path}/runs.db"
    paused = orchestrator(tools, store).run(QUERY, plan=plan(), run_id="approve-me")

    assert paused.status == "awaiting_approval"
    (pending,) = paused.pending_approvals
    assert (pending.step_id, pending.tool, pending.capability) == ("pay", "bank", "pay")
    assert pending.params == {"amount": 250.0, "to": "broker"}  # bound and coerced
    assert "requires approval" in pending.reason
    # everything that does not depend on the payment ran; nothing of it was sent
    assert paused.steps["quote"].status == "succeeded" and paused.steps["fx"].status == "succeeded"
    assert paused.steps["pay"].status == "awaiting_approval"
    assert "receipt" not in paused.steps
    assert "/pay" not in tools.executed

    script = (
        "import json, sys\n"
        "from orchestration import Approval, Catalog, Orchestrator, OrchestratorConfig, ScriptedLLM\n"
        "catalog = Catalog.from_dict(json.loads(sys.argv[2]), source='t')\n"
        "cfg = OrchestratorConfig(store_url=sys.argv[1], synthesis_enabled=False)\n"
        "orch = Orchestrator(catalog=catalog, llm=ScriptedLLM(['unused']), config=cfg)\n"
        "result = orch.resume('approve-me', approvals={'pay': Approval(approved=True)})\n"
        "print(json.dumps(result.to_dict()))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script, store, json.dumps(approval_catalog(tools))],
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    done = json.loads(proc.stdout.strip().splitlines()[-1])

    assert done["status"] == "succeeded" and done["pending_approvals"] == []
    assert done["steps"]["pay"]["attempts"][-1]["layer"] == "approval"
    assert done["steps"]["receipt"]["status"] == "succeeded"
    assert tools.executed == {"/quote": 2, "/pay": 1, "/receipt": 1}  # quote and fx, once each


def test_edited_params_are_coerced_and_validated_and_a_bad_edit_changes_nothing(
    tools: SideEffectTools,
) -> None:
    orch = orchestrator(tools)
    paused = orch.run(QUERY, plan=plan())
    with pytest.raises(ApprovalError, match=r"do not fit bank\.pay's input schema"):
        orch.resume(paused.run_id, approvals={"pay": Approval(approved=True,
                                                              params={"amount": "lots"})})
    still = orch.get_run(paused.run_id)
    assert still is not None and still.status == "awaiting_approval"
    assert "/pay" not in tools.executed

    done = orch.resume(paused.run_id, approvals={"pay": Approval(
        approved=True, params={"amount": "100", "to": "broker"})})
    assert done.status == "succeeded"
    assert tools.requests[-2][2] == {"amount": 100, "to": "broker"}  # layer 2 made it a number
    assert tools.executed["/pay"] == 1


def test_a_partial_edit_is_merged_onto_the_proposed_params_and_validated_whole(
    tools: SideEffectTools,
) -> None:
    """docs/approvals.md's edit: only the amount changes, ``to`` stays; null removes a key."""
    orch = orchestrator(tools)
    paused = orch.run(QUERY, plan=plan())
    assert paused.pending_approvals[0].params == {"amount": 250.0, "to": "broker"}
    # removing the required key leaves parameters that do not validate: nothing changes
    with pytest.raises(ApprovalError, match=r"'amount' is a required property.*null removes a key"):
        orch.resume(paused.run_id, approvals={"pay": Approval(approved=True,
                                                              params={"amount": None})})
    assert orch.get_run(paused.run_id).status == "awaiting_approval"  # type: ignore[union-attr]
    done = orch.resume(paused.run_id, approvals={"pay": Approval(
        approved=True, params={"amount": "200", "to": None})})
    assert done.status == "succeeded"
    assert tools.requests[-2][2] == {"amount": 200}  # merged, coerced, "to" removed
    assert done.steps["pay"].attempts[-1].params == {"amount": 200}


def test_merge_edit_follows_rfc_7396() -> None:
    from executors._approvals import merge_edit

    proposed = {"amount": 250, "to": "ACME", "meta": {"ref": "x", "tags": ["a"]}}
    assert merge_edit(proposed, {"amount": 200}) == {"amount": 200, "to": "ACME",
                                                     "meta": {"ref": "x", "tags": ["a"]}}
    assert merge_edit(proposed, {"meta": {"ref": None, "note": "n"}, "to": None}) == {
        "amount": 250, "meta": {"tags": ["a"], "note": "n"}}
    assert merge_edit(proposed, {"meta": {"tags": ["b"]}})["meta"]["tags"] == ["b"]  # lists replace
    assert proposed["meta"] == {"ref": "x", "tags": ["a"]}  # the proposal is not changed


def test_a_rejection_fails_the_step_and_skips_what_depends_on_it(tools: SideEffectTools) -> None:
    orch = orchestrator(tools)
    paused = orch.run(QUERY, plan=plan())
    done = orch.resume(paused.run_id, approvals={"pay": Approval(approved=False,
                                                                 note="wrong broker")})
    pay = done.steps["pay"]
    assert pay.status == "failed" and pay.error is not None
    assert pay.error.code == "REJECTED" and "wrong broker" in pay.error.message
    assert done.steps["receipt"].status == "skipped"
    assert done.status == "partial"
    assert "/pay" not in tools.executed and "/receipt" not in tools.executed


def test_decisions_for_nothing_pending_are_clear_errors(tools: SideEffectTools) -> None:
    orch = orchestrator(tools)
    paused = orch.run(QUERY, plan=plan())
    with pytest.raises(ApprovalError, match=r"'quote' is not waiting for approval; pending: 'pay'"):
        orch.resume(paused.run_id, approvals={"quote": Approval(approved=True)})
    done = orch.resume(paused.run_id, approvals={"pay": Approval(approved=True)})
    assert done.status == "succeeded"
    with pytest.raises(ApprovalError, match="is not waiting for approval \\(it is succeeded\\)"):
        orch.resume(paused.run_id, approvals={"pay": Approval(approved=True)})


def test_an_approval_left_too_long_is_rejected_as_expired(tools: SideEffectTools) -> None:
    orch = orchestrator(tools, approval_timeout_s=0.05)
    paused = orch.run(QUERY, plan=plan())
    time.sleep(0.1)
    listed = orch.get_run(paused.run_id)
    assert listed is not None and listed.steps["pay"].error is not None
    assert listed.steps["pay"].error.code == "APPROVAL_EXPIRED" and listed.pending_approvals == []
    done = orch.resume(paused.run_id)
    assert done.steps["receipt"].status == "skipped" and done.status == "partial"
    assert "/pay" not in tools.executed


def test_a_whole_plan_waits_for_approval_and_may_be_replaced(tools: SideEffectTools) -> None:
    orch = orchestrator(tools, approve_plans=True)
    paused = orch.run(QUERY, plan=plan())
    (pending,) = paused.pending_approvals
    assert pending.step_id == PLAN_APPROVAL and pending.params["plan"]["steps"][0]["id"] == "quote"
    assert paused.steps == {} and tools.executed == {}

    only_quote = {"steps": [plan()["steps"][0]]}
    done = orch.resume(paused.run_id, approvals={PLAN_APPROVAL: Approval(approved=True,
                                                                        params=only_quote)})
    assert done.status == "succeeded" and list(done.steps) == ["quote"]
    assert tools.executed == {"/quote": 1}

    rejected = orch.run(QUERY, plan=plan())
    final = orch.resume(rejected.run_id, approvals={PLAN_APPROVAL: Approval(approved=False,
                                                                           note="no")})
    assert final.status == "failed" and "rejected by a person: no" in (final.error or "")


def test_changed_parameters_after_an_approval_need_a_new_one(tools: SideEffectTools) -> None:
    """An approval is for the call approved: when a layer would send something else (here
    layer 4 changes the amount after the tool refused it), a person is asked again."""
    spec = approval_catalog(tools)
    catalog = Catalog.from_dict(spec, source="t")
    refusals = iter([True])

    real = tools.handle

    def refuse_once(method: str, path: str, body: dict[str, Any],
                    key: str | None) -> tuple[int, dict[str, Any]]:
        if path == "/pay" and next(refusals, False):
            return 400, {"success": False, "error": {"code": "TOO_MUCH", "category": "INPUT_ERROR",
                                                     "message": "amount too high", "retryable": True}}
        return real(method, path, body, key)

    tools.handle = refuse_once  # type: ignore[method-assign]

    def answer(request: Any) -> Any:
        return {"should_retry": True, "is_transient_error": False, "analysis": "half of it",
                "corrected_parameters": {"amount": 125.0}}

    cfg = OrchestratorConfig(store_url="memory://", synthesis_enabled=False,
                             validation_feedback_enabled=False, grounded_corrections=False)
    orch = Orchestrator(catalog=catalog, llm=ScriptedLLM(answer), config=cfg)
    paused = orch.run(QUERY, plan=plan())
    again = orch.resume(paused.run_id, approvals={"pay": Approval(approved=True)})
    assert again.status == "awaiting_approval"
    (pending,) = again.pending_approvals
    assert pending.params == {"amount": 125.0, "to": "broker"}
    assert "differ from the ones approved" in pending.reason
    done = orch.resume(paused.run_id, approvals={"pay": Approval(approved=True)})
    assert done.status == "succeeded" and done.steps["pay"].output["paid"] == 125.0


def test_the_cli_lists_approves_and_rejects(tools: SideEffectTools, tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path}/runs.db"
    catalog_file = tmp_path / "catalog.json"
    catalog_file.write_text(json.dumps(approval_catalog(tools)))
    script = tmp_path / "script.json"
    script.write_text(json.dumps(["unused"]))
    env = {**os.environ, "ORCH_STORE_URL": store, "ORCH_CATALOG": str(catalog_file),
           "ORCH_LLM_PROVIDER": "scripted", "ORCH_LLM_SCRIPT": str(script),
           "ORCH_SYNTHESIS_ENABLED": "false"}
    first = orchestrator(tools, store).run(QUERY, plan=plan(), run_id="cli-approve")
    second = orchestrator(tools, store).run(QUERY, plan=plan(), run_id="cli-reject")
    assert first.status == second.status == "awaiting_approval"

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "orchestration", *args], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=60)

    listed = cli("approvals", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert sorted((p["run_id"], p["step_id"]) for p in json.loads(listed.stdout)) == [
        ("cli-approve", "pay"), ("cli-reject", "pay")]

    bad = cli("approve", "cli-approve", "pay", "--params", "[1]")
    assert bad.returncode == 2 and "--params must be a JSON object" in bad.stderr
    # through the bounded decoder: before, a RecursionError's traceback
    deep = cli("approve", "cli-approve", "pay", "--params", "[" * 5000 + "]" * 5000)
    assert deep.returncode == 2 and "ORCH_MAX_JSON_DEPTH" in deep.stderr, deep.stderr
    assert "Traceback" not in deep.stderr
    approved = cli("approve", "cli-approve", "pay", "--params", '{"amount": "50", "to": "broker"}',
                   "--json")
    assert approved.returncode == 0, approved.stderr
    assert json.loads(approved.stdout)["status"] == "succeeded"
    assert "pay: succeeded" in approved.stderr  # live progress on stderr, not a terminal
    rejected = cli("reject", "cli-reject", "pay", "--note", "not today")
    assert rejected.returncode == 1 and "REJECTED" in rejected.stdout
    assert json.loads(cli("approvals", "list", "--json").stdout) == []
    assert tools.executed["/pay"] == 1


def test_an_approvals_note_is_kept_on_the_approved_attempt(tools: SideEffectTools) -> None:
    """A first-time user's finding: `Approval(note=...)`, `--note` and the API's note were
    dropped, the attempt saying only "approved by a person"."""
    orch = orchestrator(tools)
    paused = orch.run(QUERY, plan=plan())
    done = orch.resume(paused.run_id, approvals={"pay": Approval(approved=True,
                                                                 note="checked with finance")})
    assert done.steps["pay"].attempts[-1].note == "approved by a person: checked with finance"
    assert done.steps["pay"].attempts[-1].layer == "approval"


@pytest.mark.parametrize("approved", [True, False], ids=["approve", "reject"])
def test_a_note_that_is_not_valid_unicode_is_refused_and_changes_nothing(
    tools: SideEffectTools, tmp_path: Path, approved: bool,
) -> None:
    """A note holding a lone surrogate (a JSON escape like \\ud800 without its pair, or a
    command line's undecodable byte) cannot be recorded. Before: a
    PydanticSerializationError out of resume() from the run store, the decision half
    made. Now ApprovalError naming the step and the character, and the run still waits."""
    orch = orchestrator(tools, f"sqlite:///{tmp_path}/runs.db")
    paused = orch.run(QUERY, plan=plan())
    with pytest.raises(ApprovalError, match=r"step 'pay'.*note.*lone surrogate"):
        orch.resume(paused.run_id, approvals={"pay": Approval(approved=approved,
                                                              note="ok \ud800")})
    still = orch.get_run(paused.run_id)
    assert still is not None and still.status == "awaiting_approval"
    assert tools.executed["/pay"] == 0
    done = orch.resume(paused.run_id, approvals={"pay": Approval(approved=approved, note="ok")})
    assert done.steps["pay"].status == ("succeeded" if approved else "failed")


def test_a_cancel_reason_that_is_not_valid_unicode_is_refused(
    tools: SideEffectTools, tmp_path: Path,
) -> None:
    """Before: a PydanticSerializationError out of acancel() from the run store."""
    orch = orchestrator(tools, f"sqlite:///{tmp_path}/runs.db")
    paused = orch.run(QUERY, plan=plan())

    async def cancel(reason: str) -> Any:
        return await orch.acancel(paused.run_id, reason=reason)

    with pytest.raises(InvalidInput, match=r"reason.*lone surrogate"):
        asyncio.run(cancel("stop \udcff"))
    still = orch.get_run(paused.run_id)
    assert still is not None and still.status == "awaiting_approval"
    assert asyncio.run(cancel("stop")).status == "cancelled"
