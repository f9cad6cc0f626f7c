"""The eval report on disk: ``report.json`` for machines (what ``--baseline`` reads back),
``report.md`` for people, with its two plots beside it."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from orchestration.eval._attribution import LAYER_LABELS
from orchestration.eval._plots import PlotFormat, write_plots
from orchestration.eval._text_report import format_cost, percent, worst_cases

if TYPE_CHECKING:
    from orchestration.eval._report import CaseResult, EvalReport

__all__ = ["render_markdown", "write_report"]


def write_report(report: EvalReport, directory: Path, *, plots: PlotFormat = "svg") -> list[Path]:
    """Write ``report.json``, the plots and ``report.md`` into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    json_file = directory / "report.json"
    json_file.write_text(report.to_json() + "\n", encoding="utf-8")
    files = write_plots(report.configs, directory, plots)
    markdown = directory / "report.md"
    markdown.write_text(render_markdown(report, {k: v.name for k, v in files.items()}),
                        encoding="utf-8")
    return [json_file, markdown, *files.values()]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _recovered_by(result: CaseResult) -> str:
    if result.attribution is None:
        return "-"
    names = [LAYER_LABELS.get(layer, layer).split(" (")[0]
             for layer in result.attribution.recovering_layers()]
    refusals = len(result.attribution.grounding_refusals)
    if refusals:
        names.append(f"grounding refused {refusals}")
    return ", ".join(names) or "-"


def render_markdown(report: EvalReport, plots: dict[str, str]) -> str:
    """The Markdown report; ``plots`` names the plot files beside it."""
    dataset = report.dataset
    when = datetime.datetime.fromtimestamp(report.started_at, tz=datetime.UTC)
    lines = [f"# dagwright eval: {dataset.get('name')}", ""]
    source = f"`{dataset['path']}`" if dataset.get("path") else "given in code"
    about = (f"Dataset {source} ({dataset.get('cases')} cases"
             + (f", sha256 `{dataset['sha256'][:12]}`" if dataset.get("sha256") else "") + "), "
             f"{len(report.configs)} configuration(s) × {report.repeat} repeat(s) = "
             f"{len(report.results)} runs, at most {report.concurrency} at once; dagwright "
             f"{report.dagwright_version}, {when:%Y-%m-%d %H:%M} UTC.")
    if report.cassettes is not None:
        verb = "Replayed from" if report.cassettes["mode"] == "replay" else "Recorded into"
        about += (f" {verb} the cassettes in `{report.cassettes['directory']}` "
                  f"({' and '.join(report.cassettes['scope'])}).")
    lines += [about, ""]

    lines += ["## Pass rate by configuration", "", f"![pass rate by configuration]({plots['pass_rate']})",
              "", "| configuration | runs | passed | succeeded but wrong | failed | errors | "
              "pass rate | 95% interval |", "|---|---:|---:|---:|---:|---:|---:|---|"]
    for c in report.configs:
        lines.append(f"| {c.name} | {c.runs} | {c.passed} | {c.succeeded_but_wrong} | {c.failed} | "
                     f"{c.errors} | {percent(c.pass_rate)} | {percent(c.interval[0])} – "
                     f"{percent(c.interval[1])} |")
    lines += ["", "*Succeeded but wrong*: the engine said `succeeded` and a check failed — counted "
              "apart from the failures, since nothing signals it. *Errors*: runs that could not be "
              "run or graded (a replay that asked something not recorded, ...).", ""]

    lines += ["## What each layer recovered", "", f"![faults recovered per layer]({plots['layers']})",
              "", "Faults recovered (runs in which the layer recovered one, of them passed), and "
              "what each layer spent on LLM calls.", ""]
    header = "| layer | " + " | ".join(f"{c.name}: recovered (runs, passed) | {c.name}: LLM calls / "
                                       "tokens / cost" for c in report.configs) + " |"
    lines += [header, "|---|" + "---:|---:|" * len(report.configs)]
    layer_names: list[str] = []
    for c in report.configs:
        layer_names += [row.layer for row in c.layers if row.layer not in layer_names]
    for layer in layer_names:
        cells = []
        for c in report.configs:
            row = next((r for r in c.layers if r.layer == layer), None)
            if row is None:
                cells += ["-", "-"]
                continue
            spend = (f"{row.llm.calls} / {row.llm.tokens} / {format_cost(row.llm.cost)}"
                     if row.llm.calls else "-")
            cells += [f"{row.recovered} ({row.runs}, {row.passed_runs})", spend]
        lines.append(f"| {LAYER_LABELS.get(layer, layer)} | " + " | ".join(cells) + " |")
    for label, count in (("grounding refusals", lambda c: c.grounding_refusals),
                         ("unrecovered faults", lambda c: sum(c.unrecovered.values()))):
        lines.append(f"| {label} | " + " | ".join(f"{count(c)} | " for c in report.configs)
                     .rstrip() + " |")
    lines.append("")
    for c in report.configs:
        if c.unrecovered:
            lines.append(f"Unrecovered under {c.name}: " + ", ".join(
                f"`{label}` ×{n}" for label, n in c.unrecovered.items()) + ".")
    lines.append("")

    lines += ["## Runs", "", "| configuration | case | outcome | run status | recovered by | "
              "why it did not pass | run |", "|---|---|---|---|---|---|---|"]
    for r in report.results:
        tag = f"#{r.repeat}" if report.repeat > 1 else ""
        lines.append(f"| {r.config} | {r.case}{tag} | {r.outcome.replace('_', ' ')} | "
                     f"{r.status or '-'} | {_cell(_recovered_by(r))} | {_cell(r.why()) or '-'} | "
                     f"`{r.run_id or '-'}` |")
    lines.append("")

    worst = worst_cases(report, 10)
    if worst:
        lines += ["## Worst cases", ""]
        for r in worst:
            lines += [f"### {r.config} · {r.case} — {r.outcome.replace('_', ' ')}", "",
                      f"Query: {r.query}", ""]
            for check in r.failed_checks:
                lines.append(f"- ✗ {check.name}" + (f" — {check.detail}" if check.detail else ""))
            if r.error:
                lines.append(f"- error: {r.error}")
            if r.attribution is not None:
                for fault in r.attribution.unrecovered[:5]:
                    lines.append(f"- unrecovered fault at step `{fault.step}` attempt "
                                 f"{fault.attempt}: `{fault.label}` {fault.detail}")
            if r.run_id:
                lines += ["", f"`dagwright runs show {r.run_id}`"]
            lines.append("")

    comparison = report.baseline
    if comparison is not None:
        lines += ["## Baseline", "", f"Compared with `{comparison.baseline}`: "
                  + ("**regression**." if comparison.regressed else "no regression."), ""]
        lines += [f"- {reason}" for reason in comparison.reasons()]
        lines += [f"- now passes: {c.config} · {c.case} ({c.baseline} → {c.now})"
                  for c in comparison.improvements]
        lines += [f"- not compared: {what}" for what in comparison.not_compared]
        lines.append("")

    lines += ["## Configurations", ""]
    for c in report.configs:
        settings = ", ".join(f"`{k}={v}`" for k, v in c.settings.items()) or "the environment's"
        lines.append(f"- **{c.name}**" + (f" (`{c.source}`)" if c.source else "") + f": {settings}")
    if report.judge is not None:
        j = report.judge
        lines += ["", f"LLM judge (apart from the pass rate): {j.calls} calls, "
                  f"{j.input_tokens + j.output_tokens} tokens, {j.failures} without a verdict."]
    return "\n".join(lines).rstrip() + "\n"
