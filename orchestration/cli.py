"""The ``dagwright`` command: demo, run, plan, tools, config, serve-tools."""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import sys
from typing import Any, TextIO, cast

from prometheus_client import CollectorRegistry

from orchestration.catalog import Catalog
from orchestration.config import OrchestratorConfig
from orchestration.errors import DagwrightError
from orchestration.llm.scripted import ScriptedLLM
from orchestration.orchestrator import Orchestrator
from orchestration.plan import ValidatedPlan
from orchestration.redaction import DEFAULT_REDACTOR, Redactor
from orchestration.result import RunResult

__all__ = ["RedactingOutput", "build_parser", "main", "render_plan", "render_result"]

SYMBOLS = {"succeeded": "✔", "failed": "✘", "skipped": "⊘"}


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

    def flush(self) -> None:
        self._out.flush()


def _use_redactor(out: TextIO, redactor: Redactor) -> None:
    if isinstance(out, RedactingOutput):
        out.redactor = redactor


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


def render_result(result: RunResult, out: TextIO) -> None:
    """Each step's outcome and attempts, then the answer."""
    for step in result.steps.values():
        mark = SYMBOLS.get(step.status, "?")
        out.write(f"  {mark} {step.id} [{step.tool}.{step.capability}] {step.status}"
                  f" — {len(step.attempts)} attempt(s), {step.duration_s * 1000:.1f} ms\n")
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
        if step.error is not None and step.error.details.get("gave_up"):
            out.write(f"      stopped: {step.error.details['gave_up']}\n")
    u = result.usage
    out.write(f"  status: {result.status} | LLM calls: {u.llm_calls} "
              f"(tokens in/out {u.input_tokens}/{u.output_tokens}) | {u.wall_time_s * 1000:.0f} ms\n")
    if result.answer:
        out.write("  answer:\n" + "".join(f"    {line}\n" for line in result.answer.splitlines()))


def cmd_demo(args: argparse.Namespace, out: TextIO) -> int:
    from orchestration.demo.scenarios import scenarios, scripted_llm_for
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
            if result.plan is not None:
                from orchestration.plan import Plan, validate_plan

                out.write("  plan:\n")
                render_plan(validate_plan(Plan.model_validate(result.plan), catalog), out)
            render_result(result, out)
            ok = result.status == scenario.expect_status
            out.write(f"  => {'as expected' if ok else 'UNEXPECTED'} "
                      f"(expected {scenario.expect_status}, got {result.status})\n")
            if not ok:
                failures.append(scenario.name)
    out.write("\n" + (f"FAILED scenarios: {', '.join(failures)}\n" if failures
                      else f"All {len(selected)} scenarios behaved as expected.\n"))
    return 1 if failures else 0


def _orchestrator_from_env() -> Orchestrator:
    return Orchestrator.from_env()


def cmd_run(args: argparse.Namespace, out: TextIO) -> int:
    from orchestration.logging_setup import configure_logging
    from orchestration.telemetry import serve_metrics
    from orchestration.telemetry.exporters import tracer_provider_from_config

    config = OrchestratorConfig()
    configure_logging(config)
    provider = tracer_provider_from_config(config)
    port = args.metrics_port if args.metrics_port is not None else config.metrics_port
    metrics_server = serve_metrics(port) if port is not None else None
    try:
        orch = Orchestrator.from_env(config=config, tracer_provider=provider)
        _use_redactor(out, orch.redactor)
        result = orch.run(args.query)
    finally:
        if provider is not None:
            provider.shutdown()  # flush batched spans before the process ends
        if metrics_server is not None:
            metrics_server.close()
    if args.json:
        out.write(json.dumps(result.to_dict(), indent=2) + "\n")
    else:
        render_result(result, out)
    return 0 if result.status == "succeeded" else 1


