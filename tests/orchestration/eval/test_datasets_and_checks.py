"""Datasets as files (JSONL, YAML) checked when read, and what each kind of check means when
a run is graded: calls made and not made (as sent, after layer 2), outputs at a path,
the answer, the status; a given plan; a case's context, kept with its run."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestration import Catalog, Orchestrator, OrchestratorConfig, ScriptedLLM
from orchestration.eval import Case, Dataset, DatasetError, EvalConfig, run_eval
from orchestration.eval._dataset import parse_path
from orchestration.llm.scripted import ScriptRule, answer_by_rules

MEMORY = OrchestratorConfig(store_url="memory://")


def _catalog() -> Catalog:
    catalog = Catalog()

    @catalog.tool("shop.price")
    def price(item: str, quantity: int = 1) -> dict:
        """The price of some quantity of an item, in cents, with its lines."""
        return {"item": item, "total": 250 * quantity,
                "lines": [{"n": i, "cents": 250} for i in range(quantity)]}

    return catalog


def _run(cases: list[dict], plan: dict | None = None, answer: str = "It costs 7.50.") -> dict:
    llm = ScriptedLLM(answer_by_rules([
        ScriptRule(plan or {"steps": [{"id": "p", "tool": "shop", "capability": "price",
                                       "params": {"item": "tea", "quantity": "3"}}]}, "plan"),
        ScriptRule(answer, "synthesis")]))
    report = run_eval(Dataset.from_cases(cases), [EvalConfig("c", MEMORY, llm=llm)],
                      catalog=_catalog())
    return {r.case: r for r in report.results}


def test_every_kind_of_check_passes_and_fails_as_it_says() -> None:
    results = _run([
        {"id": "right", "query": "price of 3 tea", "expect": {
            "calls": [{"capability": "shop.price", "params": {"item": "tea", "quantity": 3.0}},
                      {"tool": "shop", "capability": "price",
                       "params_schema": {"properties": {"quantity": {"type": "integer", "maximum": 3}}}}],
            "not_calls": [{"capability": "shop.price", "params": {"quantity": "3"}}],
            "outputs": [{"capability": "shop.price", "path": "$.total", "equals": 750},
                        {"step": "p", "path": "lines[*].cents", "schema": {"const": 250}},
                        {"capability": "shop.price", "path": "lines", "schema": {"minItems": 3}}],
            "answer": {"contains": ["7.50", "COSTS"], "regex": r"\d\.\d\d"}}},
        {"id": "wrong", "query": "price of 4 tea", "expect": {
            "calls": [{"capability": "shop.price", "params": {"quantity": 4}}],
            "not_calls": [{"capability": "shop.price", "params": {"item": "tea"}}],
            "outputs": [{"capability": "shop.price", "path": "$.total", "equals": 1000},
                        {"capability": "shop.price", "path": "$.lines[5].cents", "equals": 250},
                        {"step": "nope", "path": "total", "equals": 1}],
            "answer": {"contains": "10.00", "regex": "^free"}}},
    ])
    right, wrong = results["right"], results["wrong"]
    assert right.outcome == "passed", [c for c in right.checks if not c.passed]
    assert [c.kind for c in right.checks] == ["status", "call", "call", "not_call", "output",
                                              "output", "output", "answer_contains",
                                              "answer_contains", "answer_regex"]
    # the same run, judged by what the case expected: the engine said succeeded
    assert wrong.outcome == "succeeded_but_wrong" and wrong.status == "succeeded"
    failed = {c.name: c.detail for c in wrong.failed_checks}
    assert failed == {
        "called shop.price(quantity=4)": 'sent instead: shop.price({"item": "tea", "quantity": 3})',
        'did not call shop.price(item="tea")': 'sent: shop.price({"item": "tea", "quantity": 3})',
        "output shop.price $.total equals 1000": "step p: $.total is 750",
        "output shop.price $.lines[5].cents equals 250": "step p: nothing at $.lines[5].cents",
        "output step nope total equals 1": "the run has no step 'nope'",
        "answer contains '10.00'": "answer: It costs 7.50.",
        "answer matches /^free/": "answer: It costs 7.50.",
    }


def test_status_defaults_to_succeeded_and_an_expected_failure_passes() -> None:
    plan = {"steps": [{"id": "p", "tool": "shop", "capability": "price",
                       "params": {"item": "tea", "quantity": "lots"}}]}
    results = _run([{"id": "default", "query": "q1"},
                    {"id": "expected", "query": "q2", "expect": {"status": ["failed", "partial"]}}],
                   plan=plan)
    assert results["default"].outcome == "failed"
    assert results["default"].failed_checks[0].detail.startswith(
        "the run ended failed: step 'p' (shop.price): VALIDATION_ERROR")
    assert results["expected"].outcome == "passed"


def test_a_given_plan_is_run_as_it_is_and_a_context_goes_with_its_run(tmp_path: Path) -> None:
    given = {"steps": [{"id": "mine", "tool": "shop", "capability": "price",
                        "params": {"item": "cake", "quantity": 2}}]}
    results = _run([
        {"id": "given", "query": "q", "plan": given,
         "expect": {"outputs": [{"step": "mine", "path": "total", "equals": 500}]}},
        {"id": "context", "query": "q", "context": {"user": "ada", "tenant": "acme"}},
    ])
    assert results["given"].outcome == "passed"
    assert results["given"].attribution is not None
    assert "planning" not in results["given"].attribution.spend  # no LLM planned it
    context = results["context"]
    assert context.outcome == "passed" and context.run_id is not None


def test_a_case_s_context_is_stored_with_its_run(tmp_path: Path) -> None:
    config = OrchestratorConfig(store_url=f"sqlite:///{tmp_path / 'runs.db'}")
    llm = ScriptedLLM(answer_by_rules([
        ScriptRule({"steps": [{"id": "p", "tool": "shop", "capability": "price",
                               "params": {"item": "tea"}}]}, "plan"),
        ScriptRule("It costs 2.50.", "synthesis")]))
    report = run_eval(Dataset.from_cases([
        {"id": "ctx", "query": "q", "context": {"user": "ada", "tenant": "acme"}}]),
        [EvalConfig("c", config, llm=llm)], catalog=_catalog())
    (result,) = report.results
    assert result.outcome == "passed" and result.run_id is not None
    orch = Orchestrator(_catalog(), llm=llm, config=config)
    try:
        stored = orch.get_run(result.run_id)
        assert stored is not None and stored.context == {"user": "ada", "tenant": "acme"}
        assert [r.run_id for r in orch.list_runs(tenant="acme")] == [result.run_id]
    finally:
        orch.close()


def test_a_dataset_file_is_checked_whole_when_read(tmp_path: Path) -> None:
    good = tmp_path / "cases.yaml"
    good.write_text("cases:\n  - id: a\n    query: q\n    context: {user: ada}\n"
                    "    expect: {status: partial, not_calls: [{capability: x.y}]}\n")
    dataset = Dataset.from_file(good)
    assert dataset.name == "cases" and dataset.sha256 is not None
    case = dataset.case("a")
    assert isinstance(case, Case) and case.context == {"user": "ada"}
    assert case.expect.not_calls[0].key == "x.y"
    with pytest.raises(KeyError, match="no case 'b'"):
        dataset.case("b")

    def refused(name: str, text: str) -> str:
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(DatasetError) as caught:
            Dataset.from_file(path)
        return str(caught.value).replace(str(tmp_path) + "/", "")

    assert refused("a.jsonl", '{"id": "a", "query": "q"}\n\n{"id": "b", "query": "q",\n') \
        .startswith("a.jsonl:3: not a JSON object")
    assert refused("b.jsonl", '{"id": "a b", "query": "q"}\n').startswith(
        "b.jsonl:1 (case 'a b'): id: String should match pattern")
    assert refused("c.jsonl", '{"id": "a", "query": "q", "expect": {"answer": {"regex": "("}}}\n') \
        == "c.jsonl:1 (case 'a'): expect.answer.regex: the regex '(' does not compile: " \
           "missing ), unterminated subpattern at position 0"
    assert "expect.outputs[0]: name the step" in refused(
        "d.jsonl", '{"id": "a", "query": "q", "expect": {"outputs": [{"equals": 1}]}}\n')
    assert "is not a JSONPath-like path at '..b'" in refused(
        "e.jsonl", '{"id": "a", "query": "q", "expect": {"outputs": '
                   '[{"step": "s", "path": "a..b", "equals": 1}]}}\n')
    assert "expect.status: 'done' is not a run status; use one of running, " in refused(
        "f.jsonl", '{"id": "a", "query": "q", "expect": {"status": "done"}}\n')
    assert refused("g.jsonl", '{"id": "a", "query": "q"}\n{"id": "a", "query": "r"}\n') == \
        "g.jsonl: two cases have the id 'a'; case ids must be unique"
    assert refused("h.yaml", "- id: a\n  query: q\n  expect: {cals: []}\n").startswith(
        "h.yaml: case 1 (case 'a'): expect.cals: Extra inputs are not permitted")
    assert refused("i.jsonl", "") == "i.jsonl: the dataset has no cases"


def test_paths_read_like_jsonpath() -> None:
    assert parse_path("$") == ()
    assert parse_path("$.daily[0].temp_max") == ("daily", 0, "temp_max")
    assert parse_path("daily[*].day") == ("daily", "*", "day")
    assert parse_path("[2]") == (2,)
    with pytest.raises(ValueError, match=r"use \.name, \[index\] or \[\*\]"):
        parse_path("daily[x]")


def test_a_context_the_engine_would_refuse_is_refused_with_the_dataset(tmp_path: Path) -> None:
    """A context the engine cannot take (a nested value) is a mistake in the file: the
    dataset is refused when read, naming the line, the case and the key — before any
    case runs or any model is paid; a flat one goes with its run."""
    path = tmp_path / "cases.jsonl"
    path.write_text('{"id": "flat", "query": "q", "context": {"user": "ada"}}\n'
                    '{"id": "nested", "query": "q", "context": {"user": {"name": "ada"}}}\n')
    with pytest.raises(DatasetError) as caught:
        Dataset.from_file(path)
    message = str(caught.value)
    assert "cases.jsonl:2 (case 'nested'): context" in message and "user" in message
    results = _run([{"id": "flat", "query": "q", "context": {"user": "ada"}}])
    assert results["flat"].outcome == "passed"
