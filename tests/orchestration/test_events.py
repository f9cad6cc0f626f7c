"""Run events: typed, numbered, in order, stored with the run; a bad callback never hurts."""

from __future__ import annotations

import itertools
import logging
from typing import Any

import pytest

from orchestration import Approval, Catalog, Orchestrator, OrchestratorConfig, RunEvent, ScriptedLLM
from tests.orchestration.test_approvals import QUERY, approval_catalog, plan
from tests.support.side_effects import SideEffectTools


def orchestrator(tools: SideEffectTools, spec: dict[str, Any] | None = None) -> Orchestrator:
    cfg = OrchestratorConfig(store_url="memory://", synthesis_enabled=False)
    return Orchestrator(catalog=Catalog.from_dict(spec or tools.catalog(), source="t"),
                        llm=ScriptedLLM(["unused"]), config=cfg)


def test_events_arrive_in_order_with_their_facts(tools: SideEffectTools) -> None:
    seen: list[RunEvent] = []
    result = orchestrator(tools).run(QUERY, plan=plan(), on_event=seen.append)

    assert [e.seq for e in seen] == list(range(1, len(seen) + 1))
    assert {e.run_id for e in seen} == {result.run_id}
    assert seen[0].type == "plan_ready" and seen[0].data["steps"] == 4
    assert seen[-1].type == "run_finished" and seen[-1].data["status"] == "succeeded"
    by_step: dict[str, list[str]] = {}
    for event in seen:
        if "step_id" in event.data:
            by_step.setdefault(event.data["step_id"], []).append(event.type)
    assert by_step["pay"] == ["step_started", "attempt_finished", "step_finished"]
    pay_attempt = next(e for e in seen if e.type == "attempt_finished" and e.data["step_id"] == "pay")
    assert (pay_attempt.data["layer"], pay_attempt.data["outcome"]) == ("plan", "succeeded")
    # a step starts only after the steps it depends on finished
    order = [(e.type, e.data.get("step_id")) for e in seen]
    assert order.index(("step_finished", "quote")) < order.index(("step_started", "pay"))
    assert all(b.at >= a.at for a, b in itertools.pairwise(seen))


async def test_astream_yields_the_events_and_a_late_reader_replays_them(
    tools: SideEffectTools,
) -> None:
    orch = orchestrator(tools)
    streamed = [event async for event in orch.astream(QUERY, plan=plan(), run_id="streamed")]
    assert streamed[-1].type == "run_finished"
    stored = await orch.aget_events("streamed")
    assert [e.model_dump() for e in stored] == [e.model_dump() for e in streamed]
    assert [e.seq for e in await orch.aget_events("streamed", after=3)] == list(
        range(4, len(streamed) + 1))
    await orch.aclose()


async def test_a_callback_that_raises_is_logged_once_and_the_run_goes_on(
    tools: SideEffectTools, caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[int] = []

    def broken(event: RunEvent) -> None:
        calls.append(event.seq)
        raise RuntimeError("the consumer is broken")

    seen: list[RunEvent] = []

    async def slow_but_fine(event: RunEvent) -> None:
        seen.append(event)

    orch = orchestrator(tools)
    with caplog.at_level(logging.ERROR, logger="dagwright.events"):
        result = await orch.arun(QUERY, plan=plan(), on_event=broken)
        other = await orch.arun(QUERY, plan=plan(), on_event=slow_but_fine)
    assert result.status == "succeeded" and other.status == "succeeded"
    assert calls == [1]  # it got the first event, then nothing more
    assert sum("on_event callback raised" in r.getMessage() for r in caplog.records) == 1
    assert seen[-1].type == "run_finished"  # async callbacks get every event, in order
    await orch.aclose()


def test_an_approval_is_an_event_and_numbering_continues_on_resume(tools: SideEffectTools) -> None:
    orch = orchestrator(tools, approval_catalog(tools))
    first: list[RunEvent] = []
    paused = orch.run(QUERY, plan=plan(), on_event=first.append)
    required = [e for e in first if e.type == "approval_required"]
    assert [e.data["step_id"] for e in required] == ["pay"]
    assert required[0].data["params"] == {"amount": 250.0, "to": "broker"}
    assert first[-1].data["status"] == "awaiting_approval"

    later: list[RunEvent] = []
    orch.resume(paused.run_id, approvals={"pay": Approval(approved=True)}, on_event=later.append)
    assert later[0].seq == first[-1].seq + 1
    assert [e.seq for e in orch.get_events(paused.run_id)] == list(range(1, later[-1].seq + 1))
