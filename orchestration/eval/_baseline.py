"""An eval compared with an earlier one, to keep a deployment from regressing.

Two rules, each enough to call it a **regression** (the CLI then exits non-zero):

* a configuration's pass rate dropped **beyond its interval**: the new rate is below the
  lower end of the baseline's 95% Wilson interval — a drop the baseline's own
  uncertainty cannot explain;
* a **case that passed now fails**: under a configuration present in both, a case that
  passed in the baseline (in more than half of its repeats) does not pass now (an
  ``error`` included: a replay that no longer matches its cassette is not a pass).

Configurations and cases are matched by name; those only on one side are listed as not
compared, never as regressions. Cases that failed and now pass are listed too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

if TYPE_CHECKING:
    from orchestration.eval._report import CaseResult, EvalReport

__all__ = ["BaselineComparison", "CaseChange", "RateChange", "compare_with_baseline"]


class RateChange(BaseModel):
    """One configuration's pass rate, in the baseline and now, with their intervals."""

    config: str
    baseline_rate: float
    baseline_interval: tuple[float, float]
    rate: float
    interval: tuple[float, float]
    dropped: bool
    """The new rate is below the baseline's interval."""


class CaseChange(BaseModel):
    """A case whose verdict changed under one configuration (a regression or an
    improvement), with how it did in each report."""

    config: str
    case: str
    baseline: str
    now: str
    """``passed 0/1 — failed: called weather.forecast(days=7): sent instead: ...``"""
    run_ids: list[str] = Field(default_factory=list)


class BaselineComparison(BaseModel):
    """An eval held against an earlier report (``EvalReport.baseline``): what regressed by
    the rules above, what improved, and what could not be compared."""

    baseline: str
    """Where the baseline report came from."""
    rates: list[RateChange] = Field(default_factory=list)
    regressions: list[CaseChange] = Field(default_factory=list)
    """Cases that passed in the baseline and do not pass now."""
    improvements: list[CaseChange] = Field(default_factory=list)
    not_compared: list[str] = Field(default_factory=list)

    @property
    def regressed(self) -> bool:
        """Either rule found a regression (``dagwright eval --baseline`` then exits 6)."""
        return bool(self.regressions) or any(r.dropped for r in self.rates)

    def reasons(self) -> list[str]:
        """Each regression in one line."""
        lines = [f"{r.config}: pass rate {r.rate:.1%} is below the baseline's 95% interval "
                 f"[{r.baseline_interval[0]:.1%}, {r.baseline_interval[1]:.1%}] "
                 f"(baseline {r.baseline_rate:.1%})" for r in self.rates if r.dropped]
        lines += [f"{c.config}: case {c.case} passed in the baseline ({c.baseline}), now {c.now}"
                  for c in self.regressions]
        return lines


def _passes(results: list[CaseResult]) -> bool:
    return sum(r.passed for r in results) * 2 > len(results)


def _tally(results: list[CaseResult]) -> str:
    return f"passed {sum(r.passed for r in results)}/{len(results)}"


def compare_with_baseline(report: EvalReport, baseline: EvalReport, *,
                          source: str = "baseline") -> BaselineComparison:
    """How ``report`` compares with ``baseline`` (see the module docstring)."""
    comparison = BaselineComparison(baseline=source)
    old_names = {c.name for c in baseline.configs}
    for summary in report.configs:
        if summary.name not in old_names:
            comparison.not_compared.append(f"configuration {summary.name} (not in the baseline)")
            continue
        old = baseline.config(summary.name)
        comparison.rates.append(RateChange(
            config=summary.name, baseline_rate=old.pass_rate, baseline_interval=old.interval,
            rate=summary.pass_rate, interval=summary.interval,
            dropped=summary.pass_rate < old.interval[0]))
        new_cases = {r.case for r in report.results_of(summary.name)}
        old_cases = {r.case for r in baseline.results_of(summary.name)}
        for case in sorted(old_cases - new_cases):
            comparison.not_compared.append(f"case {case} under {summary.name} (not run now)")
        for case in sorted(new_cases - old_cases):
            comparison.not_compared.append(f"case {case} under {summary.name} (new)")
        for case in sorted(new_cases & old_cases):
            before = baseline.results_of(summary.name, case)
            now = report.results_of(summary.name, case)
            if _passes(before) == _passes(now):
                continue
            failing = next((r for r in now if not r.passed), None)
            detail = _tally(now) + (f" — {failing.outcome}: {failing.why()}" if failing else "")
            change = CaseChange(config=summary.name, case=case, baseline=_tally(before),
                                now=detail, run_ids=[r.run_id for r in now if r.run_id])
            (comparison.regressions if _passes(before) else comparison.improvements).append(change)
    for name in sorted(old_names - {c.name for c in report.configs}):
        comparison.not_compared.append(f"configuration {name} (only in the baseline)")
    return comparison
