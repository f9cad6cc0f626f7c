"""Runs in context on the Temporal backend: the context travels into the workflow and out
on every event and in the run store; a session's follow-up, numbered by the client, gets
the earlier runs as workflow input and binds ``{{run:1.where.lat}}`` inside the workflow;
per-run credentials never reach the workflow (refused before anything starts); a saved
workflow's run carries its context and session to the workers as a query's does."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from orchestration import Orchestrator, ScriptedLLM
from orchestration.errors import ConfigError
from orchestration.events import RunEvent
from tests.orchestration.temporal.conftest import RunningWorker
from tests.support.temporal_runs import build_catalog

pytestmark = pytest.mark.temporal

WHERE = {"steps": [{"id": "where", "tool": "geo", "capability": "locate",
                    "params": {"city": "Oslo"}}]}
WEATHER = {"steps": [{"id": "wx", "tool": "weather", "capability": "now",
                      "params": {"lat": "{{run:1.where.lat}}", "lon": "{{run:1.where.lon}}"}}]}


def client_of(worker: RunningWorker) -> Orchestrator:
    return Orchestrator(catalog=build_catalog(), llm=ScriptedLLM([]), config=worker.config,
                        registry=CollectorRegistry(), store=worker.store)


async def test_context_and_a_session_run_on_temporal(temporal_worker: RunningWorker) -> None:
    orch = client_of(temporal_worker)
    session = f"s-{uuid.uuid4().hex[:8]}"
    context: dict[str, Any] = {"tenant": "acme", "user": "ann"}
    events: list[RunEvent] = []
    first = await orch.arun("where is Oslo?", plan=WHERE, context=context, session_id=session,
                            on_event=events.append)
    assert first.status == "succeeded", first.error
    assert (first.context, first.session, first.session_run) == (context, session, 1)
    assert events and all(e.context == context for e in events)

    second = await orch.arun("and the weather there?", plan=WEATHER, context=context,
                             session_id=session)
    assert second.status == "succeeded", second.error
    assert second.session_run == 2
    assert second.steps["wx"].output == {"temp_c": 21.5, "at": [35.68, 139.69]}

    # the workers recorded both in the run store, in context and in the session
    listed = await orch.alist_runs(tenant="acme", user="ann")
    assert {r.run_id for r in listed} == {first.run_id, second.run_id}
    found = await orch.aget_session(session, tenant="acme")
    assert found is not None and [r.session_run for r in found.runs] == [2, 1]
    stored = await orch.aget_events(second.run_id)
    assert stored and all(e.context == context for e in stored)

    with pytest.raises(ConfigError, match="refused on the Temporal backend"):
        await orch.arun("x", plan=WHERE, credentials={"geo": {"Authorization": "Bearer t"}})


async def test_a_saved_workflow_runs_in_context_and_in_a_session_on_temporal(
    temporal_worker: RunningWorker, tmp_path: Path,
) -> None:
    path = tmp_path / "where.json"
    path.write_text(json.dumps({
        "name": "where", "query": "where is {{inputs.city}}?",
        "inputs": {"city": {"type": "string"}},
        "steps": [{"id": "where", "tool": "geo", "capability": "locate",
                   "params": {"city": "{{inputs.city}}"}}]}))
    orch = client_of(temporal_worker)
    session = f"s-{uuid.uuid4().hex[:8]}"
    context: dict[str, Any] = {"tenant": "globex", "user": "bo"}
    events: list[RunEvent] = []
    first = await orch.arun_workflow(path, {"city": "Oslo"}, context=context,
                                     session_id=session, on_event=events.append)
    assert first.status == "succeeded", first.error
    assert (first.plan_source, first.context, first.session_run) == ("workflow", context, 1)
    assert events and all(e.context == context for e in events)
    # a follow-up of the session binds the workflow run's output inside its workflow
    second = await orch.arun("and the weather there?", plan=WEATHER, context=context,
                             session_id=session)
    assert second.status == "succeeded", second.error
    assert second.session_run == 2
    with pytest.raises(ConfigError, match="refused on the Temporal backend"):
        await orch.arun_workflow(path, {"city": "Oslo"},
                                 credentials={"geo": {"Authorization": "Bearer t"}})
