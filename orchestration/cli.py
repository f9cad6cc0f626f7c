"""The ``dagwright`` command: run and plan queries, inspect the catalog, settings, runs and
LLM exchanges, decide approvals, serve the HTTP API, host Temporal workers, and try the
offline demo.

Every command whose output is data takes ``--json``. Every error says what was wrong and
ends with what to do next; the exit code says which kind of outcome it was
(:data:`EXIT_CODES`, also in ``dagwright --help`` and docs/troubleshooting.md).
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import logging
import sys
import textwrap
import warnings
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TextIO, TypeVar, cast, get_args

from prometheus_client import CollectorRegistry

from orchestration._cli_kit import (
    AmbiguousRunId,
    SuggestingParser,
    progress_lock,
    quiet_closed_pipe,
    resolve_run_id,
    write_line,
)
from orchestration._extras import needs_extra
from orchestration._json import UnreadableJSON, decode
from orchestration._text import closest
from orchestration._version import __version__
from orchestration.catalog import Catalog
from orchestration.config import OrchestratorConfig
from orchestration.errors import (
    ApprovalError,
    CatalogError,
    ConfigError,
    DagwrightError,
    PlanningError,
    RunLeased,
    RunNotFound,
    StoreError,
)
from orchestration.events import RunEvent
from orchestration.llm.scripted import ScriptedLLM
from orchestration.orchestrator import Orchestrator
from orchestration.plan import ValidatedPlan
from orchestration.redaction import DEFAULT_REDACTOR, Redactor
from orchestration.result import Approval, PendingApproval, RunResult, RunStatus, StepResult
from orchestration.store import RunStore

__all__ = ["EXIT_CODES", "RedactingOutput", "build_parser", "main", "render_plan",
           "render_result"]

T = TypeVar("T")
SYMBOLS = {"succeeded": "✔", "failed": "✘", "skipped": "⊘", "unknown": "?"}

EXIT_OK, EXIT_RUN_FAILED, EXIT_USAGE, EXIT_PLANNING, EXIT_BUDGET, EXIT_INTERRUPTED = 0, 1, 2, 3, 4, 130
EXIT_AWAITING_APPROVAL, EXIT_CLOSED_PIPE = 5, 141
EXIT_CODES: dict[int, str] = {
    EXIT_OK: "success (a run: every step succeeded)",
    EXIT_RUN_FAILED: "the run ended partial or failed (steps failed); demo: a scenario "
                     "misbehaved; debug: no exchanges of that run",
    EXIT_USAGE: "usage or configuration error (arguments, ORCH_* settings, the catalog); "
                "nothing ran",
    EXIT_PLANNING: "planning failed: no valid plan (LLM unreachable, refused, unusable answers)",
    EXIT_BUDGET: "a budget stopped the run (LLM calls, tokens, cost, or calls of a capability)",
    EXIT_AWAITING_APPROVAL: "the run is paused, waiting for a person: `dagwright approve "
                            "RUN_ID STEP_ID` (or `reject`) continues it; nothing failed",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C)",
    EXIT_CLOSED_PIPE: "stdout was closed before the output ended (`| head`); the rest of "
                      "the output was dropped quietly",
}

# who produced the parameters of a step's last attempt, in words
FIXED_BY = {
    "resilience": "resilience (same parameters after a transport fault)",
    "validation_feedback": "layer 3 (validation feedback)",
    "semantic_retry": "layer 4 (semantic retry)",
    "transient_override": "layer 4 (error judged transient)",
}
_DEBUG_HINT = ("set ORCH_LLM_DEBUG_ENABLED=true and run again, then `dagwright debug {run_id}` "
               "shows every prompt and answer")


# --- rendering -------------------------------------------------------------------------------

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
        """Text already redacted (a document redacted as values: :func:`_write_run_data`)."""
        self._out.write(text)

    def flush(self) -> None:
        self._out.flush()


def _use_redactor(out: TextIO, redactor: Redactor) -> None:
    if isinstance(out, RedactingOutput):
        out.redactor = redactor


def _write_run_data(out: TextIO, value: Any) -> None:
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
        children = list(plan.graph.successors(step_id))
        child_prefix = prefix + ("   " if last else "│  ")
        if step_id in seen:
            return
        seen = seen | {step_id}
        for index, child in enumerate(children):
            show(child, child_prefix, index == len(children) - 1, seen)

    for index, root in enumerate(roots):
        show(root, "  ", index == len(roots) - 1, set())


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
    out.write(f"  status: {result.status} | LLM calls: {u.llm_calls} "
              f"(tokens in/out {u.input_tokens}/{u.output_tokens}){cost} | "
              f"{u.wall_time_s * 1000:.0f} ms\n")
    if result.status != "succeeded" and result.error:
        out.write(f"  reason: {result.error}\n")
    for warning in result.warnings:
        out.write(f"  warning: {warning}\n")
    if result.answer:
        out.write("  answer:\n" + "".join(f"    {line}\n" for line in result.answer.splitlines()))


def _next_steps(result: RunResult) -> str | None:
    """What to do about a run that did not succeed."""
    if result.status == "succeeded":
        return None
    if result.status == "awaiting_approval":
        steps = [p.step_id for p in result.pending_approvals] or ["STEP_ID"]
        approve = " or ".join(f"`dagwright approve {result.run_id} {s}`" for s in steps)
        return (f"waiting for approval: {approve} sends the call as shown (--params edits "
                f"it), `dagwright reject {result.run_id} {steps[0]} --note WHY` skips it; "
                f"`dagwright approvals list {result.run_id}` shows the exact parameters")
    if result.budget_exceeded is not None:
        report = result.budget_exceeded
        return (f"raise {report.setting} if the run needs more, or see where it spent: "
                "`dagwright run --json` shows usage by purpose and calls per capability")
    debug = _DEBUG_HINT.format(run_id=result.run_id)
    if result.plan is None:
        return (f"check the LLM settings with `dagwright config` (docs/troubleshooting.md "
                f"explains each error); {debug}")
    return (f"each failed step above shows every attempt and why the layers stopped; {debug}")


def exit_code_of(result: RunResult) -> int:
    """The exit code of a finished run (see :data:`EXIT_CODES`)."""
    if result.status == "succeeded":
        return EXIT_OK
    if result.status == "awaiting_approval":
        return EXIT_AWAITING_APPROVAL
    if result.budget_exceeded is not None:
        return EXIT_BUDGET
    if result.plan is None:
        return EXIT_PLANNING
    return EXIT_RUN_FAILED


# --- commands --------------------------------------------------------------------------------

def _catalog_for(args: argparse.Namespace, config: OrchestratorConfig) -> Catalog:
    """``--catalog`` wins over ``ORCH_CATALOG``."""
    path = getattr(args, "catalog", None) or config.catalog
    if path is None:
        raise ConfigError("no catalog: set ORCH_CATALOG or pass --catalog FILE "
                          "(config/catalog.example.yaml is an example)")
    return Catalog.from_file(path)


def cmd_demo(args: argparse.Namespace, out: TextIO) -> int:
    from orchestration.demo.scenarios import scenarios, scripted_llm_for

    known = [s.name for s in scenarios()]
    if args.list:
        for scenario in scenarios():
            out.write(f"{scenario.name:12} {scenario.shows}\n")
        return EXIT_OK
    unknown = [name for name in args.scenario if name not in known]
    if unknown:
        hints = []
        for name in unknown:
            near = closest(name, known)
            hints.append(f"{name!r}" + (f" (did you mean {near!r}?)" if near else ""))
        raise UsageError(f"unknown demo scenario {', '.join(hints)}; the scenarios are: "
                         f"{', '.join(known)}", "`dagwright demo --list` describes each")

    from orchestration.demo.tools import start_demo_tools

    out.write("dagwright demo — the LLM in this demo is SCRIPTED (no model is called):\n"
              "its plans and answers are fixed per scenario. The tools are real HTTP\n"
              "services on 127.0.0.1 and every engine layer runs for real.\n\n")
    failures = []
    with start_demo_tools() as tools:
        catalog = Catalog.from_dict(tools.catalog_dict(), source="demo tools")
        out.write("Demo tools: " + ", ".join(f"{n} at {u}" for n, u in tools.urls.items()) + "\n")
        selected = [s for s in scenarios() if not args.scenario or s.name in args.scenario]
        for scenario in selected:
            tools.reset()
            if scenario.setup:
                scenario.setup(tools)
            orch = Orchestrator(
                catalog=catalog, llm=ScriptedLLM(scripted_llm_for(scenario)),
                config=OrchestratorConfig(llm_provider="scripted", retry_base_delay_s=0.05),
                registry=CollectorRegistry(),
            )
            out.write(f"\n=== scenario {scenario.name}: {scenario.query}\n")
            out.write(f"    shows: {scenario.shows}\n")
            result = orch.run(scenario.query)
            _render_plan_of(result, catalog, out)
            render_result(result, out)
            ok = result.status == scenario.expect_status
            out.write(f"  => {'as expected' if ok else 'UNEXPECTED'} "
                      f"(expected {scenario.expect_status}, got {result.status})\n")
            if not ok:
                failures.append(scenario.name)
    out.write("\n" + (f"FAILED scenarios: {', '.join(failures)}\n" if failures
                      else f"All {len(selected)} scenarios behaved as expected.\n"))
    return EXIT_RUN_FAILED if failures else EXIT_OK


def _render_plan_of(result: RunResult, catalog: Catalog, out: TextIO) -> None:
    if result.plan is None:
        return
    from orchestration.plan import Plan, validate_plan

    out.write("  plan:\n")
    render_plan(validate_plan(Plan.model_validate(result.plan), catalog), out)


def cmd_run(args: argparse.Namespace, out: TextIO) -> int:
    from orchestration.logging_setup import configure_logging
    from orchestration.telemetry import serve_metrics
    from orchestration.telemetry.exporters import tracer_provider_from_config

    config = OrchestratorConfig()
    catalog = _catalog_for(args, config)
    log_handler = configure_logging(config, level=_log_level(args, config))
    progress = None if _quiet(args) else Progress(sys.stderr)
    if progress is not None and isinstance(log_handler, logging.StreamHandler):
        log_handler.setStream(progress.log_stream())  # log lines above the live table
    announced: list[str] = []

    def on_event(event: RunEvent) -> None:
        if not announced:  # the run id as soon as it exists, flushed: a pipe sees it now
            announced.append(event.run_id)
            if not args.json:
                write_line(out, f"run {event.run_id}")
        if progress is not None:
            progress(event)

    provider = tracer_provider_from_config(config)
    port = args.metrics_port if args.metrics_port is not None else config.metrics_port
    metrics_server = (serve_metrics(port, addr=config.metrics_host) if port is not None
                      else None)
    try:
        orch = Orchestrator.from_env(config=config, catalog=catalog, tracer_provider=provider)
        _use_redactor(out, orch.redactor)
        try:
            result = orch.run(args.query, on_event=on_event)
        finally:
            orch.close()  # MCP servers the catalog started
    finally:
        if provider is not None:
            provider.shutdown()  # flush batched spans before the process ends
        if metrics_server is not None:
            metrics_server.close()
    if args.json:
        _write_run_data(out, result.to_dict())
    else:
        if not announced:
            out.write(f"run {result.run_id}\n")
        _render_plan_of(result, catalog, out)
        out.write("  steps:\n" if result.steps else "")
        render_result(result, out)
        if result.trace_id:
            out.write(f"  trace: {result.trace_id}\n")
        advice = _next_steps(result)
        if advice:
            out.write(f"  next: {advice}\n")
    return exit_code_of(result)


def cmd_plan(args: argparse.Namespace, out: TextIO) -> int:
    config = OrchestratorConfig()
    orch = Orchestrator.from_env(config=config, catalog=_catalog_for(args, config))
    try:
        plan = asyncio.run(orch.plan(args.query))
    finally:
        orch.close()
    if args.json:
        _write_run_data(out, plan.to_dict())
    else:
        render_plan(plan, out)
    return EXIT_OK


def cmd_tools(args: argparse.Namespace, out: TextIO) -> int:
    catalog = _catalog_for(args, OrchestratorConfig())
    try:
        if args.schema:
            tool, dot, name = args.schema.partition(".")
            if not dot:
                raise UsageError(f"--schema takes tool.capability, got {args.schema!r}",
                                 "`dagwright tools` lists the capabilities")
            out.write(json.dumps(catalog.get(tool, name).input_schema, indent=2) + "\n")
            return EXIT_OK
        if args.json:
            out.write(json.dumps(catalog.to_dict(skip_unnamed_functions=True), indent=2) + "\n")
            return EXIT_OK
        if args.skipped:
            for note in [*catalog.skipped, *catalog.notes]:
                out.write(f"{note}\n")
            out.write(f"{len(catalog.skipped)} left out, {len(catalog.notes)} note(s), "
                      f"{len(catalog)} capabilities\n")
            return EXIT_OK
        for cap in catalog:
            target = cap.url or ("python" if cap.function is not None else "")
            flags = "".join(f" [{f}]" for f, on in (("idempotent", cap.is_idempotent),
                                                    ("requires approval", cap.requires_approval))
                            if on)
            if cap.max_calls_per_run:
                flags += f" [at most {cap.max_calls_per_run} calls per run]"
            method = cap.method if cap.url or cap.source.startswith("openapi:") else ""
            out.write(f"{cap.key:32} {method:6} {target}\n"
                      f"    source: {cap.source}{flags}\n    {cap.description}\n")
        if catalog.skipped:
            out.write(f"({len(catalog.skipped)} operation(s) left out: dagwright tools --skipped)\n")
    finally:
        catalog.close()  # MCP servers the catalog started
    return EXIT_OK


def cmd_debug(args: argparse.Namespace, out: TextIO) -> int:
    from orchestration.debug_store import read_run, render_run

    path = Path(args.path) if args.path else OrchestratorConfig().llm_debug_path
    if not path.exists() and not path.with_name(path.name + ".1").exists():
        raise UsageError(f"no LLM debug store at {path}",
                         "set ORCH_LLM_DEBUG_ENABLED=true before the run (and "
                         "ORCH_LLM_DEBUG_PATH to choose the file), or pass --path FILE")
    try:
        records = read_run(path, args.run_id)
    except ValueError as exc:
        raise UsageError(str(exc), "give more characters of the run id") from exc
    if not records:
        _error(f"no LLM exchanges of run {args.run_id!r} in {path}",
               "`dagwright run` prints the run id on its first line; the run must have "
               "happened with ORCH_LLM_DEBUG_ENABLED=true")
        return EXIT_RUN_FAILED
    if args.json:
        for record in records:
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
    else:
        out.write(render_run(records, full=not args.brief))
    return EXIT_OK


def cmd_config(args: argparse.Namespace, out: TextIO) -> int:
    values = OrchestratorConfig().effective_values()
    if args.json:
        out.write(json.dumps(values, indent=2, default=str) + "\n")
        return EXIT_OK
    for name, value in values.items():
        if value is None:  # a comment: sourcing the output leaves it unset, as it is
            out.write(f"# {name} is unset\n")
        else:
            out.write(f"{name}={json.dumps(value) if not isinstance(value, str) else value}\n")
    return EXIT_OK


def cmd_serve_tools(args: argparse.Namespace, out: TextIO) -> int:
    from orchestration.demo.tools import serve_forever

    serve_forever(port=args.port, out=out)
    return EXIT_OK


# --- the parser --------------------------------------------------------------------------------

def _epilog() -> str:
    codes = "\n".join(textwrap.fill(meaning, 96, initial_indent=f"  {code:<4} ",
                                     subsequent_indent=" " * 7)
                       for code, meaning in EXIT_CODES.items())
    return (f"exit codes:\n{codes}\n\nSettings are ORCH_* variables (`dagwright config` lists "
            "them); docs/troubleshooting.md explains every error message.")


# --- run history: runs list / runs show / resume ---------------------------------------
def _read_store(read: Callable[[RunStore], Awaitable[T]]) -> T:
    """Read the run store ORCH_STORE_URL names: history needs neither a catalog nor an LLM."""
    from orchestration.store import open_store

    async def main() -> T:
        store = open_store(OrchestratorConfig().store_url)
        await store.open()
        try:
            return await read(store)
        finally:
            await store.close()

    return asyncio.run(main())


def _when(timestamp: float | None) -> str:
    import time

    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(timestamp)) if timestamp else "-"


def cmd_runs_list(args: argparse.Namespace, out: TextIO) -> int:
    runs = _read_store(lambda store: store.list_runs(status=args.status, limit=args.limit))
    if args.json:
        _write_run_data(out, [r.model_dump(mode="json") for r in runs])
        return 0
    if not runs:
        out.write(f"no runs in {OrchestratorConfig().store_url}\n")
        return 0
    for r in runs:
        steps = ", ".join(f"{n} {status}" for status, n in sorted(r.steps.items())) or "no steps"
        out.write(f"{r.run_id:34} {r.status:10} {_when(r.started_at)}  {steps}\n"
                  f"    {r.query[:100]}\n")
    return 0


def _full_run_id(given: str) -> str:
    """The run id a prefix names (see :func:`resolve_run_id`), read from the store."""
    return _read_store(lambda store: resolve_run_id(store, given))


def cmd_runs_show(args: argparse.Namespace, out: TextIO) -> int:
    args.run_id = _full_run_id(args.run_id)
    stored = _read_store(lambda store: store.load(args.run_id))
    result = None if stored is None else stored.state.to_result()
    if result is None:
        raise DagwrightError(f"no run {args.run_id!r} in {OrchestratorConfig().store_url}; "
                             "'dagwright runs list' shows the runs it holds")
    if args.json:
        _write_run_data(out, result.to_dict())
        return 0
    out.write(f"run {result.run_id}: {result.query}\n")
    render_result(result, out)
    if result.error:
        out.write(f"  error: {result.error}\n")
    return 0


def cmd_resume(args: argparse.Namespace, out: TextIO) -> int:
    if OrchestratorConfig().catalog is None:
        raise DagwrightError("resuming a run calls its tools: set ORCH_CATALOG to the catalog "
                             "the run was started with")
    args.run_id = _full_run_id(args.run_id)
    orch = Orchestrator.from_env()
    try:
        result = orch.resume(args.run_id)
    finally:
        orch.close()
    if args.json:
        _write_run_data(out, result.to_dict())
    else:
        out.write(f"run {result.run_id}: {result.query}\n")
        render_result(result, out)
        advice = _next_steps(result)
        if advice:
            out.write(f"  next: {advice}\n")
    return exit_code_of(result)


class Progress:
    """Live progress of a run from its events, on stderr (stdout stays the result).

    On a terminal: a table of steps redrawn in place as they change. Otherwise (a pipe,
    a log file): one plain line per step event. Log lines go above the table
    (:meth:`log_stream`), never through it.
    """

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.rows: dict[str, str] = {}
        self.drawn = 0
        self.planned = False
        self.waiting: list[str] = []

    def __call__(self, event: RunEvent) -> None:
        data = event.data
        with progress_lock():
            self._event(event, data)

    def _event(self, event: RunEvent, data: dict[str, Any]) -> None:
        if event.type == "plan_ready":
            started = f", {len(self.rows)} started as it streamed in" if self.rows else ""
            self._line(f"plan ready: {data['steps']} step(s){started} [run {event.run_id}]")
            self.planned = True
        elif event.type == "plan_discarded":
            for step_id in data["steps"]:  # started while the plan streamed: void now
                self.rows.pop(step_id, None)
            self._line(f"plan discarded: {data['reason']}")
        elif event.type == "step_started":
            if not self.planned and not self.rows:
                self._line(f"planning: steps start as the plan streams in [run {event.run_id}]")
            self._step(data["step_id"], f"running   {data['tool']}.{data['capability']}")
        elif event.type == "attempt_finished" and data["outcome"] != "succeeded":
            self._step(data["step_id"], f"attempt {data['attempt']} {data['outcome']} "
                                        f"({data.get('error_code') or '-'}, by {data['layer']})")
        elif event.type == "step_finished":
            self._step(data["step_id"], f"{data['status']:9} after {data['attempts']} attempt(s)")
        elif event.type == "approval_required":
            self.waiting.append(data["step_id"])
            self._step(data["step_id"], f"waiting for approval: {data['reason']}")
        elif event.type == "run_finished":
            if data["status"] == "awaiting_approval":
                steps = ", ".join(self.waiting) or "a step"
                self._line(f"run {event.run_id} waiting for approval ({steps})")
            else:
                self._line(f"run {event.run_id} {data['status']}")

    def log_stream(self) -> TextIO:
        """A stream for a log handler: each line is written above the table."""
        progress = self

        class Above(io.TextIOBase):
            def write(self, text: str) -> int:
                progress.log_line(text.rstrip("\n"))
                return len(text)

        return cast(TextIO, Above())

    def log_line(self, text: str) -> None:
        with progress_lock():
            if self.tty and self.drawn:
                self.stream.write(f"\x1b[{self.drawn}A\x1b[J")  # up over the table, clear it
            self.stream.write(text + "\n")
            if self.tty and self.drawn:
                self._draw()
            self.stream.flush()

    def _line(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.drawn = 0  # the table starts again below this line
        self.stream.flush()

    def _step(self, step_id: str, text: str) -> None:
        self.rows[step_id] = text
        if not self.tty:
            self.stream.write(f"  {step_id}: {text}\n")
        else:
            if self.drawn:
                self.stream.write(f"\x1b[{self.drawn}A")
            self._draw()
        self.stream.flush()

    def _draw(self) -> None:
        for sid, row in self.rows.items():
            self.stream.write(f"\x1b[2K  {sid:20} {row}\n")
        self.drawn = len(self.rows)


def _pending(run_id: str | None) -> list[tuple[str, PendingApproval]]:
    """Pending approvals of one run, or of every run that waits."""
    async def read(store: RunStore) -> list[tuple[str, PendingApproval]]:
        if run_id is not None:
            stored = await store.load(run_id)
            runs = [stored] if stored is not None else []
        else:
            runs = [s for r in await store.list_runs(status="awaiting_approval", limit=500)
                    if (s := await store.load(r.run_id)) is not None]
        return [(s.state.run_id, p) for s in runs for p in s.state.pending_approvals]

    return _read_store(read)


def cmd_approvals_list(args: argparse.Namespace, out: TextIO) -> int:
    pending = _pending(_full_run_id(args.run_id) if args.run_id else None)
    if args.json:
        _write_run_data(out, [{"run_id": rid, **p.model_dump(mode="json")}
                             for rid, p in pending])
        return 0
    if not pending:
        out.write("no approvals are pending\n")
    for rid, p in pending:
        what = f"{p.tool}.{p.capability}" if p.tool else "the whole plan"
        out.write(f"{rid} {p.step_id}: {what} — {p.reason}\n    params: {json.dumps(p.params)}\n")
    return 0


def _decide(args: argparse.Namespace, out: TextIO, approved: bool) -> int:
    params = None
    if approved and args.params is not None:
        try:  # the engine's bounded decoder, as for every JSON a person or tool sends
            params = decode(args.params, max_depth=OrchestratorConfig().max_json_depth)
        except UnreadableJSON as exc:
            raise DagwrightError(f"--params is not JSON this command accepts: {exc}") from exc
        if not isinstance(params, dict):
            raise DagwrightError("--params must be a JSON object of the step's parameters")
    if OrchestratorConfig().catalog is None:
        raise DagwrightError("deciding continues the run, which calls its tools: set "
                             "ORCH_CATALOG to the catalog the run was started with")
    args.run_id = _full_run_id(args.run_id)
    orch = Orchestrator.from_env()
    try:
        result = orch.resume(args.run_id, approvals={
            args.step_id: Approval(approved=approved, params=params, note=args.note)},
            on_event=Progress(sys.stderr))
    finally:
        orch.close()
    if args.json:
        _write_run_data(out, result.to_dict())
    else:
        render_result(result, out)
        advice = _next_steps(result)
        if advice:
            out.write(f"  next: {advice}\n")
    return exit_code_of(result)


def cmd_approve(args: argparse.Namespace, out: TextIO) -> int:
    return _decide(args, out, approved=True)


def cmd_reject(args: argparse.Namespace, out: TextIO) -> int:
    return _decide(args, out, approved=False)


def _add_run_history_commands(sub: Any) -> None:
    runs = sub.add_parser("runs", help="the run history in the run store (ORCH_STORE_URL)")
    runs_sub = runs.add_subparsers(dest="runs_command", required=True)
    listing = runs_sub.add_parser("list", help="recent runs, newest first")
    listing.add_argument("--status", choices=get_args(RunStatus), metavar="STATUS",
                         help="only runs with this status: " + ", ".join(get_args(RunStatus)))
    listing.add_argument("--limit", type=int, default=50)
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(fn=cmd_runs_list)
    show = runs_sub.add_parser("show", help="one run: its steps, attempts and answer")
    show.add_argument("run_id")
    show.add_argument("--json", action="store_true", help="print the RunResult as JSON")
    show.set_defaults(fn=cmd_runs_show)
    resume = sub.add_parser("resume", help="continue a run whose process stopped (needs "
                            "ORCH_CATALOG); finished steps are not run again")
    resume.add_argument("run_id")
    resume.add_argument("--json", action="store_true")
    resume.set_defaults(fn=cmd_resume)
    approvals = sub.add_parser("approvals", help="calls waiting for a person")
    approvals_sub = approvals.add_subparsers(dest="approvals_command", required=True)
    pending = approvals_sub.add_parser("list", help="pending approvals, of one run or of all")
    pending.add_argument("run_id", nargs="?")
    pending.add_argument("--json", action="store_true")
    pending.set_defaults(fn=cmd_approvals_list)
    approve = sub.add_parser("approve", help="approve a pending call and continue the run")
    approve.add_argument("run_id")
    approve.add_argument("step_id", help="the step (or @plan for the whole plan)")
    approve.add_argument("--params", metavar="JSON",
                         help="an edit of the proposed parameters as a JSON object, merged "
                         "onto them (RFC 7396): name only the keys you change, e.g. "
                         "'{\"amount\": 200}'; null removes a key; the result is validated "
                         "as a whole. For @plan: a whole replacement plan")
    approve.add_argument("--note")
    approve.add_argument("--json", action="store_true")
    approve.set_defaults(fn=cmd_approve)
    reject = sub.add_parser("reject", help="reject a pending call; the run goes on without it")
    reject.add_argument("run_id")
    reject.add_argument("step_id")
    reject.add_argument("--note", required=True, help="why (kept in the step's error)")
    reject.add_argument("--json", action="store_true")
    reject.set_defaults(fn=cmd_reject)


# --- dagwright serve: the HTTP API and run viewer (orchestration/server, serve extra) ---
def cmd_serve(args: argparse.Namespace, out: TextIO) -> int:
    try:
        from orchestration.server import serve
    except ImportError as exc:
        raise DagwrightError(needs_extra("dagwright serve", "serve", exc.name)) from exc
    return serve(host=args.host, port=args.port, insecure=args.insecure, out=out)


def _add_serve_command(sub: Any) -> None:
    http = sub.add_parser("serve", help="serve the HTTP API (/v1) and the run viewer (/ui); "
                          "settings ORCH_SERVE_*, needs ORCH_CATALOG")
    http.add_argument("--host", help="address to listen on (default: ORCH_SERVE_HOST, 127.0.0.1)")
    http.add_argument("--port", type=int, help="port (default: ORCH_SERVE_PORT, 8080; 0: any)")
    http.add_argument("--insecure", action="store_true",
                      help="allow a non-loopback address without ORCH_SERVE_TOKEN")
    http.set_defaults(fn=cmd_serve)
# --- dagwright worker: host runs on Temporal (ORCH_BACKEND=temporal, the temporal extra) ---
def cmd_worker(args: argparse.Namespace, out: TextIO) -> int:
    try:
        from orchestration.temporal._worker import serve
    except ImportError as exc:
        raise DagwrightError(needs_extra("dagwright worker", "temporal", exc.name)) from exc
    overrides = {"temporal_task_queue": args.task_queue} if args.task_queue else {}
    return serve(OrchestratorConfig(**overrides), identity=args.identity)


def _add_worker_command(sub: Any) -> None:
    worker = sub.add_parser("worker", help="host runs on Temporal: poll the task queue for "
                            "run workflows and their tool and LLM calls (needs ORCH_CATALOG; "
                            "see docs/scale-out.md)")
    worker.add_argument("--identity", help="this worker's name in Temporal (default host:pid)")
    worker.add_argument("--task-queue", help="the task queue (default ORCH_TEMPORAL_TASK_QUEUE)")
    worker.set_defaults(fn=cmd_worker)


def _add_verbosity(parser: argparse.ArgumentParser, default: Any) -> None:
    """``-q``/``-v``: on the main parser (``dagwright -v run``) and on ``run`` itself
    (``dagwright run -v``), where ``default`` is SUPPRESS so as not to undo the first."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("-v", "--verbose", action="count", default=default if default else 0,
                       help="more log lines on stderr: -v INFO, -vv DEBUG (default: "
                       "warnings and errors, or ORCH_LOG_LEVEL when set)")
    group.add_argument("-q", "--quiet", action="store_true",
                       default=default if default else False,
                       help="no live progress on stderr and only error log lines; the "
                       "result on stdout and the exit code are unchanged")


