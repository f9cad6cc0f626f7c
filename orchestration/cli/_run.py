"""``dagwright run`` and ``dagwright plan``: one query, planned (and run) with the
configured LLM and catalog."""

from __future__ import annotations

import argparse
import asyncio
from typing import TextIO

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
from orchestration.cli._sessions import add_context_options, context_of, credentials_of
from orchestration.config import OrchestratorConfig
from orchestration.events import RunEvent
from orchestration.orchestrator import Orchestrator


def register(commands: Commands) -> None:
    run = commands.add_parser("run", help="plan and run one query with the configured LLM")
    run.add_argument("query")
    run.add_argument("--catalog", help="tool catalog file (default: ORCH_CATALOG)")
    run.add_argument("--json", action="store_true", help="print the RunResult as JSON")
    add_verbosity(run, argparse.SUPPRESS)
    run.add_argument("--metrics-port", type=int, default=None,
                     help="serve Prometheus /metrics on this port during the run "
                     "(default: ORCH_METRICS_PORT)")
    add_context_options(run, new_run=True)
    run.set_defaults(fn=cmd_run)
    plan = commands.add_parser("plan", help="print the plan of a query without executing it")
    plan.add_argument("query")
    plan.add_argument("--catalog", help="tool catalog file (default: ORCH_CATALOG)")
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    plan.set_defaults(fn=cmd_plan)


def cmd_run(args: argparse.Namespace, out: TextIO) -> int:
    from orchestration.telemetry import serve_metrics
    from orchestration.telemetry.exporters import tracer_provider_from_config

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
            result = orch.run(args.query, on_event=on_event, context=context_of(args),
                              credentials=credentials_of(args), session_id=args.session)
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
        write_next_steps(result, out)
    return exit_code_of(result)


def cmd_plan(args: argparse.Namespace, out: TextIO) -> int:
    config = OrchestratorConfig()
    orch = Orchestrator.from_env(config=config, catalog=catalog_for(args, config))
    try:
        plan = asyncio.run(orch.plan(args.query))
    finally:
        orch.close()
    if args.json:
        write_run_data(out, plan.to_dict())
    else:
        render_plan(plan, out)
    return EXIT_OK
