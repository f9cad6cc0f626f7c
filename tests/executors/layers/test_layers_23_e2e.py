"""Layers 2 and 3 end to end over real HTTP, and the same runs failing with them off."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry

from orchestration import Catalog, Orchestrator, OrchestratorConfig, ScriptedLLM
from orchestration.demo.scenarios import scripted_validation_fix
from orchestration.demo.tools import DemoTools
from orchestration.llm.base import LLMRequest

STRINGLY = {"steps": [{"id": "fc", "tool": "weather", "capability": "forecast",
                       "params": {"lat": "35.6897", "lon": "139.6917", "days": "3",
                                  "units": "CELSIUS"}}]}
OUT_OF_RANGE = {"steps": [{"id": "fc", "tool": "weather", "capability": "forecast",
                           "params": {"lat": 35.6897, "lon": 139.6917, "days": 12}}]}
ALL_OFF = {"type_coercion_enabled": False, "validation_feedback_enabled": False,
           "semantic_retry_enabled": False}


def run(catalog: Catalog, plan: dict[str, Any], registry: CollectorRegistry,
        **config: Any) -> tuple[Any, ScriptedLLM]:
    def script(request: LLMRequest) -> Any:
        if request.purpose == "plan":
            return plan
        if request.purpose == "validation_feedback":
            return scripted_validation_fix(request)
        raise AssertionError(f"unexpected LLM request {request.purpose}")

    llm = ScriptedLLM(script)
    orch = Orchestrator(catalog=catalog, llm=llm, registry=registry,
                        config=OrchestratorConfig(synthesis_enabled=False, **config))
    return orch.run("Tokyo weather"), llm


def test_stringly_typed_plan_succeeds_with_layer_2_alone(
    demo_tools: DemoTools, demo_catalog: Catalog, registry: CollectorRegistry,
) -> None:
    result, llm = run(demo_catalog, STRINGLY, registry)
    assert result.status == "succeeded"
    (attempt,) = result.steps["fc"].attempts
    assert attempt.layer == "plan" and attempt.outcome == "succeeded"
    assert {(c.path, c.old, c.new) for c in attempt.coercions} == {
        ("$.lat", "35.6897", 35.6897), ("$.lon", "139.6917", 139.6917),
        ("$.days", "3", 3), ("$.units", "CELSIUS", "celsius")}
    assert llm.requests_for("validation_feedback") == []
    sent = demo_tools["weather"].requests_to("/forecast")
    assert [r.body for r in sent] == [{"lat": 35.6897, "lon": 139.6917, "days": 3,
                                       "units": "celsius"}]
    assert registry.get_sample_value("orchestration_type_coercion_applied_total",
                                     {"tool": "weather", "capability": "forecast"}) == 1


def test_stringly_typed_plan_fails_with_the_layers_off_and_nothing_is_sent(
    demo_tools: DemoTools, demo_catalog: Catalog, registry: CollectorRegistry,
) -> None:
    result, _ = run(demo_catalog, STRINGLY, registry, **ALL_OFF)
    assert result.status == "failed"
    (attempt,) = result.steps["fc"].attempts
    assert attempt.outcome == "invalid" and attempt.coercions == []
    assert {e["path"] for e in attempt.validation_errors} == {"$.lat", "$.lon", "$.days", "$.units"}
    assert demo_tools["weather"].requests_to("/forecast") == []


def test_out_of_range_value_is_fixed_by_layer_3_before_anything_is_sent(
    demo_tools: DemoTools, demo_catalog: Catalog, registry: CollectorRegistry,
) -> None:
    result, llm = run(demo_catalog, OUT_OF_RANGE, registry)
    assert result.status == "succeeded"
    first, second = result.steps["fc"].attempts
    assert (first.layer, first.outcome) == ("plan", "invalid")
    assert (second.layer, second.outcome) == ("validation_feedback", "succeeded")
    assert second.params["days"] == 7 and "maximum" in (second.analysis or "")
    prompt = llm.requests_for("validation_feedback")[0].prompt_text
    assert "weather.forecast" in prompt and "greater than the maximum of 7" in prompt
    # only the corrected call reached the tool
    assert [r.body["days"] for r in demo_tools["weather"].requests_to("/forecast")] == [7]


def test_out_of_range_value_fails_with_the_layers_off(
    demo_tools: DemoTools, demo_catalog: Catalog, registry: CollectorRegistry,
) -> None:
    result, llm = run(demo_catalog, OUT_OF_RANGE, registry, **ALL_OFF)
    assert result.status == "failed"
    assert [a.layer for a in result.steps["fc"].attempts] == ["plan"]
    assert llm.requests_for("validation_feedback") == []
