"""What an eval found: every run's outcome and attribution, and per configuration the pass
rate with its interval and the per-layer table.

A run's **outcome** is one of four classes, never mixed:

* ``passed`` — every check held (the judge is apart);
* ``succeeded_but_wrong`` — the engine said ``succeeded`` and a check failed: the worst
  kind of failure, since nothing signals it, so it is counted on its own;
* ``failed`` — the run did not succeed and a check failed (an expected failure that
  happened as expected is a pass);
* ``error`` — the case could not be run or graded (a replay that asked something not
  recorded, a context the engine cannot take, the run store failing).

The pass rate is ``passed / runs`` (errors count as not passed) with a 95% Wilson interval.
The report is JSON for machines (:meth:`EvalReport.to_json`, read back with
:meth:`EvalReport.load`) and is written whole with :meth:`EvalReport.write`.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from orchestration._text import describe_validation_error
from orchestration.errors import ConfigError
from orchestration.eval._attribution import LAYERS, Attribution, LayerSpend, total_spend
from orchestration.eval._baseline import BaselineComparison
from orchestration.eval._checks import CheckResult
from orchestration.eval._judge import JudgeUsage
from orchestration.eval._stats import wilson_interval
from orchestration.result import RunStatus

__all__ = ["REPORT_FORMAT", "CaseResult", "ConfigSummary", "EvalReport", "LayerRow", "Outcome",
           "summarise"]

REPORT_FORMAT = 1
Outcome = Literal["passed", "succeeded_but_wrong", "failed", "error"]


class CaseResult(BaseModel):
    """One run of one case under one configuration (one repeat), graded."""

    config: str
    case: str
    repeat: int = 0
    query: str
    run_id: str | None = None
    status: RunStatus | None = None
    """The engine's status of the run (None when it did not run)."""
    outcome: Outcome
    checks: list[CheckResult] = Field(default_factory=list)
    judge: CheckResult | None = None
    attribution: Attribution | None = None
    error: str | None = None
    """Why the case is an ``error``: it could not be run or graded."""
    run_error: str | None = None
    """The run's own error (what failed), as the engine reported it."""
    duration_s: float = 0.0

    @property
    def failed_checks(self) -> list[CheckResult]:
        return [c for c in self.checks if c.passed is False]

    @property
    def passed(self) -> bool:
        return self.outcome == "passed"

    def why(self) -> str:
        """One line: why this run did not pass (empty when it did)."""
        if self.outcome == "error":
            return self.error or "error"
        failed = self.failed_checks
        if not failed:
            return ""
        first = failed[0]
        more = f" (+{len(failed) - 1} more)" if len(failed) > 1 else ""
        return f"{first.name}: {first.detail}{more}" if first.detail else f"{first.name}{more}"


class LayerRow(BaseModel):
    """One layer's contribution under one configuration."""

    layer: str
    recovered: int = 0
    """Faults it recovered."""
    runs: int = 0
    """Runs in which it recovered at least one fault."""
    passed_runs: int = 0
    """Of those, runs that passed: what the layer saved."""
    tried: int = 0
    """Faults it acted on without recovering them."""
    llm: LayerSpend = Field(default_factory=LayerSpend)


class JudgeSummary(BaseModel):
    passed: int = 0
    failed: int = 0
    no_verdict: int = 0

    @property
    def judged(self) -> int:
        return self.passed + self.failed


class ConfigSummary(BaseModel):
    """The results of one configuration."""

    name: str
    source: str | None = None
    settings: dict[str, Any] = Field(default_factory=dict)
    runs: int = 0
    passed: int = 0
    succeeded_but_wrong: int = 0
    failed: int = 0
    errors: int = 0
    pass_rate: float = 0.0
    interval: tuple[float, float] = (0.0, 1.0)
    layers: list[LayerRow] = Field(default_factory=list)
    grounding_refusals: int = 0
    unrecovered: dict[str, int] = Field(default_factory=dict)
    """Faults no layer recovered, by source/code."""
    llm: LayerSpend = Field(default_factory=LayerSpend)
    """Every LLM call of its runs (the judge's apart)."""
    spend: dict[str, LayerSpend] = Field(default_factory=dict)
    """The same, by layer: planning, validation_feedback, semantic_retry, replanning, answer."""
    judge: JudgeSummary | None = None

    def layer(self, name: str) -> LayerRow:
        for row in self.layers:
            if row.layer == name:
                return row
        raise KeyError(name)