def _quiet(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "quiet", False))


def _log_level(args: argparse.Namespace, config: OrchestratorConfig) -> str:
    """-q: errors; -v: INFO; -vv: DEBUG; else ORCH_LOG_LEVEL when set, else WARNING (the
    live progress already says what INFO lines would)."""
    verbose = int(getattr(args, "verbose", 0) or 0)
    if _quiet(args):
        return "ERROR"
    if verbose:
        return "DEBUG" if verbose > 1 else "INFO"
    return config.log_level if "log_level" in config.model_fields_set else "WARNING"


def build_parser() -> argparse.ArgumentParser:
    parser = SuggestingParser(
        prog="dagwright", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Plan a query into a DAG of tool calls with an LLM and run it reliably.",
        epilog=_epilog())
    parser.add_argument("--version", action="version", version=f"dagwright {__version__}")
    _add_verbosity(parser, None)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                title="commands")
    demo = sub.add_parser("demo", help="run the offline demo (scripted LLM, real HTTP tools)")
    demo.add_argument("scenario", nargs="*", help="only these scenarios (default: all)")
    demo.add_argument("--list", action="store_true", help="list the scenarios and what each shows")
    demo.set_defaults(fn=cmd_demo)
    run = sub.add_parser("run", help="plan and run one query with the configured LLM")
    run.add_argument("query")
    run.add_argument("--catalog", help="tool catalog file (default: ORCH_CATALOG)")
    run.add_argument("--json", action="store_true", help="print the RunResult as JSON")
    _add_verbosity(run, argparse.SUPPRESS)
    run.add_argument("--metrics-port", type=int, default=None,
                     help="serve Prometheus /metrics on this port during the run "
                     "(default: ORCH_METRICS_PORT)")
    run.set_defaults(fn=cmd_run)
    plan = sub.add_parser("plan", help="print the plan of a query without executing it")
    plan.add_argument("query")
    plan.add_argument("--catalog", help="tool catalog file (default: ORCH_CATALOG)")
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    plan.set_defaults(fn=cmd_plan)
    tools = sub.add_parser("tools", help="list (and check) the tool catalog: each capability "
                           "and where it comes from (file, MCP server, OpenAPI spec, Python)")
    tools.add_argument("--catalog", help="catalog file (default: ORCH_CATALOG)")
    tools.add_argument("--schema", metavar="NAME",
                       help="print the input JSON Schema of capability NAME (tool.capability)")
    tools.add_argument("--json", action="store_true",
                       help="print the catalog as JSON (what Catalog.from_dict reads)")
    tools.add_argument("--skipped", action="store_true",
                       help="print what the sources left out (with the JSON pointer and the "
                       "reason) or repaired")
    tools.set_defaults(fn=cmd_tools)
    debug = sub.add_parser("debug", help="show one run's LLM prompts and answers from the "
                           "debug store (ORCH_LLM_DEBUG_ENABLED)")
    debug.add_argument("run_id", help="the run id (or a unique prefix of it)")
    debug.add_argument("--path", help="debug store file (default: ORCH_LLM_DEBUG_PATH)")
    debug.add_argument("--json", action="store_true", help="print the raw JSONL records")
    debug.add_argument("--brief", action="store_true", help="cut each message to 500 chars")
    debug.set_defaults(fn=cmd_debug)
    config = sub.add_parser("config", help="print the effective ORCH_* settings (secrets masked)")
    config.add_argument("--json", action="store_true", help="print them as a JSON object")
    config.set_defaults(fn=cmd_config)
    serve = sub.add_parser("serve-tools", help="serve the demo tools on fixed ports until Ctrl-C")
    serve.add_argument("--port", type=int, default=8700)
    serve.set_defaults(fn=cmd_serve_tools)
    _add_run_history_commands(sub)
    _add_serve_command(sub)
    _add_worker_command(sub)
    _verbosity_everywhere(sub)
    return parser


