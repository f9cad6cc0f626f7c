"""Sessions: runs numbered within their session and tenant, a follow-up's planner shown the
earlier runs (bounded, relevance-cut), and plans that use an earlier run's output with
``{{run:N.step.path}}`` — validated, bound, and usable by layer 4 as upstream evidence."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from orchestration import (
    Catalog,
    InvalidInput,
    Orchestrator,
    OrchestratorConfig,
    ScriptedLLM,
)
from orchestration.llm.base import LLMRequest
from orchestration.sessions import EarlierRun, SessionHistory
from planners._session_view import OUTPUT_CHARS, session_block
from tests.support.side_effects import SideEffectTools

QUOTE = {"steps": [{"id": "quote", "tool": "stocks", "capability": "quote",
                    "params": {"symbol": "TSLA"}}]}
PAY = {"steps": [{"id": "pay", "tool": "bank", "capability": "pay_keyed",
                  "params": {"amount": "{{run:1.quote.price}}", "to": "broker"}}]}


def orchestrator(tools: SideEffectTools, store: str, script: Any, **config: Any) -> Orchestrator:
    return Orchestrator(catalog=Catalog.from_dict(tools.catalog(), source="test tools"),
                        llm=ScriptedLLM(script), registry=CollectorRegistry(),
                        config=OrchestratorConfig(store_url=store, stream_plan=False, **config))


def test_a_follow_up_sees_the_earlier_run_and_uses_its_output(
    tools: SideEffectTools, tmp_path: Path,
) -> None:
    prompts: list[str] = []

    def answer(request: LLMRequest) -> str:
        prompts.append("\n".join(m["content"] for m in request.messages))
        if request.purpose == "plan":
            return json.dumps(QUOTE if len(prompts) == 1 else PAY)
        return "TSLA is at 250." if len(prompts) == 2 else "Paid 250 to the broker."

    orch = orchestrator(tools, f"sqlite:///{tmp_path}/runs.db", answer)
    try:
        first = orch.run("what does a TSLA share cost?", session_id="trip",
                         context={"user": "ann"})
        assert (first.session, first.session_run) == ("trip", 1)
        second = orch.run("buy one of those", session_id="trip", context={"user": "ann"})
        assert second.status == "succeeded", second.error
        assert second.session_run == 2
        # the reference bound to run 1's output, and the call carried it
        assert second.steps["pay"].attempts[-1].params["amount"] == 250.0
        assert tools.executed["/pay_keyed"] == 1
        plan_prompt = prompts[2]
        assert "what does a TSLA share cost?" in plan_prompt  # the earlier query
        assert "TSLA is at 250." in plan_prompt  # its answer
        assert '{{run:1.quote}} (stocks.quote) = {"symbol": "TSLA", "price": 250.0}' in plan_prompt
        assert "{{run:N.step_id.field}}" in plan_prompt  # how to refer to it
        session = orch.get_session("trip")
        assert session is not None
        assert [r.session_run for r in session.runs] == [2, 1]
        assert [r.run_id for r in orch.list_runs(session_id="trip")] == [second.run_id,
                                                                      first.run_id]
        # another tenant's "trip" is another session
        other = orch.run("what does a TSLA share cost?", session_id="trip",
                         context={"tenant": "acme"}, plan=QUOTE)
        assert other.session_run == 1
        assert orch.get_session("trip", tenant="acme").runs[0].run_id == other.run_id  # type: ignore[union-attr]
    finally:
        orch.close()


def test_a_reference_to_no_earlier_output_is_a_plan_issue(
    tools: SideEffectTools, tmp_path: Path,
) -> None:
    orch = orchestrator(tools, f"sqlite:///{tmp_path}/runs.db", ["unused"],
                        synthesis_enabled=False)
    try:
        alone = orch.run("pay", plan=PAY)
        assert alone.status == "failed"
        assert "refers to 'run:1.quote', which is not an output of an earlier run of this " \
               "session (this run has none)" in (alone.error or "")
        orch.run("quote", plan=QUOTE, session_id="s")
        wrong = orch.run("pay", session_id="s", plan={"steps": [
            {"id": "pay", "tool": "bank", "capability": "pay_keyed",
             "params": {"amount": "{{run:1.qoute.price}}", "to": "broker"}}]})
        assert "(known: run:1.quote)" in (wrong.error or "")
        assert tools.executed["/pay_keyed"] == 0
        with pytest.raises(InvalidInput, match="session_id"):
            orch.run("x", plan=QUOTE, session_id="no spaces allowed")
    finally:
        orch.close()


def _run(number: int, outputs: dict[str, Any]) -> EarlierRun:
    return EarlierRun(number=number, run_id=f"r{number}", query=f"question {number}",
                      status="succeeded", answer=f"answer {number} " + "x" * 400,
                      outputs=outputs, capabilities={k: "t.cap" for k in outputs})


def test_the_history_is_bounded_and_cut_by_relevance() -> None:
    runs = [_run(n, {"weather": {"city": "Lisbon", "rain": "x" * 2000},
                     "flights": {"to": "Porto", "fares": list(range(50))}})
            for n in range(1, 31)]
    history = SessionHistory(session_id="s", number=31, runs=runs)
    budget = 4000
    block = session_block(history, "which flights to Porto are cheapest?", budget)
    assert len(block) <= budget + 200  # the budget, plus the header and one line of counts
    assert "question 30" in block and "question 1\n" not in block  # newest turns first
    assert "earlier run(s) of the session not shown" in block
    shown = block.split("most relevant to this request first:\n", 1)[1]
    # the flights outputs share words with the query: they come before the weather ones
    assert shown.index("flights") < shown.index("weather") if "weather" in shown.split(
        "Other outputs")[0] else True
    assert "{{run:30.flights}}" in shown.splitlines()[0]
    # an output is shown at most OUTPUT_CHARS long
    assert all(len(line) < OUTPUT_CHARS + 80 for line in shown.splitlines())
    # always the same for the same session and query (a replay, a resume)
    assert session_block(history, "which flights to Porto are cheapest?", budget) == block


@pytest.mark.parametrize(("claim", "sent"), [("run:1.quote.price", True),
                                             ("run:1.quote.symbol", False)])
def test_layer_4_may_cite_an_earlier_run_and_the_citation_is_checked(
    tools: SideEffectTools, tmp_path: Path, claim: str, sent: bool,
) -> None:
    """A follow-up's reference with a wrong path fails to bind; layer 4 re-resolves the
    value and cites the earlier run's output as its source: the ground stage checks the
    citation against that output (250.0 is at run:1.quote.price, not at .symbol)."""
    def answer(request: LLMRequest) -> Any:
        if request.purpose == "semantic_retry":
            return {"should_retry": True, "is_transient_error": False,
                    "corrected_parameters": {"amount": 250.0, "to": "broker"},
                    "analysis": "the price is in run 1's quote",
                    "provenance": {"amount": {"kind": "upstream", "path": claim}}}
        return "unused"

    orch = orchestrator(tools, f"sqlite:///{tmp_path}/runs.db", answer,
                        synthesis_enabled=False, validation_feedback_enabled=False)
    try:
        orch.run("quote", plan=QUOTE, session_id="g")
        typo = {"steps": [{"id": "pay", "tool": "bank", "capability": "pay_keyed",
                           "params": {"amount": "{{run:1.quote.prize}}", "to": "broker"}}]}
        result = orch.run("buy one", plan=typo, session_id="g")
        pay = result.steps["pay"]
        assert pay.attempts[0].error is not None
        assert pay.attempts[0].error.code == "UNRESOLVED_REFERENCE"
        verdict = pay.attempts[1].provenance["amount"]
        assert verdict.grounded is sent, verdict
        if sent:
            assert result.status == "succeeded" and tools.executed["/pay_keyed"] == 1
        else:
            assert verdict.reason == "value_mismatch"
            assert tools.executed["/pay_keyed"] == 0
    finally:
        orch.close()