def cmd_debug(args: argparse.Namespace, out: TextIO) -> int:
    from pathlib import Path

    from orchestration.debug_store import read_run, render_run

    path = Path(args.path) if args.path else OrchestratorConfig().llm_debug_path
    if not path.exists() and not path.with_name(path.name + ".1").exists():
        raise DagwrightError(f"no LLM debug store at {path} (set ORCH_LLM_DEBUG_ENABLED=true "
                             "before the run, or pass --path)")
    try:
        records = read_run(path, args.run_id)
    except ValueError as exc:
        raise DagwrightError(str(exc)) from exc
    if not records:
        print(f"dagwright: no LLM exchanges of run {args.run_id!r} in {path}", file=sys.stderr)
        return 1
    if args.json:
        for record in records:
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
    else:
        out.write(render_run(records, full=not args.brief))
    return 0


def cmd_plan(args: argparse.Namespace, out: TextIO) -> int:
    orch = _orchestrator_from_env()
    _use_redactor(out, orch.redactor)
    plan = asyncio.run(orch.plan(args.query))
    if args.json:
        out.write(json.dumps(plan.to_dict(), indent=2) + "\n")
    else:
        render_plan(plan, out)
    return 0


def cmd_tools(args: argparse.Namespace, out: TextIO) -> int:
    path = args.catalog or OrchestratorConfig().catalog
    if path is None:
        raise DagwrightError("no catalog: set ORCH_CATALOG or pass --catalog FILE")
    catalog = Catalog.from_file(path)
    _use_redactor(out, Redactor(catalog=catalog))
    for cap in catalog:
        target = cap.url or "python"
        out.write(f"{cap.key:32} {cap.method:6} {target}\n    {cap.description}\n")
    return 0


def cmd_config(args: argparse.Namespace, out: TextIO) -> int:
    for name, value in OrchestratorConfig().effective_values().items():
        out.write(f"{name}={json.dumps(value) if not isinstance(value, str) else value}\n")
    return 0


def cmd_serve_tools(args: argparse.Namespace, out: TextIO) -> int:
    from orchestration.demo.tools import serve_forever

    serve_forever(port=args.port, out=out)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dagwright", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run the offline demo (scripted LLM, real HTTP tools)")
    demo.add_argument("scenario", nargs="*", help="only these scenarios")
    demo.set_defaults(fn=cmd_demo)
    run = sub.add_parser("run", help="plan and run one query with the configured LLM")
    run.add_argument("query")
    run.add_argument("--json", action="store_true", help="print the RunResult as JSON")
    run.add_argument("--metrics-port", type=int, default=None,
                     help="serve Prometheus /metrics on this port during the run "
                     "(default: ORCH_METRICS_PORT)")
    run.set_defaults(fn=cmd_run)
    plan = sub.add_parser("plan", help="print the plan of a query without executing it")
    plan.add_argument("query")
    plan.add_argument("--json", action="store_true")
    plan.set_defaults(fn=cmd_plan)
    tools = sub.add_parser("tools", help="list the catalog")
    tools.add_argument("--catalog", help="catalog file (default: ORCH_CATALOG)")
    tools.set_defaults(fn=cmd_tools)
    debug = sub.add_parser("debug", help="show one run's LLM prompts and answers from the "
                           "debug store (ORCH_LLM_DEBUG_ENABLED)")
    debug.add_argument("run_id", help="the run id (or a unique prefix of it)")
    debug.add_argument("--path", help="debug store file (default: ORCH_LLM_DEBUG_PATH)")
    debug.add_argument("--json", action="store_true", help="print the raw JSONL records")
    debug.add_argument("--brief", action="store_true", help="cut each message to 500 chars")
    debug.set_defaults(fn=cmd_debug)
    config = sub.add_parser("config", help="print the effective ORCH_* settings (secrets masked)")
    config.set_defaults(fn=cmd_config)
    serve = sub.add_parser("serve-tools", help="serve the demo tools on fixed ports until Ctrl-C")
    serve.add_argument("--port", type=int, default=8700)
    serve.set_defaults(fn=cmd_serve_tools)
    return parser


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    out = cast(TextIO, RedactingOutput(out or sys.stdout))
    args = build_parser().parse_args(argv)
    try:
        code: Any = args.fn(args, out)
    except DagwrightError as exc:
        print(f"dagwright: error: {DEFAULT_REDACTOR.redact(str(exc))}", file=sys.stderr)
        return 2
    return int(code)


if __name__ == "__main__":
    sys.exit(main())
