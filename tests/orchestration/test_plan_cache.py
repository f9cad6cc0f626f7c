"""The plan cache (ORCH_PLAN_CACHE): a query asked again runs the plan of an earlier run
without a planning LLM call — planned by a real OpenAI-protocol server on 127.0.0.1,
run against the demo tools over HTTP, kept in real SQLite and PostgreSQL stores."""

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

from orchestration import Catalog, Orchestrator, OrchestratorConfig, ScriptedLLM
from orchestration._plan_cache import PlanCache, normalise_query
from orchestration.clock import ManualClock
from orchestration.demo.tools import DemoTools, Status
from orchestration.events import RunEvent
from orchestration.llm.openai_compat import OpenAICompatibleClient
from orchestration.store import open_store
from orchestration.store._base import CachedPlan
from tests.llm_servers import FakeOpenAIServer

WEATHER_PLAN = {"steps": [
    {"id": "geo", "tool": "weather", "capability": "geocode", "params": {"location": "Paris"}},
    {"id": "fc", "tool": "weather", "capability": "forecast",
     "params": {"lat": "{{geo.lat}}", "lon": "{{geo.lon}}", "days": 2}},
]}
QUERY = "Weather in Paris for 2 days?"


class ShiftedClock(ManualClock):
    """Wall time that a test moves forward (the cache's TTL is wall time)."""

    def __init__(self) -> None:
        super().__init__()
        self.offset = 0.0

    def time(self) -> float:
        return super().time() + self.offset


def orchestrator(catalog: Catalog, llm: Any, store_url: str, registry: CollectorRegistry,
                 **config: Any) -> Orchestrator:
    settings = {"plan_cache": True, "store_url": store_url, "synthesis_enabled": False,
                **config}
    return Orchestrator(catalog, llm, OrchestratorConfig(**settings), registry=registry)


def openai_llm(server: FakeOpenAIServer, model: str = "test-model") -> OpenAICompatibleClient:
    return OpenAICompatibleClient(base_url=server.base_url, model=model, api_key="sk-test")


