"""One engine, two backends: the same plan gives the same RunResult locally and on Temporal.

Each plan of :data:`tests.support.temporal_runs.PLANS` runs through an
:class:`Orchestrator` with the local backend and through one with ``backend="temporal"``
(a real dev server, a worker in this process), against the same tools and the same
scripted LLM. Everything but timings must be equal: statuses, outputs, errors, every
attempt (layer, parameters, outcome, coercions, delay, analysis), the answer, LLM usage —
down to the JSON text of ``RunResult.to_dict()`` (a tool's key order, the plan's; numbers
formatted alike: Temporal's default converter sorted every dict's keys) — and the tools
must have executed exactly the same calls. Each plan's own expectation is
asserted too, so two equally broken backends cannot pass.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from orchestration import Orchestrator, RunEvent, ScriptedLLM
from tests.orchestration.temporal.conftest import RunningWorker
from tests.support import temporal_runs
from tests.support.temporal_runs import (
    PLANS,
    answer,
    build_catalog,
    comparable,
    comparable_json,
    engine_config,
    timing_types,
)

pytestmark = pytest.mark.temporal

EXPECTED: dict[str, tuple[str, dict[str, list[str]]]] = {
    # plan: run status, {step: attempt layers}
    "weather": ("succeeded", {"where": ["plan"], "wx": ["plan"]}),
    "coerced": ("succeeded", {"wx": ["plan"]}),
    "planned": ("succeeded", {"where": ["plan"], "wx": ["plan"]}),
    "corrected": ("succeeded", {"stock": ["plan", "validation_feedback"]}),
    "resolved": ("succeeded", {"where": ["plan", "semantic_retry"], "wx": ["plan"]}),
    "flaky": ("succeeded", {"get": ["plan", "resilience"]}),
    "side_effect": ("failed", {"pay": ["plan"], "file": []}),
    "fan": ("partial", {"a": ["plan"], "b": ["plan", "resilience"], "c": ["plan"],
                        "d": ["plan"], "e": []}),
}


def event_facts(event: RunEvent) -> tuple[Any, ...]:
    data = event.data
    return (event.type, data.get("step_id"), data.get("status"), data.get("attempt"),
            data.get("layer"), data.get("outcome"), data.get("error_code"), data.get("reason"))


async def run_local(query: str, plan: dict[str, Any] | None,
                    run_id: str) -> tuple[Any, list[RunEvent], Counter[str]]:
    temporal_runs.reset()
    orch = Orchestrator(catalog=build_catalog(), llm=ScriptedLLM(answer), config=engine_config(),
                        registry=CollectorRegistry())
    events: list[RunEvent] = []
    result = await orch.arun(query, plan=plan, run_id=run_id, on_event=events.append)
    return result, events, Counter(temporal_runs.CALLS)


@pytest.mark.parametrize("name", sorted(PLANS))
async def test_the_same_plan_gives_the_same_result_on_both_backends(
    name: str, temporal_worker: RunningWorker,
) -> None:
    query, plan = PLANS[name]
    run_id = f"parity-{name}-{uuid.uuid4().hex[:8]}"  # the same on both: keys derive from it
    expected, expected_events, expected_calls = await run_local(query, plan, run_id)

    temporal_runs.reset()
    orch = Orchestrator(catalog=build_catalog(), llm=ScriptedLLM([]), config=temporal_worker.config,
                        registry=CollectorRegistry())
    events: list[RunEvent] = []
    result = await orch.arun(query, plan=plan, run_id=run_id, on_event=events.append)

    assert comparable(result) == comparable(expected)
    # the same JSON text: keys in the same order (a tool's, the plan's), numbers alike
    assert comparable_json(result) == comparable_json(expected)
    assert timing_types(result) == timing_types(expected) == {"float"}
    assert expected_calls == temporal_runs.CALLS  # the same calls reached the tools
    status, layers = EXPECTED[name]
    assert result.status == status, result.error
    assert {sid: [a.layer for a in s.attempts] for sid, s in result.steps.items()} == layers
    # the events: the same facts (concurrent steps may interleave differently), numbered 1..n;
    # the answer is not streamed out of a workflow, so answer_delta events are local only
    expected_events = [e for e in expected_events if e.type != "answer_delta"]
    assert sorted(map(event_facts, events), key=repr) == sorted(map(event_facts, expected_events), key=repr)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert events[-1].type == "run_finished" and events[-1].data["status"] == status


async def test_each_plan_shows_the_layer_it_is_about(temporal_worker: RunningWorker) -> None:
    """What the parity plans are there for, seen on the Temporal backend."""
    orch = Orchestrator(catalog=build_catalog(), llm=ScriptedLLM([]), config=temporal_worker.config,
                        registry=CollectorRegistry())
    names = ["coerced", "corrected", "resolved", "side_effect", "planned"]
    results = dict(zip(names, await asyncio.gather(*(orch.arun(PLANS[n][0], plan=PLANS[n][1])
                                                    for n in names)), strict=True))
    wx = results["coerced"].steps["wx"]
    assert [c.path for c in wx.attempts[0].coercions] == ["$.lat", "$.lon"]
    assert wx.attempts[0].params == {"lat": 35.5, "lon": 139}
    stock = results["corrected"].steps["stock"]
    assert stock.attempts[0].error is not None and stock.attempts[0].error.code == "BAD_SKU"
    assert stock.attempts[1].params == {"sku": "ABC-12"} and stock.output == {"sku": "ABC-12", "stock": 7}
    where = results["resolved"].steps["where"]
    assert where.attempts[1].params == {"city": "Paris"} and where.attempts[1].analysis
    pay = results["side_effect"].steps["pay"]
    assert pay.status == "failed" and len(pay.attempts) == 1  # a side effect is not re-sent
    assert "not re-sent" in (pay.error.details.get("gave_up") if pay.error else "")
    assert results["side_effect"].steps["file"].status == "skipped"
    planned = results["planned"].plan
    assert planned is not None
    assert [(s["id"], s["params"]) for s in planned["steps"]] == [
        (s["id"], s["params"]) for s in temporal_runs.PLANNED["steps"]]
    assert results["planned"].usage.by_purpose["plan"]["calls"] == 1
    assert results["planned"].answer == "Here is what I found."
    assert temporal_runs.CALLS["bank.pay"] == 1
