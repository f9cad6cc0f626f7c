"""Large catalogs: the planner prompt stays within budget and offers the relevant capabilities."""

from __future__ import annotations

import itertools
import re
import time
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from orchestration import Catalog, Orchestrator, OrchestratorConfig, ScriptedLLM
from orchestration.llm.base import LLMRequest
from planners._ranking import CatalogIndex, tokenize
from planners.prompt import PromptBuilder

DOMAINS = ["billing", "crm", "inventory", "hr", "shipping", "support", "analytics", "calendar",
           "storage", "mail",
           # for catalogs above 500
           "payroll", "legal", "marketing", "fleet", "assets", "vendors", "training",
           "security", "procurement", "warehouse", "quality", "research", "facilities",
           "compliance"]
VERBS = ["create", "update", "delete", "list", "get", "archive", "export", "import", "search",
         "sync"]
OBJECTS = ["invoice", "customer", "ticket", "employee", "parcel"]

TARGET = "units.temperature_convert"


def big_catalog(n: int = 500) -> Catalog:
    """``n`` capabilities: 499 business operations and one temperature converter."""
    cat = Catalog()
    combos = itertools.islice(itertools.product(DOMAINS, VERBS, OBJECTS), n - 2)
    for domain, verb, obj in combos:
        cat.add_function(
            lambda **kw: {"ok": True}, tool=domain, capability=f"{verb}_{obj}",
            description=f"{verb.capitalize()} a {obj} record in the {domain} system; "
            f"returns the {obj} with its id, owner and timestamps.",
            input_schema={"type": "object", "required": [f"{obj}_id"], "properties": {
                f"{obj}_id": {"type": "string", "description": f"Identifier of the {obj}."},
                "note": {"type": "string", "maxLength": 500},
                "dry_run": {"type": "boolean", "default": False}}},
            output_schema={"type": "object", "properties": {
                "id": {"type": "string"}, "owner": {"type": "string"}}})
    cat.add_function(
        lambda value, source, target: {"value": value}, tool="units",
        capability="temperature_convert",
        description="Convert a temperature between celsius, fahrenheit and kelvin. Look up "
        "scale names with units.scale_info first if unsure.",
        input_schema={"type": "object", "required": ["value", "source", "target"], "properties": {
            "value": {"type": "number"},
            "source": {"type": "string", "enum": ["celsius", "fahrenheit", "kelvin"]},
            "target": {"type": "string", "enum": ["celsius", "fahrenheit", "kelvin"]}}},
        output_schema={"type": "object", "properties": {"value": {"type": "number"}}})
    cat.add_function(lambda name: {"name": name}, tool="units", capability="scale_info",
                     description="Canonical name of a scale.",
                     input_schema={"type": "object", "properties": {"name": {"type": "string"}}})
    assert len(cat) == n
    return cat


CONVERT = {"steps": [{"id": "c", "tool": "units", "capability": "temperature_convert",
                      "params": {"value": 100, "source": "fahrenheit", "target": "celsius"}}]}
QUERY = "What is 100 degrees Fahrenheit in Celsius?"


def sections(system: str) -> tuple[list[str], list[str], list[str]]:
    """The keys a planner prompt shows in full, abridged, and by name only."""
    head, _, rest = system.partition("other capabilities exist but are not shown in full")
    full = re.findall(r"^### (\S+)$", head, re.M)
    abridged_part, _, names_part = rest.partition("by name only, grouped by tool:\n")
    abridged = re.findall(r"^### (\S+)$", abridged_part, re.M)
    table = names_part.split("\n(")[0].split("\nIf the plan needs")[0]
    names = re.findall(r"(?<![\w.])([a-z_]+\.[a-z_]+)(?=, |\n|$)", table)
    return full, abridged, names


MANY = "List, archive and export the parcel and invoice records of every customer"


