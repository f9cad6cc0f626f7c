"""Optional semantic retrieval: the lexical and embedding rankings fused, against a
loopback /v1/embeddings server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from orchestration import Catalog, Orchestrator, OrchestratorConfig, ScriptedLLM
from tests.llm_servers import FakeEmbeddingsServer, free_port_url
from tests.planners.test_selection import big_catalog

QUERY = "Should I pack galoshes for Lisbon?"
TARGET = "meteo.daily_outlook"
PLAN = {"steps": [{"id": "w", "tool": "meteo", "capability": "daily_outlook",
                   "params": {"city": "Lisbon"}}]}
# the toy model's knowledge: these words mean the same thing
CONCEPTS = {"galoshes": "drizzle"}


def catalog() -> Catalog:
    cat = big_catalog(500)
    cat.add_function(lambda city: {"chance": 0.7}, tool="meteo", capability="daily_outlook",
                     description="Drizzle outlook by day, per town.",
                     input_schema={"type": "object", "required": ["city"],
                                   "properties": {"city": {"type": "string"}}})
    return cat


class Run:
    def __init__(self, cat: Catalog, orch: Orchestrator | None = None, **config: Any) -> None:
        self.llm = ScriptedLLM(lambda r: PLAN)
        self.spans = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.orch = orch or Orchestrator(
            catalog=cat, llm=self.llm, registry=CollectorRegistry(), tracer_provider=provider,
            config=OrchestratorConfig(synthesis_enabled=False, planner_max_capabilities=3,
                                      planner_catalog_requests=0, **config))
        self.result = self.orch.run(QUERY)

    def system(self, llm: ScriptedLLM | None = None) -> str:
        return (llm or self.llm).requests_for("plan")[-1].messages[0]["content"]

    def plan_span(self) -> Any:
        return next(s for s in self.spans.get_finished_spans() if s.name == "plan dagwright")


def test_fusion_shows_what_only_the_meaning_matches_and_embeds_the_catalog_once(
        tmp_path: Path) -> None:
    cat = catalog()
    lexical = Run(cat)
    assert f"### {TARGET}" not in lexical.system()  # no shared word: lexical misses it
    with FakeEmbeddingsServer(concepts=CONCEPTS, dimensions=4096) as server:
        settings = {"embeddings_base_url": server.base_url, "embeddings_model": "toy",
                    "embeddings_cache": tmp_path / "vectors.sqlite", "embeddings_batch_size": 256}
        run = Run(cat, **settings)
        assert run.result.status == "succeeded", run.result.error
        assert f"### {TARGET}" in run.system()
        assert run.plan_span().attributes["dagwright.catalog.ranking"] == "hybrid"
        catalog_requests = len(server.requests)
        assert catalog_requests == 2 + 1  # 501 texts in batches of 256, then the query
        # a second run embeds only its query: the vectors are kept per catalog content
        run.orch.run(QUERY)
        assert len(server.requests) == catalog_requests + 1
        assert server.requests[-1].body["input"] == [QUERY]
        # a new process (another orchestrator) finds the vectors in the cache file
        again = Run(cat, **settings)
        assert f"### {TARGET}" in again.system()
        assert len(server.requests) == catalog_requests + 2


def test_an_unreachable_endpoint_falls_back_to_lexical_ranking() -> None:
    run = Run(catalog(), embeddings_base_url=free_port_url() + "/v1", embeddings_model="toy",
              embeddings_timeout_s=2)
    assert run.result.status == "succeeded", run.result.error
    span = run.plan_span()
    assert span.attributes["dagwright.catalog.ranking"] == "lexical"
    [event] = [e for e in span.events if e.name == "catalog_ranking_failed"]
    assert "cannot connect" in event.attributes["error"]