def test_the_same_query_again_runs_the_cached_plan_without_a_planning_call(
    openai_server: FakeOpenAIServer, demo_tools: DemoTools, demo_catalog: Catalog,
    registry: CollectorRegistry, tmp_path: Path,
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    openai_server.answer(json.dumps(WEATHER_PLAN))
    orch = Orchestrator(demo_catalog, openai_llm(openai_server), OrchestratorConfig(
        plan_cache=True, store_url=f"sqlite:///{tmp_path}/runs.db", synthesis_enabled=False),
        registry=registry, tracer_provider=provider)

    first = orch.run(QUERY)
    assert first.status == "succeeded" and first.plan_source == "llm"
    assert len(openai_server.requests) == 1

    events: list[RunEvent] = []
    second = orch.run("  Weather in   Paris for 2 days?", on_event=events.append)
    assert second.status == "succeeded"
    assert second.plan_source == "cache"
    assert len(openai_server.requests) == 1  # no planning call
    assert second.usage.llm_calls == 0
    assert [s["id"] for s in second.plan["steps"]] == ["geo", "fc"]  # type: ignore[index]
    assert second.outputs() == first.outputs()
    ready = next(e for e in events if e.type == "plan_ready")
    assert ready.data["source"] == "cache"
    runs = [s for s in exporter.get_finished_spans() if s.name.startswith("invoke_agent")]
    assert runs[-1].attributes is not None
    assert runs[-1].attributes["dagwright.plan.source"] == "cache"
    outcomes = [e.attributes["outcome"] for s in runs for e in s.events  # type: ignore[index]
                if e.name == "plan_cache"]
    assert outcomes == ["miss", "stored", "hit"]
    counted = {o: registry.get_sample_value("orchestration_plan_cache_total", {"outcome": o})
               for o in ("miss", "stored", "hit")}
    assert counted == {"miss": 1.0, "stored": 1.0, "hit": 1.0}


def test_case_is_part_of_the_query_and_the_cache_is_off_by_default(
    demo_tools: DemoTools, demo_catalog: Catalog, registry: CollectorRegistry,
) -> None:
    llm = ScriptedLLM([WEATHER_PLAN] * 3)
    orch = orchestrator(demo_catalog, llm, "memory://", registry)
    orch.run(QUERY)
    assert orch.run(QUERY.lower()).plan_source == "llm"  # another query: planned
    off = Orchestrator(demo_catalog, llm, OrchestratorConfig(synthesis_enabled=False),
                       registry=CollectorRegistry())
    assert off.run(QUERY).plan_source == "llm"
    assert len(llm.requests) == 3
    assert normalise_query(" a\u00a0 b\tc ") == "a b c"


def test_a_plan_is_kept_for_its_ttl_only(demo_tools: DemoTools, demo_catalog: Catalog,
                                         registry: CollectorRegistry) -> None:
    llm = ScriptedLLM([WEATHER_PLAN] * 2)
    clock = ShiftedClock()
    orch = Orchestrator(demo_catalog, llm, OrchestratorConfig(
        plan_cache=True, plan_cache_ttl_s=60, synthesis_enabled=False), registry=registry,
        clock=clock)
    orch.run(QUERY)
    clock.offset = 59
    assert orch.run(QUERY).plan_source == "cache"
    clock.offset = 61
    assert orch.run(QUERY).plan_source == "llm"
    assert len(llm.requests) == 2


def test_a_changed_catalog_or_model_is_planned_again_and_processes_share_the_store(
    demo_tools: DemoTools, registry: CollectorRegistry, tmp_path: Path,
) -> None:
    store = f"sqlite:///{tmp_path}/runs.db"
    llm = ScriptedLLM([WEATHER_PLAN] * 3)
    data = demo_tools.catalog_dict()
    orchestrator(Catalog.from_dict(data), llm, store, registry).run(QUERY)
    # another orchestrator on the same store, same catalog: the plan is shared
    other = orchestrator(Catalog.from_dict(data), llm, store, CollectorRegistry())
    assert other.run(QUERY).plan_source == "cache"
    # a description changed: the catalog's fingerprint differs, the old plan is not served
    data["tools"][2]["capabilities"][0]["description"] += " (now with districts)"
    changed = orchestrator(Catalog.from_dict(data), llm, store, CollectorRegistry())
    assert changed.run(QUERY).plan_source == "llm"
    # another planner model
    moved = orchestrator(Catalog.from_dict(data), ScriptedLLM([WEATHER_PLAN], model="other"),
                         store, CollectorRegistry())
    assert moved.run(QUERY).plan_source == "llm"
    assert len(llm.requests) == 2


def test_the_plan_of_a_run_that_failed_is_not_kept(demo_tools: DemoTools,
                                                   demo_catalog: Catalog,
                                                   registry: CollectorRegistry) -> None:
    llm = ScriptedLLM([WEATHER_PLAN] * 2)
    orch = orchestrator(demo_catalog, llm, "memory://", registry, retry_max_attempts=1,
                        semantic_retry_enabled=False)
    demo_tools["weather"].inject("/forecast", Status(500, "boom"))
    assert orch.run(QUERY).status == "partial"
    assert orch.run(QUERY).plan_source == "llm"  # planned again
    assert len(llm.requests) == 2


def test_different_tenants_never_share_a_plan(demo_catalog: Catalog) -> None:
    key_a = PlanCache.key(QUERY, demo_catalog, "m", "p", tenant="acme")
    key_b = PlanCache.key(QUERY, demo_catalog, "m", "p", tenant="globex")
    key_none = PlanCache.key(QUERY, demo_catalog, "m", "p")
    assert len({key_a.digest, key_b.digest, key_none.digest}) == 3


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/runs.db"
    server = request.getfixturevalue("postgres_server")
    return str(server.create_database(f"cache_{uuid.uuid4().hex[:10]}"))


async def test_each_store_keeps_plans_until_they_expire(store_url: str) -> None:
    store = open_store(store_url)
    await store.open()
    try:
        entry = CachedPlan(key="k1", plan_json='{"steps": []}', query="q", catalog="c",
                           model="m", prompt_version="p", tenant=None, created_at=100.0,
                           expires_at=200.0)
        await store.put_cached_plan(entry, now=100.0)
        assert await store.get_cached_plan("k1", now=150.0) == entry
        assert await store.get_cached_plan("k1", now=200.0) is None
        assert await store.get_cached_plan("other", now=150.0) is None
        # keeping another plan drops the expired ones
        later = CachedPlan(key="k2", plan_json="{}", query="q2", catalog="c", model="m",
                           prompt_version="p", tenant="t", created_at=300.0, expires_at=400.0)
        await store.put_cached_plan(later, now=300.0)
        assert await store.get_cached_plan("k1", now=0.0) is None
        assert await store.clear_cached_plans() == 1
    finally:
        await store.close()


def test_a_tenants_cached_plan_is_never_another_tenants(
    demo_tools: DemoTools, demo_catalog: Catalog, registry: CollectorRegistry,
) -> None:
    llm = ScriptedLLM([WEATHER_PLAN] * 4)
    orch = orchestrator(demo_catalog, llm, "memory://", registry)
    acme = {"tenant": "acme", "user": "ann"}
    assert orch.run(QUERY, context=acme).plan_source == "llm"
    # the same query for another tenant, and for a run of no tenant: each plans afresh
    globex = orch.run(QUERY, context={"tenant": "globex"})
    assert globex.status == "succeeded" and globex.plan_source == "llm"
    assert orch.run(QUERY).plan_source == "llm"
    assert len(llm.requests) == 3
    # the first tenant again (another of its users): its own plan, no planning call
    again = orch.run(QUERY, context={"tenant": "acme", "user": "bob"})
    assert again.plan_source == "cache" and again.usage.llm_calls == 0
    assert orch.run(QUERY, context={"tenant": "globex"}).plan_source == "cache"
    assert len(llm.requests) == 3


def test_a_follow_up_in_a_session_neither_takes_nor_keeps_a_cached_plan(
    demo_tools: DemoTools, demo_catalog: Catalog, registry: CollectorRegistry,
) -> None:
    llm = ScriptedLLM([WEATHER_PLAN] * 4)
    orch = orchestrator(demo_catalog, llm, "memory://", registry)
    assert orch.run(QUERY).plan_source == "llm"  # kept
    # a session's first run has no history: planned from its query alone, so cached
    first = orch.run(QUERY, session_id="chat-1")
    assert (first.session_run, first.plan_source) == (1, "cache")
    # a follow-up's planner sees run 1: the same words are another question there
    follow_up = orch.run(QUERY, session_id="chat-1")
    assert (follow_up.session_run, follow_up.plan_source) == (2, "llm")
    assert len(llm.requests) == 2
    # ... and its plan was not kept for the query alone
    other = "Weather in Paris, 2 days"
    assert orch.run(other, session_id="chat-1").plan_source == "llm"
    assert orch.run(other).plan_source == "llm"
    assert len(llm.requests) == 4
    assert registry.get_sample_value("orchestration_plan_cache_total",
                                     {"outcome": "skipped"}) == 2.0