def _verbosity_everywhere(sub: Any) -> None:
    """``-q``/``-v`` after any command too (``dagwright resume ID -q``, ``dagwright runs
    list -v``), as after ``run``: every command parser, nested ones included."""
    for command in sub.choices.values():
        if "-q" not in command._option_string_actions:
            _add_verbosity(command, argparse.SUPPRESS)
        for action in command._actions:
            if isinstance(action, argparse._SubParsersAction):
                _verbosity_everywhere(action)


# --- errors ------------------------------------------------------------------------------------

class UsageError(DagwrightError):
    """A command used wrongly; carries what to do next."""

    def __init__(self, message: str, next_step: str) -> None:
        super().__init__(message)
        self.next_step = next_step


def _next_for(exc: DagwrightError) -> str:
    if isinstance(exc, UsageError):
        return exc.next_step
    if isinstance(exc, AmbiguousRunId):
        return "`dagwright runs list` shows the run ids; give the whole id or a longer prefix"
    if isinstance(exc, ApprovalError):
        return ("`dagwright approvals list RUN_ID` shows what waits and its exact parameters "
                "(docs/troubleshooting.md#approvals)")
    if isinstance(exc, RunLeased):
        return ("wait for that process to end (or its lease, ORCH_STORE_LEASE_S, to expire), "
                "then `dagwright resume RUN_ID` (docs/troubleshooting.md#the-run-store)")
    if isinstance(exc, RunNotFound):
        return ("check ORCH_STORE_URL: `dagwright runs list` shows the runs that store holds "
                "(docs/troubleshooting.md#the-run-store)")
    if isinstance(exc, StoreError):
        return ("check that the run store ORCH_STORE_URL names is reachable and writable "
                "(docs/troubleshooting.md#the-run-store)")
    if isinstance(exc, ConfigError):
        return ("fix the setting (docs/configuration.md lists every ORCH_* variable and its "
                "values); `dagwright config` prints what is in effect")
    if isinstance(exc, CatalogError):
        return ("fix the catalog; `dagwright tools --catalog FILE` checks a catalog without "
                "running anything (docs/troubleshooting.md)")
    if isinstance(exc, PlanningError):
        return ("check the LLM settings with `dagwright config`; to see what the LLM "
                "answered, set ORCH_LLM_DEBUG_ENABLED=true and use `dagwright debug RUN_ID`")
    return "see docs/troubleshooting.md"


