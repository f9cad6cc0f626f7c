"""``dagwright run`` and ``dagwright plan``: one query, planned (and run) with the
configured LLM and catalog; or a saved workflow run with its inputs (``run --workflow``),
and a plan saved as a workflow (``plan --save``)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import TextIO

from orchestration.cli._errors import UsageError
from orchestration.cli._exit_codes import EXIT_OK, exit_code_of
from orchestration.cli._kit import catalog_for, write_line
from orchestration.cli._parser import Commands, add_verbosity
from orchestration.cli._progress import live_progress
from orchestration.cli._render import (
    render_plan,
    render_plan_of,
    render_result,
    use_redactor,
    write_next_steps,
    write_run_data,
)
from orchestration.cli._save import save_workflow
from orchestration.cli._sessions import (
    add_context_options,
    context_of,
    credentials_of,
    key_values,
)
from orchestration.config import OrchestratorConfig
from orchestration.events import RunEvent
from orchestration.orchestrator import Orchestrator
from orchestration.workflows.model import SUFFIXES

SYNTHESIS_CHOICES = ("llm", "template", "raw")


def register(commands: Commands) -> None:
    run = commands.add_parser("run", help="plan and run one query with the configured LLM, "
                              "or run a saved workflow (--workflow)")
    run.add_argument("query", nargs="?", help="what to do (not with --workflow)")
    run.add_argument("--catalog", help="tool catalog file (default: ORCH_CATALOG)")
    run.add_argument("--workflow", metavar="NAME",
                     help="run a saved workflow instead of planning: its name in the workflows "
                     "directory (ORCH_WORKFLOWS_DIR) or the path of its file")
    run.add_argument("--input", action="append", default=[], metavar="NAME=VALUE",
                     help="an input of the workflow (repeat for each; values are text, "
                     "coerced to the input's type)")
    run.add_argument("--synthesis", choices=SYNTHESIS_CHOICES,
                     help="how the answer is composed (default: the workflow's, else "
                     "ORCH_SYNTHESIS_STRATEGY)")
    run.add_argument("--json", action="store_true", help="print the RunResult as JSON")
    add_verbosity(run, argparse.SUPPRESS)
    run.add_argument("--metrics-port", type=int, default=None,
                     help="serve Prometheus /metrics on this port during the run "
                     "(default: ORCH_METRICS_PORT)")
    add_context_options(run, new_run=True)
    run.set_defaults(fn=cmd_run)
    plan = commands.add_parser("plan", help="print the plan of a query without executing it")
    plan.add_argument("query", help="what to do (planned with the configured LLM, not run)")
    plan.add_argument("--catalog", help="tool catalog file (default: ORCH_CATALOG)")
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    plan.add_argument("--save", metavar="FILE",
                      help="save the plan as a workflow (YAML, or JSON for .json): the "
                      "query's values in it become inputs, each confirmed or renamed")
    plan.add_argument("--name", help="the saved workflow's name (default: FILE's stem)")
    plan.add_argument("--yes", action="store_true",
                      help="with --save: lift every value the query holds without asking")
    plan.add_argument("--force", action="store_true", help="with --save: replace FILE")
    plan.set_defaults(fn=cmd_plan)


def cmd_run(args: argparse.Namespace, out: TextIO) -> int:
    from orchestration.telemetry import serve_metrics
    from orchestration.telemetry.exporters import tracer_provider_from_config

    inputs = workflow_inputs(args)  # the arguments first: a usage error before any setting's
    in_context = {"context": context_of(args), "credentials": credentials_of(args),
                  "session_id": args.session}
    config = OrchestratorConfig()
    catalog = catalog_for(args, config)
    progress = live_progress(args, config)
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
        use_redactor(out, orch.redactor)
        try:
            if args.workflow is not None:
                result = orch.run_workflow(args.workflow, inputs, on_event=on_event,
                                           synthesis=args.synthesis, **in_context)
            else:
                result = orch.run(args.query, on_event=on_event, synthesis=args.synthesis,
                                  **in_context)
        except KeyboardInterrupt:
            if announced:
                say_how_to_go_on(announced[0], config)
            raise
        finally:
            orch.close()  # MCP servers the catalog started
    finally:
        if provider is not None:
            provider.shutdown()  # flush batched spans before the process ends
        if metrics_server is not None:
            metrics_server.close()
    if args.json:
        write_run_data(out, result.to_dict())
    else:
        if not announced:
            out.write(f"run {result.run_id}\n")
        render_plan_of(result, catalog, out)
        out.write("  steps:\n" if result.steps else "")
        render_result(result, out)
        if result.trace_id:
            out.write(f"  trace: {result.trace_id}\n")
        write_next_steps(result, out, args.credentials_file)
    return exit_code_of(result)


def say_how_to_go_on(run_id: str, config: OrchestratorConfig) -> None:
    """After Ctrl-C: the run stopped as a crash would and stays ``running`` in the store,
    where ``dagwright resume`` finds it (a memory:// store kept nothing)."""
    if config.store_url.strip().lower().startswith("memory:"):
        then = "nothing of it was kept (ORCH_STORE_URL=memory://)"
    else:
        then = (f"it stays `running` in the run store: `dagwright resume {run_id}` continues "
                "it (finished steps are not run again)")
    print(f"dagwright: run {run_id} was interrupted; {then}", file=sys.stderr, flush=True)


def workflow_inputs(args: argparse.Namespace) -> dict[str, str]:
    """``--input NAME=VALUE`` as a mapping; a query and ``--workflow`` exclude each other."""
    if (args.query is None) == (args.workflow is None):
        raise UsageError("give a query, or --workflow NAME (not both)",
                         'dagwright run "what to do" | dagwright run --workflow NAME '
                         "--input name=value")
    if args.input and args.workflow is None:
        raise UsageError("--input goes with --workflow", "dagwright run --workflow NAME "
                         "--input name=value")
    return key_values("--input", args.input, "team=Platform")


def cmd_plan(args: argparse.Namespace, out: TextIO) -> int:
    config = OrchestratorConfig()
    save = Path(args.save) if args.save else None
    if save is not None and save.suffix not in SUFFIXES:
        # a workflows directory reads only these: saved as anything else, the workflow
        # would be found neither by its name nor by `dagwright workflows`
        raise UsageError(f"--save {save}: a workflow file ends in "
                         f"{', '.join(SUFFIXES[:-1])} or {SUFFIXES[-1]} (the workflows "
                         "directory reads only those)",
                         f"--save {save.with_suffix('.yaml')}")
    if save is not None and save.exists() and not args.force:
        raise UsageError(f"{save} exists", "choose another file, or add --force to replace it")
    orch = Orchestrator.from_env(config=config, catalog=catalog_for(args, config))
    try:
        plan = asyncio.run(orch.plan(args.query))
        if args.json:
            write_run_data(out, plan.to_dict())
        else:
            render_plan(plan, out)
        if save is not None:
            save_workflow(orch, args, plan, save, out)
    finally:
        orch.close()
    return EXIT_OK
