"""Who a run is for: its context is stored with the run (SQLite, PostgreSQL), listed and
filtered, on every span and every event of the run, never a Prometheus label; a bad
context is refused before anything is recorded; a run's own limits replace the budgets."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from orchestration import (
    Catalog,
    InvalidInput,
    Orchestrator,
    OrchestratorConfig,
    RunContext,
    RunLimits,
    ScriptedLLM,
)
from orchestration.events import RunEvent
from tests.orchestration.test_approvals import QUERY, plan
from tests.support.side_effects import SideEffectTools

USER = f"user-{uuid.uuid4().hex[:8]}"


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/runs.db"
    server = request.getfixturevalue("postgres_server")
    return str(server.create_database(f"ctx_{uuid.uuid4().hex[:10]}"))


def test_the_context_is_stored_filtered_and_on_every_span_and_event(
    tools: SideEffectTools, store_url: str,
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    registry = CollectorRegistry()
    script = [json.dumps(plan()), "Paid and filed."]
    orch = Orchestrator(catalog=Catalog.from_dict(tools.catalog(), source="test tools"),
                        llm=ScriptedLLM(script), registry=registry, tracer_provider=provider,
                        config=OrchestratorConfig(store_url=store_url))
    events: list[RunEvent] = []
    try:
        mine = orch.run(QUERY, context=RunContext(tenant="acme", user=USER, plan="pro", seats=3),
                        on_event=events.append)
        assert mine.status == "succeeded", mine.error
        context = {"tenant": "acme", "user": USER, "plan": "pro", "seats": 3}
        assert mine.context == context
        other = orch.run(QUERY, plan=plan(), context={"tenant": "globex", "user": "bob"})
        # stored, listed and filtered
        assert [r.run_id for r in orch.list_runs(tenant="acme")] == [mine.run_id]
        assert [r.run_id for r in orch.list_runs(user="bob")] == [other.run_id]
        assert orch.list_runs(tenant="acme", user="bob") == []
        assert orch.list_runs(tenant="acme")[0].context == context
        assert orch.get_run(mine.run_id).context == context  # type: ignore[union-attr]
        # every event, live and replayed from the store
        assert events and all(e.context == context for e in events)
        assert all(e.context == context for e in orch.get_events(mine.run_id))
    finally:
        orch.close()
    # every span of the run carries it (run, plan, LLM calls, steps, tool calls)
    spans = exporter.get_finished_spans()
    assert {s.name.split()[0] for s in spans} >= {"invoke_agent", "plan", "chat",
                                                  "execute_tool", "GET", "POST"}
    ours = [s for s in exporter.get_finished_spans()
            if s.attributes.get("dagwright.context.user") == USER]
    theirs = [s for s in exporter.get_finished_spans()
              if s.attributes.get("dagwright.context.user") == "bob"]
    assert len(ours) + len(theirs) == len(exporter.get_finished_spans())
    assert all(s.attributes.get("dagwright.context.tenant") == "acme" for s in ours)
    # no context value is a Prometheus label (a user id would make labels without bound)
    labels = {value for metric in registry.collect() for sample in metric.samples
              for value in sample.labels.values()}
    assert not labels & {USER, "bob", "acme", "globex", "pro"}


def test_a_bad_context_is_refused_before_anything_is_recorded(tools: SideEffectTools) -> None:
    orch = Orchestrator(catalog=Catalog.from_dict(tools.catalog(), source="test tools"),
                        llm=ScriptedLLM(["unused"]), registry=CollectorRegistry(),
                        config=OrchestratorConfig(store_url="memory://"))
    bad: list[tuple[Any, str]] = [
        ({"user": {"id": 1}}, "context.user is a dict; a context value is text"),
        ({"bad key": "x"}, "context key 'bad key' is not usable"),
        ({"note": "x" * 300}, "context.note has 300 characters; at most 256"),
        ({"user": 42}, "context.user must be text"),
        ({f"k{i}": i for i in range(40)}, "context has 40 keys; at most 32"),
        ({"n": float("nan")}, "must be finite"),
        ({"line": "a\nb"}, "control character"),
        ("tenant=acme", "context must be a mapping"),
    ]
    try:
        for context, message in bad:
            with pytest.raises(InvalidInput, match=message):
                orch.run(QUERY, plan=plan(), context=context)
        assert orch.list_runs() == []
        assert sum(tools.executed.values()) == 0
    finally:
        orch.close()


def test_a_run_s_own_limits_replace_the_configured_budgets(tools: SideEffectTools) -> None:
    script = [json.dumps(plan()), "Paid and filed."]
    orch = Orchestrator(catalog=Catalog.from_dict(tools.catalog(), source="test tools"),
                        llm=ScriptedLLM(script), registry=CollectorRegistry(),
                        config=OrchestratorConfig(store_url="memory://"))
    try:
        capped = orch.run(QUERY, limits=RunLimits(max_llm_calls_per_run=1))
        assert capped.budget_exceeded is not None
        assert capped.budget_exceeded.setting == "max_llm_calls_per_run of the run's limits"
        assert capped.status != "succeeded"
        with pytest.raises(InvalidInput, match="limits"):
            orch.run(QUERY, limits={"max_llm_calls_per_run": 0})
    finally:
        orch.close()