def _error(message: str, next_step: str) -> None:
    # stderr is a sink like any other: an error may quote a key or a catalog URL's password
    print(f"dagwright: error: {DEFAULT_REDACTOR.redact(message)}\n  next: {next_step}",
          file=sys.stderr)


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: TextIO | None = None, line: str | None = None) -> None:
    """Warnings as one line a user reads, not a source location."""
    print(f"dagwright: warning: {message}", file=sys.stderr)


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    out = cast(TextIO, RedactingOutput(out or sys.stdout))
    args = build_parser().parse_args(argv)
    fn: Callable[[argparse.Namespace, TextIO], int] = args.fn
    with warnings.catch_warnings():
        warnings.showwarning = _show_warning
        try:
            code: Any = fn(args, out)
            out.flush()  # a closed pipe shows here, not in the interpreter's last flush
        except BrokenPipeError:
            quiet_closed_pipe()
            return EXIT_CLOSED_PIPE
        except PlanningError as exc:
            _error(f"planning failed: {exc}", _next_for(exc))
            return EXIT_PLANNING
        except DagwrightError as exc:
            _error(str(exc), _next_for(exc))
            return EXIT_USAGE
        except KeyboardInterrupt:
            print("dagwright: interrupted", file=sys.stderr)
            return EXIT_INTERRUPTED
    return int(code)


if __name__ == "__main__":
    sys.exit(main())
