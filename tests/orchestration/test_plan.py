"""Plan parsing and DAG validation through the public API."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from orchestration import (
    Catalog,
    Orchestrator,
    OrchestratorConfig,
    Plan,
    PlanParseError,
    PlanValidationError,
    ScriptedLLM,
    Step,
    ValidatedPlan,
    validate_plan,
)
from planners import parse_plan


@pytest.fixture
def catalog() -> Catalog:
    cat = Catalog()
    cat.add_function(lambda **kw: kw, tool="t", capability="a", input_schema={"type": "object"})
    cat.add_function(lambda **kw: kw, tool="t", capability="b", input_schema={"type": "object"})
    return cat


def plan_of(*steps: dict) -> Plan:
    return Plan.model_validate({"steps": list(steps)})


def test_references_create_edges_and_depends_on_adds_ordering(catalog: Catalog) -> None:
    vp = validate_plan(
        plan_of(
            {"id": "x", "tool": "t", "capability": "a"},
            {"id": "y", "tool": "t", "capability": "b", "params": {"v": "{{x.items[0].v}}"}},
            {"id": "z", "tool": "t", "capability": "a", "depends_on": ["y"]},
        ),
        catalog,
    )
    assert vp.dependencies("y") == ["x"]
    assert vp.dependencies("z") == ["y"]
    assert vp.ancestors("z") == {"x", "y"}
    assert vp.order.index("x") < vp.order.index("y") < vp.order.index("z")


def test_every_issue_is_reported_at_once(catalog: Catalog) -> None:
    with pytest.raises(PlanValidationError) as info:
        validate_plan(
            plan_of(
                {"id": "a", "tool": "nope", "capability": "a"},
                {"id": "b", "tool": "t", "capability": "zzz"},
                {"id": "c", "tool": "t", "capability": "a", "params": {"p": "{{ghost.x}}"}},
                {"id": "d", "tool": "t", "capability": "a", "depends_on": ["missing"]},
                {"id": "d", "tool": "t", "capability": "a"},
                {"id": "e", "tool": "t", "capability": "a", "params": {"q": "{{ bad ref! }}"}},
            ),
            catalog,
        )
    text = str(info.value)
    assert "unknown tool 'nope'" in text
    assert "has no capability 'zzz'" in text and "it has: a, b" in text
    assert "refers to unknown step 'ghost'" in text
    assert "depends_on names unknown step 'missing'" in text
    assert "duplicate step id" in text
    assert "malformed reference" in text
    assert {i.step_id for i in info.value.issues} >= {"a", "b", "c", "d", "e"}


def test_cycle_is_named(catalog: Catalog) -> None:
    with pytest.raises(PlanValidationError, match=r"cycle: (a -> b -> c -> a|b -> c -> a -> b|c -> a -> b -> c)"):
        validate_plan(
            plan_of(
                {"id": "a", "tool": "t", "capability": "a", "params": {"v": "{{c.x}}"}},
                {"id": "b", "tool": "t", "capability": "a", "depends_on": ["a"]},
                {"id": "c", "tool": "t", "capability": "a", "params": {"v": "pre {{b.y}} post"}},
            ),
            catalog,
        )


def test_self_reference_and_size_limit(catalog: Catalog) -> None:
    with pytest.raises(PlanValidationError, match="refers to its own step"):
        validate_plan(plan_of({"id": "a", "tool": "t", "capability": "a",
                               "params": {"v": "{{a.x}}"}}), catalog)
    big = plan_of(*({"id": f"s{i}", "tool": "t", "capability": "a"} for i in range(11)))
    with pytest.raises(PlanValidationError, match="11 steps; the limit is 10"):
        validate_plan(big, catalog, max_steps=10)
    with pytest.raises(PlanValidationError, match="no steps"):
        validate_plan(plan_of(), catalog)


@pytest.mark.parametrize(
    "text",
    [
        '{"steps": [{"id": "a", "tool": "t", "capability": "a", "params": {}}]}',
        'Here is the plan:\n```json\n{"steps": [{"id": "a", "tool": "t", "capability": "a"}]}\n```\nDone.',
        '[{"id": "a", "tool": "t", "capability": "a"}]',
        'Sure! {"plan": {"steps": [{"id": "a", "tool": "t", "capability": "a"}]}} hope it helps',
    ],
)
def test_parse_plan_tolerates_fences_and_prose(text: str) -> None:
    assert [s.id for s in parse_plan(text).steps] == ["a"]


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "empty"),
        ("no json here", "no JSON object"),
        ('{"steps": [{"id": "a", "tool": "t"', "not valid JSON"),
        ('{"steps": [{"id": "1bad", "tool": "t", "capability": "a"}]}', "steps.0.id"),
        ('{"steps": "x"}', "steps"),
    ],
)
def test_parse_plan_errors_name_the_problem(text: str, match: str) -> None:
    with pytest.raises(PlanParseError, match=match):
        parse_plan(text)


def test_plan_json_is_found_after_braces_in_prose() -> None:
    plan = parse_plan('use {curly} braces: {"steps": [{"id": "a", "tool": "t", "capability": "c"}]}')
    assert [s.id for s in plan.steps] == ["a"]


def test_bad_per_step_retry_override_is_a_plan_issue(catalog: Catalog) -> None:
    with pytest.raises(PlanValidationError, match=r"step 'a': retry: unknown retry setting\(s\) 'max_tries'"):
        validate_plan(plan_of({"id": "a", "tool": "t", "capability": "a",
                               "retry": {"max_tries": 3}}), catalog)


# --- hostile plans: a plan issue or a failed run, never an exception ----------------------

@pytest.mark.parametrize("bad", [
    {"steps": 5}, {"steps": [{"id": "a"}]}, {"steps": [{"id": "1bad", "tool": "t",
                                                         "capability": "a"}]},
    [1, 2], "not a plan", {"steps": [{"id": "a", "tool": "t", "capability": "a", "params": 3}]},
], ids=["steps-int", "step-missing-fields", "bad-id", "list", "string", "params-int"])
async def test_a_bad_plan_argument_fails_the_run_naming_the_problem(
    catalog: Catalog, bad: object,
) -> None:
    orch = Orchestrator(catalog=catalog, llm=ScriptedLLM([]), registry=CollectorRegistry(),
                        config=OrchestratorConfig(synthesis_enabled=False))
    result = await orch.arun("q", plan=bad)  # type: ignore[arg-type]
    assert result.status == "failed"
    assert result.error is not None and result.error.startswith("the plan given with plan= is invalid")
    assert result.steps == {}


def test_a_reference_with_a_huge_index_is_a_plan_issue(catalog: Catalog) -> None:
    huge = "{{x[" + "9" * 5000 + "]}}"
    with pytest.raises(PlanValidationError, match="index") as info:
        validate_plan(plan_of({"id": "x", "tool": "t", "capability": "a"},
                              {"id": "y", "tool": "t", "capability": "b", "params": {"v": huge}}),
                      catalog)
    assert info.value.issues[0].step_id == "y"


def test_a_planner_answer_with_a_huge_index_is_fed_back(catalog: Catalog) -> None:
    huge = "{{x[" + "9" * 5000 + "]}}"
    bad = {"steps": [{"id": "x", "tool": "t", "capability": "a"},
                     {"id": "y", "tool": "t", "capability": "b", "params": {"v": huge}}]}
    good = {"steps": [{"id": "x", "tool": "t", "capability": "a"}]}
    llm = ScriptedLLM([bad, good])
    result = Orchestrator(catalog=catalog, llm=llm, registry=CollectorRegistry(),
                          config=OrchestratorConfig(synthesis_enabled=False)).run("q")
    assert result.status == "succeeded", result.error
    assert "index" in llm.requests[1].messages[-1]["content"]


def test_parameters_json_cannot_carry_name_their_step_among_many(catalog: Catalog) -> None:
    """The plan is encoded in one pass; when that refuses, each step is checked on its
    own, so the issue still names the step and the value (and only that step)."""
    tool, cap = next((c.tool, c.name) for c in catalog)
    steps = [{"id": f"s{i}", "tool": tool, "capability": cap, "params": {"v": i}}
             for i in range(50)]
    steps[31]["params"] = {"v": float("nan")}
    steps[7]["params"] = {"deep": [[["x"]]]}
    with pytest.raises(PlanValidationError) as info:
        validate_plan(Plan.model_validate({"steps": steps}), catalog, max_depth=3)
    assert sorted((i.step_id, i.message.split(":")[0]) for i in info.value.issues) == [
        ("s31", "param $.v"), ("s7", "param $.deep[0][0]")]
    steps[7]["params"] = {"deep": [["x"]]}  # exactly max_depth levels: fine
    steps[31]["params"] = {"v": 1}
    assert len(validate_plan(Plan.model_validate({"steps": steps}), catalog, max_depth=3).order) == 50


def test_a_growing_plan_keeps_a_topological_order_and_refuses_an_unknown_dependency() -> None:
    plan = ValidatedPlan.growing()
    first = Step(id="a", tool="t", capability="c")
    second = Step(id="b", tool="t", capability="c", params={"x": "{{a.v}}"})
    plan.add_step(first, [])
    plan.add_step(second, ["a"])
    assert plan.order == ["a", "b"]
    assert plan.position == {"a": 0, "b": 1}
    assert plan.dependencies("b") == ["a"]
    assert plan.ancestors("b") == {"a"}
    with pytest.raises(ValueError, match="'c' depends on zz"):
        plan.add_step(Step(id="c", tool="t", capability="c"), ["zz"])
    assert "c" not in plan.steps and plan.order == ["a", "b"]
