"""Answers without an LLM: the ``template`` and ``raw`` synthesis strategies, chosen per
run or by ORCH_SYNTHESIS_STRATEGY, over real HTTP demo tools."""

from __future__ import annotations

import json
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from orchestration import Catalog, CatalogError, InvalidInput, Orchestrator, OrchestratorConfig, ScriptedLLM
from orchestration.demo.tools import DemoTools
from orchestration.events import RunEvent

WEATHER_PLAN = {"steps": [
    {"id": "geo", "tool": "weather", "capability": "geocode", "params": {"location": "Paris"}},
    {"id": "fc", "tool": "weather", "capability": "forecast",
     "params": {"lat": "{{geo.lat}}", "lon": "{{geo.lon}}", "days": 2}},
]}
FORECAST_TEMPLATE = (
    "{{ params.days }}-day forecast at {{ output.lat }},{{ output.lon }}:\n"
    "{% for d in output.daily %}- day {{ d.day }}: {{ d.condition }}, "
    "{{ d.temp_min }} to {{ d.temp_max }} °C\n{% endfor %}")


def catalog_with(tools: DemoTools, **templates: str) -> Catalog:
    """The demo catalog with ``answer_template`` set on the named capabilities."""
    data = tools.catalog_dict()
    for tool in data["tools"]:
        for cap in tool["capabilities"]:
            key = f"{tool['name']}_{cap['name']}"
            if key in templates:
                cap["answer_template"] = templates[key]
    return Catalog.from_dict(data, source="demo")


def orch(catalog: Catalog, registry: CollectorRegistry, **config: Any) -> tuple[Orchestrator, ScriptedLLM]:
    llm = ScriptedLLM([WEATHER_PLAN, "an LLM answer"])
    return Orchestrator(catalog, llm, OrchestratorConfig(**config), registry=registry), llm


def test_capability_templates_answer_a_planned_run_without_an_llm_call(
    demo_tools: DemoTools, registry: CollectorRegistry,
) -> None:
    catalog = catalog_with(demo_tools, weather_forecast=FORECAST_TEMPLATE)
    orchestrator, llm = orch(catalog, registry)
    result = orchestrator.run("Weather in Paris for 2 days?", synthesis="template")
    assert result.status == "succeeded"
    assert result.answer == ("2-day forecast at 48.8566,2.3522:\n"
                             "- day 1: rain, 4.4 to 12.4 °C\n- day 2: sunny, 1.0 to 9.0 °C")
    assert result.answer_strategy == "template"
    assert [r.purpose for r in llm.requests] == ["plan"]  # no synthesis call
    assert "synthesis" not in result.usage.by_purpose


def test_raw_answers_are_the_step_outputs_as_json(demo_tools: DemoTools,
                                                  registry: CollectorRegistry) -> None:
    orchestrator, llm = orch(Catalog.from_dict(demo_tools.catalog_dict()), registry,
                             synthesis_strategy="raw")
    result = orchestrator.run("Weather in Paris for 2 days?")
    assert json.loads(result.answer or "") == result.outputs()
    assert result.answer_strategy == "raw" and len(llm.requests) == 1


def test_a_run_may_choose_the_llm_when_the_default_is_raw(demo_tools: DemoTools,
                                                        registry: CollectorRegistry) -> None:
    orchestrator, llm = orch(Catalog.from_dict(demo_tools.catalog_dict()), registry,
                             synthesis_strategy="raw")
    result = orchestrator.run("Weather in Paris for 2 days?", synthesis="llm")
    assert result.answer == "an LLM answer"
    assert [r.purpose for r in llm.requests] == ["plan", "synthesis"]


def test_template_strategy_without_a_template_answers_raw_and_says_so(
    demo_tools: DemoTools, registry: CollectorRegistry,
) -> None:
    orchestrator, _ = orch(Catalog.from_dict(demo_tools.catalog_dict()), registry,
                           synthesis_strategy="template")
    result = orchestrator.run("Weather in Paris for 2 days?")
    assert json.loads(result.answer or "") == result.outputs()
    assert result.answer_strategy == "raw"
    assert any("found no template" in w for w in result.warnings)


def test_a_template_whose_value_is_missing_gives_no_answer_and_a_warning(
    demo_tools: DemoTools, registry: CollectorRegistry,
) -> None:
    catalog = catalog_with(demo_tools, weather_forecast="{{ output.humidity }}%")
    orchestrator, _ = orch(catalog, registry)
    result = orchestrator.run("Weather in Paris for 2 days?", synthesis="template")
    assert result.status == "succeeded" and result.answer is None
    assert any("weather.forecast" in w and "humidity" in w for w in result.warnings), result.warnings


def test_templates_are_sandboxed(demo_tools: DemoTools, registry: CollectorRegistry) -> None:
    catalog = catalog_with(demo_tools, weather_forecast="{{ output.__class__.__mro__ }}")
    orchestrator, _ = orch(catalog, registry)
    result = orchestrator.run("Weather in Paris for 2 days?", synthesis="template")
    assert result.answer is None
    assert any("unsafe" in w for w in result.warnings), result.warnings


def test_a_watched_run_gets_the_template_answer_as_one_delta(
    demo_tools: DemoTools, registry: CollectorRegistry,
) -> None:
    catalog = catalog_with(demo_tools, weather_geocode="{{ output.name }} is in {{ output.country }}")
    orchestrator, _ = orch(catalog, registry)
    events: list[RunEvent] = []
    result = orchestrator.run("Weather in Paris for 2 days?", synthesis="template",
                              on_event=events.append)
    assert result.answer == "Paris is in FR"
    assert [e.data["text"] for e in events if e.type == "answer_delta"] == ["Paris is in FR"]


def test_a_template_with_a_syntax_error_is_refused_when_the_catalog_loads(
    demo_tools: DemoTools,
) -> None:
    with pytest.raises(CatalogError) as caught:
        catalog_with(demo_tools, weather_forecast="line one\n{% for d in output.daily %}")
    assert "answer_template: line 2" in str(caught.value)
    assert "weather.forecast" in str(caught.value)


def test_an_unknown_strategy_is_refused(demo_tools: DemoTools, registry: CollectorRegistry) -> None:
    orchestrator, llm = orch(Catalog.from_dict(demo_tools.catalog_dict()), registry)
    with pytest.raises(InvalidInput, match="use one of llm, template, raw"):
        orchestrator.run("Weather in Paris?", synthesis="jinja")  # type: ignore[arg-type]
    assert llm.requests == []
