"""Reports: the pass rate's interval, repeats within a concurrency bound, the judge off by
default and counted apart when on, the baseline rules, JSON that reads back, the
Markdown report with SVG or PNG plots."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from orchestration import Catalog, ConfigError, OrchestratorConfig, ScriptedLLM
from orchestration.eval import (
    CaseResult,
    Dataset,
    EvalConfig,
    EvalReport,
    compare_with_baseline,
    run_eval,
    wilson_interval,
)
from orchestration.eval._report import summarise
from orchestration.llm.base import LLMRequest
from orchestration.llm.scripted import ScriptRule, answer_by_rules

MEMORY = OrchestratorConfig(store_url="memory://")


def test_the_wilson_interval_matches_known_values() -> None:
    low, high = wilson_interval(10, 12)
    assert (round(low, 4), round(high, 4)) == (0.5520, 0.9530)
    assert wilson_interval(0, 10)[0] == 0.0 and round(wilson_interval(0, 10)[1], 4) == 0.2775
    assert wilson_interval(10, 10)[1] == 1.0
    assert wilson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        wilson_interval(3, 2)


def _slow_catalog(in_flight: list[int]) -> Catalog:
    catalog = Catalog()

    @catalog.tool("clock.wait")
    async def wait(ms: int) -> dict:
        """Wait ms milliseconds."""
        in_flight[0] += 1
        in_flight[1] = max(in_flight[1], in_flight[0])
        await asyncio.sleep(ms / 1000)
        in_flight[0] -= 1
        return {"waited": ms}

    return catalog


def _llm(judge_says: bool | None = None) -> ScriptedLLM:
    return ScriptedLLM(answer_by_rules([
        ScriptRule({"steps": [{"id": "w", "tool": "clock", "capability": "wait",
                               "params": {"ms": 40}}]}, "plan"),
        ScriptRule("waited 40 ms", "synthesis")]))


def test_repeats_run_within_the_concurrency_bound_and_the_judge_is_off_by_default() -> None:
    in_flight = [0, 0]
    dataset = Dataset.from_cases([
        {"id": f"c{i}", "query": f"wait {i}", "expect": {"answer": {
            "contains": "40", "judge": {"rubric": "It says how long it waited."}}}}
        for i in range(3)])
    seen: list[str] = []
    report = run_eval(dataset, [EvalConfig("a", MEMORY, llm=_llm()),
                                EvalConfig("b", MEMORY, llm=_llm())],
                      catalog=_slow_catalog(in_flight), repeat=2, concurrency=3,
                      on_result=lambda r: seen.append(f"{r.config}/{r.case}#{r.repeat}"))
    assert len(report.results) == len(seen) == 12
    assert in_flight[1] == 3  # the bound was reached, never passed
    assert {r.run_id for r in report.results} == {
        r.run_id for r in report.results if r.run_id and r.run_id.endswith(f"-{r.repeat}")}
    assert len({r.run_id for r in report.results}) == 12
    a = report.config("a")
    assert (a.runs, a.passed, a.pass_rate) == (6, 6, 1.0)
    # not judged, and the verdict it would give never counts in the pass rate
    assert all(r.judge is not None and r.judge.passed is None for r in report.results)
    assert report.results[0].judge.detail.startswith("not judged: the judge is off")
    assert a.judge is None and report.judge is None


def test_the_judge_grades_apart_from_the_pass_rate() -> None:
    def verdict(request: LLMRequest) -> dict:
        assert "<<<RUBRIC\nIt says how long it waited.\nRUBRIC>>>" in request.prompt_text
        failing = "wait 1" in request.prompt_text
        return {"pass": not failing, "reason": "no duration" if failing else "says 40 ms"}

    judge = ScriptedLLM(verdict)
    dataset = Dataset.from_cases([
        {"id": f"c{i}", "query": f"wait {i}", "expect": {"answer": {
            "judge": {"rubric": "It says how long it waited."}}}} for i in range(3)])
    report = run_eval(dataset, [EvalConfig("a", MEMORY, llm=_llm())],
                      catalog=_slow_catalog([0, 0]), judge=judge)
    summary = report.config("a")
    assert summary.passed == 3  # the judge's "fail" does not fail the case
    assert summary.judge is not None
    assert (summary.judge.passed, summary.judge.failed, summary.judge.no_verdict) == (2, 1, 0)
    assert report.result("a", "c1").judge.detail == "no duration"
    assert report.judge is not None and report.judge.calls == 3
    assert summary.llm.calls == 6  # plan + answer per run: the judge's calls are apart
    assert "judge (apart from the pass rate): 2 passed, 1 failed" in report.summary()


def _result(config: str, case: str, passed: bool, repeat: int = 0) -> CaseResult:
    return CaseResult(config=config, case=case, repeat=repeat, query="q", run_id=f"r-{case}",
                      status="succeeded" if passed else "failed",
                      outcome="passed" if passed else "failed")


def _report(config: str, passes: dict[str, list[bool]]) -> EvalReport:
    results = [_result(config, case, ok, n) for case, runs in passes.items()
               for n, ok in enumerate(runs)]
    return EvalReport(dagwright_version="x", dataset={"name": "d", "cases": len(passes)},
                      started_at=0, finished_at=1, repeat=max(len(v) for v in passes.values()),
                      configs=[summarise(config, results)], results=results)


def test_the_baseline_rules() -> None:
    baseline = _report("on", {f"c{i}": [True] for i in range(10)} | {"c10": [False]})
    # one case that passed now fails: a regression although the rate is within the interval
    one_less = _report("on", {f"c{i}": [True] for i in range(9)} | {"c9": [False], "c10": [True]})
    comparison = compare_with_baseline(one_less, baseline)
    assert comparison.regressed
    assert not any(r.dropped for r in comparison.rates)
    assert [(c.case, c.baseline, c.now) for c in comparison.regressions] == [
        ("c9", "passed 1/1", "passed 0/1 — failed: ")]
    assert [c.case for c in comparison.improvements] == ["c10"]
    # a case passes when it passed in more than half of its repeats
    flaky_before = _report("on", {"a": [True, True, False]})
    flaky_now = _report("on", {"a": [True, False, True]})
    assert not compare_with_baseline(flaky_now, flaky_before).regressed
    assert compare_with_baseline(_report("on", {"a": [True, False, False]}), flaky_before).regressed
    # names on one side only are not compared, never regressions
    other = compare_with_baseline(_report("off", {"c0": [False]}), baseline)
    assert not other.regressed
    assert other.not_compared == ["configuration off (not in the baseline)",
                                  "configuration on (only in the baseline)"]
    # the rate rule: below the baseline's interval
    dropped = compare_with_baseline(_report("on", {f"c{i}": [i < 4] for i in range(11)}), baseline)
    assert [r.dropped for r in dropped.rates] == [True]
    assert dropped.reasons()[0].startswith("on: pass rate 36.4% is below the baseline's 95% "
                                           "interval [62.3%, 98.4%]")


def test_the_report_reads_back_and_writes_markdown_with_svg_or_png(tmp_path: Path) -> None:
    dataset = Dataset.from_cases([{"id": "w", "query": "wait"}])
    report = run_eval(dataset, [EvalConfig("a", MEMORY, llm=_llm())],
                      catalog=_slow_catalog([0, 0]), baseline=_report("a", {"w": [True]}))
    files = report.write(tmp_path / "svg")
    assert [f.name for f in files] == ["report.json", "report.md", "pass_rate.svg", "layers.svg"]
    again = EvalReport.load(tmp_path / "svg" / "report.json")
    assert again.results == report.results and again.configs == report.configs
    assert json.loads(files[0].read_text())["baseline"]["regressions"] == []
    assert "## Baseline" in files[1].read_text()
    pytest.importorskip("matplotlib")
    png = report.write(tmp_path / "png", plots="png")
    for file in png[2:]:
        assert file.suffix == ".png" and file.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "![pass rate by configuration](pass_rate.png)" in png[1].read_text()


def test_a_report_that_is_not_one_is_refused(tmp_path: Path) -> None:
    (tmp_path / "report.json").write_text('{"format": 99}')
    with pytest.raises(ConfigError, match="is not a dagwright eval report"):
        EvalReport.load(tmp_path)
    with pytest.raises(ConfigError, match="no eval report at"):
        EvalReport.load(tmp_path / "missing.json")