class EvalReport(BaseModel):
    """An eval: the dataset, the configurations compared, every run graded and attributed."""

    format: int = REPORT_FORMAT
    dagwright_version: str
    dataset: dict[str, Any]
    started_at: float
    finished_at: float
    repeat: int = 1
    concurrency: int = 1
    cassettes: dict[str, Any] | None = None
    judge: JudgeUsage | None = None
    """What the judge spent, when there was one (apart from the runs)."""
    configs: list[ConfigSummary] = Field(default_factory=list)
    results: list[CaseResult] = Field(default_factory=list)
    baseline: BaselineComparison | None = None
    """The comparison with an earlier report, when one was given."""

    def config(self, name: str) -> ConfigSummary:
        for summary in self.configs:
            if summary.name == name:
                return summary
        raise KeyError(f"no configuration {name!r}; the report has "
                       f"{', '.join(c.name for c in self.configs)}")

    def results_of(self, config: str, case: str | None = None) -> list[CaseResult]:
        return [r for r in self.results
                if r.config == config and (case is None or r.case == case)]

    def result(self, config: str, case: str, repeat: int = 0) -> CaseResult:
        for r in self.results:
            if (r.config, r.case, r.repeat) == (config, case, repeat):
                return r
        raise KeyError(f"no result of case {case!r} (repeat {repeat}) under {config!r}")

    @property
    def regressed(self) -> bool:
        """Whether the baseline comparison found a regression (False without one)."""
        return self.baseline is not None and self.baseline.regressed

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json"), indent=1, ensure_ascii=False)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> EvalReport:
        """An earlier report (its ``report.json``, or the directory holding it)."""
        file = Path(path)
        if file.is_dir():
            file = file / "report.json"
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"no eval report at {file}: give a report.json that "
                              "`dagwright eval --report DIR` wrote") from None
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read the eval report {file}: {exc}") from None
        if not isinstance(data, dict) or data.get("format") != REPORT_FORMAT:
            raise ConfigError(f"{file} is not a dagwright eval report (format {REPORT_FORMAT})")
        data.pop("baseline", None)
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(f"{file}: {describe_validation_error(exc)}") from None

    def summary(self, *, worst: int = 5) -> str:
        """The terminal summary (see :mod:`orchestration.eval._text_report`)."""
        from orchestration.eval._text_report import render_summary

        return render_summary(self, worst=worst)

    def write(self, directory: str | Path, *, plots: Literal["svg", "png"] = "svg") -> list[Path]:
        """Write ``report.json``, ``report.md`` and its plots into ``directory``; the files."""
        from orchestration.eval._markdown import write_report

        return write_report(self, Path(directory), plots=plots)


def summarise(name: str, results: list[CaseResult], *, source: str | None = None,
              settings: dict[str, Any] | None = None, judged: bool = False) -> ConfigSummary:
    """The summary of one configuration's results."""
    outcomes = Counter(r.outcome for r in results)
    runs = len(results)
    passed = outcomes["passed"]
    summary = ConfigSummary(
        name=name, source=source, settings=dict(settings or {}), runs=runs, passed=passed,
        succeeded_but_wrong=outcomes["succeeded_but_wrong"], failed=outcomes["failed"],
        errors=outcomes["error"], pass_rate=passed / runs if runs else 0.0,
        interval=wilson_interval(passed, runs))
    attributions = [(r, r.attribution) for r in results if r.attribution is not None]
    spend: dict[str, LayerSpend] = {}
    for _, attribution in attributions:
        for layer, used in attribution.spend.items():
            spend.setdefault(layer, LayerSpend()).add(used)
    summary.llm = total_spend(spend.values())
    summary.spend = spend
    seen = set(LAYERS[:-1]) | {f.recovered_by for _, a in attributions for f in a.faults
                               if f.recovered_by}
    for layer in [*LAYERS, *sorted(s for s in seen if s and s not in LAYERS)]:
        if layer not in seen:
            continue
        row = LayerRow(layer=layer, llm=spend.get(layer, LayerSpend()))
        for result, attribution in attributions:
            recovered = attribution.recovered(layer)
            row.recovered += len(recovered)
            row.tried += len(attribution.tried(layer))
            if recovered:
                row.runs += 1
                row.passed_runs += result.passed
        summary.layers.append(row)
    unrecovered: Counter[str] = Counter()
    for _, attribution in attributions:
        summary.grounding_refusals += len(attribution.grounding_refusals)
        unrecovered.update(f.label for f in attribution.unrecovered)
    summary.unrecovered = dict(unrecovered.most_common())
    if judged:
        judge = JudgeSummary()
        for result in results:
            if result.judge is None:
                continue
            if result.judge.passed is None:
                judge.no_verdict += 1
            elif result.judge.passed:
                judge.passed += 1
            else:
                judge.failed += 1
        summary.judge = judge
    return summary