class Run:
    def __init__(self, catalog: Catalog, plan: Any = CONVERT, query: str = QUERY,
                 **config: Any) -> None:
        self.llm = ScriptedLLM(lambda r: plan)
        self.spans = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.orch = Orchestrator(
            catalog=catalog, llm=self.llm, registry=CollectorRegistry(), tracer_provider=provider,
            config=OrchestratorConfig(**{"synthesis_enabled": False, **config}))
        started = time.perf_counter()
        self.result = self.orch.run(query)
        self.seconds = time.perf_counter() - started

    @property
    def request(self) -> LLMRequest:
        return self.llm.requests_for("plan")[0]

    @property
    def system(self) -> str:
        return self.request.messages[0]["content"]

    def selection_event(self) -> dict[str, Any]:
        span = next(s for s in self.spans.get_finished_spans() if s.name == "plan dagwright")
        event = next(e for e in span.events if e.name == "catalog_selection")
        return dict(event.attributes or {})


@pytest.fixture(scope="module")
def catalog500() -> Catalog:
    return big_catalog(500)


def test_500_capabilities_fit_the_budget_and_keep_the_relevant_one(catalog500: Catalog) -> None:
    run = Run(catalog500, planner_prompt_budget_chars=12_000)
    assert run.result.status == "succeeded", run.result.error
    assert len(run.request.prompt_text) <= 12_000
    assert f"### {TARGET}" in run.system
    # mentioned in the target's description, so pulled in although it scores low
    assert "### units.scale_info" in run.system
    event = run.selection_event()
    assert event["catalog.size"] == 500 and event["catalog.ranked"] is True
    assert event["catalog.offered"] + event["catalog.omitted"] == 500
    assert event["catalog.omitted"] > 400
    names = str(event["catalog.omitted_names"]).split(",")
    # the names left out altogether (the abridged signatures and the names-only table
    # list the others)
    unlisted = event["catalog.omitted"] - event["catalog.compact"] - event["catalog.names"]
    assert event["catalog.names"] > 0
    assert len(names) == 51 and names[-1] == f"… (+{unlisted - 50})"
    assert f"({event['catalog.omitted']} other capabilities exist but are not shown in full" in run.system
    assert event["prompt.chars"] == len(run.request.prompt_text)
    # the structured-output schema offers exactly the capabilities in the prompt
    step = run.request.response_schema["properties"]["steps"]["items"]["properties"]  # type: ignore[index]
    assert "temperature_convert" in step["capability"]["enum"]
    assert run.seconds < 2.0, run.seconds


def test_selection_is_deterministic(catalog500: Catalog) -> None:
    first = Run(catalog500, planner_prompt_budget_chars=9000).request.messages
    second = Run(catalog500, planner_prompt_budget_chars=9000).request.messages
    assert first == second


@pytest.mark.parametrize("guidance", [True, False])
def test_budget_holds_with_and_without_guidance(catalog500: Catalog, guidance: bool) -> None:
    run = Run(catalog500, planner_prompt_budget_chars=6000, prompt_type_guidance=guidance)
    assert len(run.request.prompt_text) <= 6000
    assert f"### {TARGET}" in run.system


def test_max_capabilities_caps_the_list(catalog500: Catalog) -> None:
    run = Run(catalog500, planner_max_capabilities=3)
    full, _, _ = sections(run.system)
    assert len(full) == 2 and TARGET in full  # the two the query matches
    run = Run(catalog500, query=MANY, planner_max_capabilities=3)
    full, abridged, _ = sections(run.system)
    assert len(full) == 3 and len(abridged) > 10  # the rest of the matches abridged
    assert run.selection_event()["catalog.omitted"] == 497


def test_small_catalog_is_shown_whole_without_ranking() -> None:
    run = Run(big_catalog(12))
    event = run.selection_event()
    assert event["catalog.ranked"] is False and event["catalog.omitted"] == 0
    assert event["catalog.omitted_names"] == ""
    assert run.system.count("\n### ") == 12
    assert "other capabilities exist" not in run.system


def test_plan_may_use_a_capability_left_out_of_the_prompt(catalog500: Catalog) -> None:
    plan = {"steps": [{"id": "x", "tool": "mail", "capability": "list_parcel",
                       "params": {"parcel_id": "p1"}}]}
    run = Run(catalog500, plan=plan, planner_max_capabilities=2)
    full, abridged, _ = sections(run.system)
    assert "mail.list_parcel" not in full + abridged
    assert run.result.status == "succeeded", run.result.error


