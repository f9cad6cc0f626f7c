"""How plans and run results read on a terminal, and the redaction every line of output
passes: the CLI's stdout is a sink like a log."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any, TextIO

from orchestration.catalog import Catalog
from orchestration.cli._step_advice import step_advice
from orchestration.plan import ValidatedPlan
from orchestration.redaction import DEFAULT_REDACTOR, Redactor
from orchestration.result import RunResult, StepResult

SYMBOLS = {"succeeded": "✔", "failed": "✘", "skipped": "⊘", "unknown": "?"}

# who produced the parameters of a step's last attempt, in words
FIXED_BY = {
    "resilience": "resilience (same parameters after a transport fault)",
    "validation_feedback": "layer 3 (validation feedback)",
    "semantic_retry": "layer 4 (semantic retry)",
    "transient_override": "layer 4 (error judged transient)",
}
_DEBUG_HINT = ("set ORCH_LLM_DEBUG_ENABLED=true and run again, then `dagwright debug {run_id}` "
               "shows every prompt and answer")


class RedactingOutput(io.TextIOBase):
    """The CLI's output is a sink like a log: everything written passes the redactor
    (catalog URLs with credentials, tool errors that echo a key, a RunResult as JSON).
    Commands that know more secrets (a catalog's, the LLM key) switch to their redactor."""

    def __init__(self, out: TextIO, redactor: Redactor = DEFAULT_REDACTOR) -> None:
        self._out = out
        self.redactor = redactor

    def write(self, text: str) -> int:
        self._out.write(self.redactor.redact(text))
        return len(text)

    def write_redacted(self, text: str) -> None:
        """Text already redacted (a document redacted as values: :func:`write_run_data`)."""
        self._out.write(text)

    def flush(self) -> None:
        self._out.flush()


def use_redactor(out: TextIO, redactor: Redactor) -> None:
    if isinstance(out, RedactingOutput):
        out.redactor = redactor


def write_run_data(out: TextIO, value: Any) -> None:
    """A JSON document of run data (a result, a plan, runs, approvals) redacted as values,
    the policy of ``dagwright serve``'s answers: the same document with the same keys,
    numbers and booleans, only secret strings masked (text redaction can only guess
    where a JSON string ends)."""
    redactor = out.redactor if isinstance(out, RedactingOutput) else DEFAULT_REDACTOR
    text = json.dumps(redactor.redact_value(value), indent=2) + "\n"
    if isinstance(out, RedactingOutput):
        out.write_redacted(text)
    else:
        out.write(text)


def render_plan(plan: ValidatedPlan, out: TextIO) -> None:
    """The DAG as an indented tree (a step with several parents appears under each)."""
    roots = [s for s in plan.order if not plan.dependencies(s)]

    def show(step_id: str, prefix: str, last: bool, seen: set[str]) -> None:
        step = plan.steps[step_id]
        params = json.dumps(step.params, separators=(", ", ": "))
        branch = "└─ " if last else "├─ "
        out.write(f"{prefix}{branch}{step_id}: {step.tool}.{step.capability}({params})\n")
        children = list(plan.downstream[step_id])
        child_prefix = prefix + ("   " if last else "│  ")
        if step_id in seen:
            return
        seen = seen | {step_id}
        for index, child in enumerate(children):
            show(child, child_prefix, index == len(children) - 1, seen)

    for index, root in enumerate(roots):
        show(root, "  ", index == len(roots) - 1, set())


def render_plan_of(result: RunResult, catalog: Catalog, out: TextIO) -> None:
    """The plan a run executed, validated against ``catalog`` to draw it; nothing if it
    never had one."""
    if result.plan is None:
        return
    from orchestration.plan import Plan, validate_plan

    out.write("  plan:\n")
    render_plan(validate_plan(Plan.model_validate(result.plan), catalog), out)


def _step_headline(step: StepResult) -> str:
    """``✔ fee [currency.convert] succeeded — fixed by layer 3 ..., 2 attempts, 14.0 ms``."""
    mark = SYMBOLS.get(step.status, "?")
    line = f"  {mark} {step.id} [{step.tool}.{step.capability}] {step.status}"
    if step.status == "succeeded" and step.attempts:
        last = step.attempts[-1]
        fixer = FIXED_BY.get(last.layer)
        if fixer is None and last.coercions:
            fixer = "layer 2 (type coercion)"
        if fixer:
            line += f" — fixed by {fixer}"
    if step.status != "skipped":
        line += f" — {len(step.attempts)} attempt(s), {step.duration_s * 1000:.1f} ms"
    return line


def render_result(result: RunResult, out: TextIO) -> None:
    """Each step's outcome (and the layer that fixed it) with its attempts, the run's
    status and usage, the reason it did not succeed, and the answer."""
    for step in result.steps.values():
        out.write(_step_headline(step) + "\n")
        for attempt in step.attempts:
            line = (f"      #{attempt.number} layer={attempt.layer} outcome={attempt.outcome}"
                    f" params={json.dumps(attempt.params)}")
            if attempt.delay_s:
                line += f" after {attempt.delay_s:.2f}s"
            out.write(line + "\n")
            for change in attempt.coercions:
                out.write(f"         coerced {change.path}: {change.old!r} → {change.new!r}\n")
            if attempt.analysis:
                out.write(f"         analysis: {attempt.analysis}\n")
            if attempt.note:  # a person's decision, with the note they gave
                out.write(f"         note: {attempt.note}\n")
            if attempt.error is not None:
                out.write(f"         error: {attempt.error.category.value}/{attempt.error.code}: "
                          f"{attempt.error.message[:200]}\n")
        if step.status == "succeeded":
            out.write(f"      output: {json.dumps(step.output)[:300]}\n")
        if step.skipped_reason:
            out.write(f"      skipped: {step.skipped_reason}\n")
        if step.status in ("failed", "unknown") and step.error is not None:
            out.write(f"      {step.status}: {step.error.category.value}/{step.error.code}: "
                      f"{step.error.message[:200]}\n")
        if step.error is not None and step.error.details.get("gave_up"):
            out.write(f"      stopped: {step.error.details['gave_up']}\n")
    u = result.usage
    cost = f" | cost {u.cost:.4g}" if u.cost is not None else ""
    source = (f" | plan: {result.plan_source}"
              if result.plan_source not in (None, "llm") else "")
    # a run still running (here or elsewhere), or whose process stopped, has no time yet:
    # its usage says 0, which is no duration
    took = "not finished" if result.status == "running" else f"{u.wall_time_s * 1000:.0f} ms"
    out.write(f"  status: {result.status} | LLM calls: {u.llm_calls} "
              f"(tokens in/out {u.input_tokens}/{u.output_tokens}){cost}{source} | {took}\n")
    if result.workflow is not None:
        workflow = result.workflow
        out.write(f"  workflow: {workflow.name} (revision {workflow.revision}) inputs: "
                  f"{json.dumps(workflow.inputs, ensure_ascii=False)}\n")
        for name, value in workflow.outputs.items():
            out.write(f"    output {name}: {json.dumps(value, ensure_ascii=False)[:300]}\n")
    if result.status != "succeeded" and result.error:
        out.write(f"  reason: {result.error}\n")
    for warning in result.warnings:
        out.write(f"  warning: {warning}\n")
    if result.answer:
        out.write("  answer:\n" + "".join(f"    {line}\n" for line in result.answer.splitlines()))


def next_steps(result: RunResult, credentials_file: Path | None = None) -> str | None:
    """What to do about a run that did not succeed. ``credentials_file``: the run was
    given per-run credentials from it, which a decision must give again (never stored)."""
    if result.status == "succeeded":
        return None
    if result.status == "awaiting_approval":
        steps = [p.step_id for p in result.pending_approvals] or ["STEP_ID"]
        again = f" --credentials-file {credentials_file}" if credentials_file else ""
        approve = " or ".join(f"`dagwright approve {result.run_id} {s}{again}`" for s in steps)
        return (f"waiting for approval: {approve} sends the call as shown (--params edits "
                f"it), `dagwright reject {result.run_id} {steps[0]} --note WHY{again}` skips "
                f"it; `dagwright approvals list {result.run_id}` shows the exact parameters")
    if result.budget_exceeded is not None:
        report = result.budget_exceeded
        return (f"raise {report.setting} if the run needs more, or see where it spent: "
                "`dagwright run --json` shows usage by purpose and calls per capability")
    debug = _DEBUG_HINT.format(run_id=result.run_id)
    if result.plan is None:
        return (f"check the LLM settings with `dagwright config` (docs/troubleshooting.md "
                f"explains each error); {debug}")
    advice, others = step_advice(result)
    if others or not advice:
        advice.append(f"each failed step above shows every attempt and why the layers "
                      f"stopped; {debug}")
    return "; ".join(advice)


def write_next_steps(result: RunResult, out: TextIO,
                     credentials_file: Path | None = None) -> None:
    """The ``next:`` line under a result that did not succeed."""
    advice = next_steps(result, credentials_file)
    if advice:
        out.write(f"  next: {advice}\n")
