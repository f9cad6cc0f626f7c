"""The terminal summary of an eval: the pass rate of each configuration with its 95%
interval, the per-layer table, the worst cases (each with the command that shows its run)
and the baseline's verdict."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestration.eval._attribution import LAYER_LABELS, LayerSpend

if TYPE_CHECKING:
    from orchestration.eval._report import CaseResult, ConfigSummary, EvalReport

__all__ = ["WORST_ORDER", "format_cost", "percent", "render_summary", "worst_cases"]

WORST_ORDER = {"succeeded_but_wrong": 0, "error": 1, "failed": 2, "passed": 3}
"""Worst first: a wrong answer nobody was told about, then runs that could not be graded,
then failures."""


def percent(value: float) -> str:
    return f"{value * 100:.1f}%"


def format_cost(cost: float | None) -> str:
    return "-" if cost is None else f"{cost:.4f}"


def worst_cases(report: EvalReport, limit: int) -> list[CaseResult]:
    """The runs that did not pass, worst first (then most failed checks, then by name)."""
    failing = [r for r in report.results if r.outcome != "passed"]
    failing.sort(key=lambda r: (WORST_ORDER[r.outcome], -len(r.failed_checks), r.config,
                                r.case, r.repeat))
    return failing[:limit]


def _table(rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
                 for i, cell in enumerate(row)]
        lines.append("  ".join(cells).rstrip())
    return lines


def _spend_text(spend: LayerSpend) -> tuple[str, str, str]:
    if not spend.calls:
        return "-", "-", "-"
    return str(spend.calls), str(spend.tokens), format_cost(spend.cost)


def _header(report: EvalReport) -> str:
    dataset = report.dataset
    runs = len(report.results)
    where = dataset.get("path") or dataset.get("name")
    text = (f"dagwright eval: {where} — {dataset.get('cases')} cases × {len(report.configs)} "
            f"configuration{'s' if len(report.configs) != 1 else ''} × {report.repeat} "
            f"repeat{'s' if report.repeat != 1 else ''} = {runs} runs")
    cassettes = report.cassettes
    if cassettes is not None:
        verb = "replayed from" if cassettes["mode"] == "replay" else "recorded into"
        scope = "" if len(cassettes["scope"]) == 2 else f" ({cassettes['scope'][0]} only)"
        text += f", {verb} {cassettes['directory']}{scope}"
    return text


def _rates(report: EvalReport) -> list[str]:
    rows = [["configuration", "pass rate", "95% interval", "passed", "wrong", "failed",
             "errors", "LLM calls", "tokens", "cost"]]
    for c in report.configs:
        rows.append([c.name, percent(c.pass_rate),
                     f"[{percent(c.interval[0])}, {percent(c.interval[1])}]",
                     f"{c.passed}/{c.runs}", str(c.succeeded_but_wrong), str(c.failed),
                     str(c.errors), str(c.llm.calls), str(c.llm.tokens), format_cost(c.llm.cost)])
    return _table(rows, right={1, 3, 4, 5, 6, 7, 8, 9})


def _layers(summary: ConfigSummary) -> list[str]:
    rows = [["layer", "recovered", "runs (passed)", "tried", "LLM calls", "tokens", "cost"]]
    for row in summary.layers:
        rows.append([LAYER_LABELS.get(row.layer, row.layer), str(row.recovered),
                     f"{row.runs} ({row.passed_runs})", str(row.tried), *_spend_text(row.llm)])
    lines = [f"{summary.name}: what each layer recovered"]
    lines += ["  " + line for line in _table(rows, right={1, 2, 3, 4, 5, 6})]
    unrecovered = sum(summary.unrecovered.values())
    top = ", ".join(f"{label} ×{n}" for label, n in list(summary.unrecovered.items())[:4])
    lines.append(f"  grounding refusals: {summary.grounding_refusals} · unrecovered faults: "
                 f"{unrecovered}" + (f" ({top})" if top else ""))
    others = [f"{LAYER_LABELS.get(k, k)} {v.calls}" for k, v in summary.spend.items()
              if k in ("planning", "answer") and v.calls]
    if others:
        lines.append("  other LLM calls: " + ", ".join(others))
    if summary.judge is not None:
        j = summary.judge
        lines.append(f"  judge (apart from the pass rate): {j.passed} passed, {j.failed} "
                     f"failed, {j.no_verdict} without a verdict")
    return lines


def render_summary(report: EvalReport, *, worst: int = 5) -> str:
    """The whole terminal summary, as text."""
    lines = [_header(report), ""]
    lines += _rates(report)
    lines += ["  (wrong = succeeded but wrong: the engine said succeeded and a check failed)", ""]
    for summary in report.configs:
        lines += _layers(summary)
        lines.append("")
    if report.judge is not None:
        j = report.judge
        lines += [f"judge: {j.calls} calls, {j.input_tokens + j.output_tokens} tokens"
                  + (f", {j.failures} without a verdict" if j.failures else ""), ""]
    cases = worst_cases(report, worst)
    if cases:
        lines.append(f"worst cases ({len(cases)} of "
                     f"{sum(1 for r in report.results if not r.passed)} that did not pass)")
        for r in cases:
            tag = f"#{r.repeat}" if report.repeat > 1 else ""
            lines.append(f"  {r.config}  {r.case}{tag}  {r.outcome.replace('_', ' ')}"
                         f"{f' (run {r.status})' if r.status and r.outcome != 'succeeded_but_wrong' else ''}")
            lines.append(f"      {r.why()}")
            if r.run_id:
                lines.append(f"      dagwright runs show {r.run_id}")
        lines.append("")
    comparison = report.baseline
    if comparison is not None:
        if comparison.regressed:
            lines.append(f"baseline {comparison.baseline}: REGRESSION")
            lines += [f"  {reason}" for reason in comparison.reasons()]
        else:
            lines.append(f"baseline {comparison.baseline}: no regression (pass rates within the "
                         "baseline's intervals, no case that passed fails now)")
        lines += [f"  now passes: {c.config}: {c.case} ({c.baseline} → {c.now})"
                  for c in comparison.improvements]
        lines += [f"  not compared: {what}" for what in comparison.not_compared[:10]]
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"