def test_ranking_prefers_rare_matching_terms_and_splits_identifiers() -> None:
    cat = Catalog()
    for tool, name, text in [("billing", "create_invoice", "Create an invoice."),
                             ("units", "convertTemperature", "Convert between scales."),
                             ("crm", "create_customer", "Create a customer record.")]:
        cat.add_function(lambda: {}, tool=tool, capability=name, description=text)
    index = CatalogIndex(list(cat))
    scores = index.scores("Convert Celsius temperatures, please")
    assert set(scores) == {1} and scores[1] > 0
    assert index.ranked("new customer")[0] == 2
    assert tokenize("getWeatherForecasts HTTPServer snake_case") == [
        "weather", "forecast", "http", "server", "snake", "case"]
    # stemming: the forms of a word meet
    assert tokenize("forecasting") == tokenize("forecasts") == tokenize("forecast")


def test_what_does_not_fit_in_full_is_listed_by_name_within_the_budget(
        catalog500: Catalog) -> None:
    # 500 names take ~11,000 characters: more than a 12,000 budget can give them, so the
    # next best get an abridged signature and the best after those their name only
    run = Run(catalog500, query=MANY, planner_prompt_budget_chars=12_000)
    assert len(run.request.prompt_text) <= 12_000
    full, abridged, names = sections(run.system)
    event = run.selection_event()
    assert len(full) == event["catalog.offered"] >= 3
    assert len(abridged) == event["catalog.compact"] >= 5
    blocks = run.system.split("parameter names and types only")[1].split("\n\n### ")[1:]
    for block in blocks[:-1]:  # key, first sentence, parameters on one line
        key, line, params = block.split("\n")
        assert key in abridged and len(line) <= 110 and params.startswith("params: {")
    assert len(names) == event["catalog.names"] >= 100
    listed = [*full, *abridged, *names]
    assert len(set(listed)) == len(listed)  # each listed once
    unlisted = 500 - len(listed)
    assert unlisted > 0 and f"({unlisted} more are not listed: ask with a search text.)" in run.system
    assert "2 more time(s)" in run.system  # and the planner is told it may ask for them


def test_every_name_is_listed_when_the_names_fit() -> None:
    """A catalog whose names fit in the budget is named whole: signatures for the best
    ranked, every other capability by name, grouped by tool, none twice."""
    catalog = big_catalog(500)
    run = Run(catalog, query=MANY, planner_prompt_budget_chars=24_000)
    assert len(run.request.prompt_text) <= 24_000
    system = run.system
    assert "Every other capability, by name only, grouped by tool:" in system
    assert "more are not listed" not in system
    full, abridged, names = sections(system)
    assert full and abridged
    assert sorted([*full, *abridged, *names]) == sorted(c.key for c in catalog)
    # grouped by tool: a line holds one tool's names
    table = system.split("grouped by tool:\n")[1]
    for line in table.split("\n"):
        if re.fullmatch(r"[a-z_]+\.[a-z_]+(, [a-z_]+\.[a-z_]+)*", line):
            assert len({key.split(".")[0] for key in line.split(", ")}) == 1
    event = run.selection_event()
    assert event["catalog.names"] == len(names) and event["catalog.compact"] == len(abridged)
    assert event["catalog.omitted_names"] == ""  # nothing is left unnamed


def test_a_capability_needing_an_id_brings_the_search_that_finds_it() -> None:
    cat = big_catalog(200)
    cat.add_function(lambda **kw: {}, tool="films", capability="movie_credits",
                     description="Cast and crew of a film.",
                     input_schema={"type": "object", "required": ["movie_id"],
                                   "properties": {"movie_id": {"type": "integer"}}})
    cat.add_function(lambda **kw: {}, tool="films", capability="search_movies",
                     description="Find titles by text.",
                     input_schema={"type": "object", "properties": {"query": {"type": "string"}}})
    cat.add_function(lambda **kw: {}, tool="films", capability="search_people",
                     description="Find people by name.",
                     input_schema={"type": "object", "properties": {"query": {"type": "string"}}})
    run = Run(cat, planner_max_capabilities=2)
    full, abridged, _ = sections(run.system)
    assert "films.movie_credits" not in full + abridged  # unrelated query: not pulled in
    llm = ScriptedLLM(lambda r: {"steps": []})
    Orchestrator(catalog=cat, llm=llm, registry=CollectorRegistry(),
                 config=OrchestratorConfig(synthesis_enabled=False, planner_max_capabilities=2,
                                           planner_max_retries=0)).run(
        "Who played in the cast of Heat?")
    full, _, _ = sections(llm.requests_for("plan")[0].messages[0]["content"])
    assert "films.movie_credits" in full and "films.search_movies" in full
    assert "films.search_people" not in full


def test_prefixes_and_words_of_one_need_are_matched_below_exact_words() -> None:
    cat = Catalog()
    for tool, name, text in [
            ("markets", "coin_prices", "Prices of cryptocurrencies."),
            ("meteo", "daily_outlook", "Daily forecast with precipitation chance."),
            ("meteo", "umbrella_stock", "Umbrella stock in our shop."),
            ("crm", "create_customer", "Create a customer record.")]:
        cat.add_function(lambda: {}, tool=tool, capability=name, description=text)
    index = CatalogIndex(list(cat))
    assert index.ranked("what is crypto doing today")[0] == 0  # crypto → cryptocurrencies
    # umbrella: the exact word first, then the need it stands for (weather)
    assert index.ranked("do I need an umbrella tomorrow")[:2] == [2, 1]
    assert 3 not in index.scores("do I need an umbrella tomorrow")


def test_the_index_is_built_once_per_catalog_content(catalog500: Catalog) -> None:
    builder = PromptBuilder()
    first = builder.selection_index(catalog500.snapshot(), True)
    assert builder.selection_index(catalog500.snapshot(), True) is first  # same objects
    changed = catalog500.snapshot()
    changed.add_function(lambda: {}, tool="units", capability="new_one", description="New.")
    assert builder.selection_index(changed, True) is not first


def test_every_name_of_a_large_catalog_is_in_the_first_prompt_at_the_default_budget() -> None:
    """1,200 capabilities, default configuration: the first prompt stays within the
    budget and names every capability (in full or in the names-only table)."""
    catalog = big_catalog(1200)
    run = Run(catalog)
    budget = OrchestratorConfig().planner_prompt_budget_chars
    assert len(run.request.prompt_text) <= budget
    full, abridged, names = sections(run.system)
    assert sorted([*full, *abridged, *names]) == sorted(c.key for c in catalog)
    event = run.selection_event()
    assert event["catalog.offered"] + event["catalog.compact"] + event["catalog.names"] == 1200
    assert TARGET in full


def test_the_other_operations_of_the_best_matching_tool_come_next() -> None:
    """A request that names one operation of a service often needs its neighbours: the
    other capabilities of the best-ranked tools are lifted above unrelated ones even
    when their own texts share no word with the request."""
    cat = big_catalog(400)
    cat.add_function(lambda **kw: {}, tool="parcels", capability="track_parcel",
                     description="Track a parcel by its tracking number.",
                     input_schema={"type": "object", "properties": {
                         "number": {"type": "string"}}})
    cat.add_function(lambda **kw: {}, tool="parcels", capability="history",
                     description="Events so far.",
                     input_schema={"type": "object", "properties": {"n": {"type": "string"}}})
    index = CatalogIndex(list(cat))
    keys = [c.key for c in index.capabilities]
    query = "track my parcel 1Z999 and tell me what happened to it on the way"
    ranked = [keys[p] for p in index.ranked(query)]
    assert ranked[0] == "parcels.track_parcel"
    assert ranked.index("parcels.history") < 5
    # by its own words it would rank far below
    own = index.scores(query)
    alone = [keys[p] for p in sorted(own, key=lambda p: (-own[p], p))]
    assert "parcels.history" not in alone[:50]
