"""``dagwright runs list|show``, ``dagwright resume`` and ``dagwright debug``: the run
history in the run store (ORCH_STORE_URL), continuing a run whose process stopped, and
the LLM exchanges of a run (the debug store). A run is named by its id or a prefix."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any, TextIO, get_args

from orchestration.cli._errors import UsageError, print_error
from orchestration.cli._exit_codes import EXIT_OK, EXIT_RUN_FAILED, exit_code_of
from orchestration.cli._kit import continuing, full_run_id, read_run, read_store
from orchestration.cli._parser import Commands
from orchestration.cli._progress import live_progress
from orchestration.cli._render import render_result, write_next_steps, write_run_data
from orchestration.cli._sessions import add_context_options, credentials_of, tenants_with_session
from orchestration.config import OrchestratorConfig
from orchestration.errors import DagwrightError
from orchestration.result import RunStatus


def register(commands: Commands) -> None:
    runs = commands.add_parser("runs", help="the run history in the run store (ORCH_STORE_URL)")
    runs_sub = runs.add_subparsers(dest="runs_command", required=True)
    listing = runs_sub.add_parser("list", help="recent runs, newest first")
    listing.add_argument("--status", choices=get_args(RunStatus), metavar="STATUS",
                         help="only runs with this status: " + ", ".join(get_args(RunStatus)))
    listing.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    listing.add_argument("--tenant", help="only runs of this tenant (their context's)")
    listing.add_argument("--user", help="only runs for this user (their context's)")
    listing.add_argument("--session", help="only the runs of this session")
    listing.add_argument("--json", action="store_true", help="print the runs as JSON")
    listing.set_defaults(fn=cmd_runs_list)
    show = runs_sub.add_parser("show", help="one run: its steps, attempts and answer")
    show.add_argument("run_id", help="the run id (or a unique prefix of it)")
    show.add_argument("--json", action="store_true", help="print the RunResult as JSON")
    show.set_defaults(fn=cmd_runs_show)
    resume = commands.add_parser("resume", help="continue a run whose process stopped (needs "
                                 "ORCH_CATALOG; on Temporal, follow it on its workers); "
                                 "finished steps are not run again")
    resume.add_argument("run_id", help="the run id (or a unique prefix of it)")
    resume.add_argument("--json", action="store_true", help="print the RunResult as JSON")
    add_context_options(resume, new_run=False)
    resume.set_defaults(fn=cmd_resume)
    debug = commands.add_parser("debug", help="show one run's LLM prompts and answers from the "
                                "debug store (ORCH_LLM_DEBUG_ENABLED)")
    debug.add_argument("run_id", help="the run id (or a unique prefix of it)")
    debug.add_argument("--path", help="debug store file (default: ORCH_LLM_DEBUG_PATH)")
    debug.add_argument("--json", action="store_true", help="print the raw JSONL records")
    debug.add_argument("--brief", action="store_true", help="cut each message to 500 chars")
    debug.set_defaults(fn=cmd_debug)


def _in_context(context: dict[str, Any] | None, session: str | None, number: int | None) -> str:
    """``for tenant=acme user=u-42 · session trip-7 #2``."""
    parts = []
    if context:
        # a boolean as --context takes it (true/false), not as Python writes it
        parts.append("for " + " ".join(f"{k}={json.dumps(v) if isinstance(v, bool) else v}"
                                       for k, v in sorted(context.items())))
    if session:
        parts.append(f"session {session} #{number}")
    return " · ".join(parts)


def _when(timestamp: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(timestamp)) if timestamp else "-"


def cmd_runs_list(args: argparse.Namespace, out: TextIO) -> int:
    tenant = args.tenant if args.tenant is not None else ("" if args.session else None)
    runs = read_store(lambda store: store.list_runs(status=args.status, limit=args.limit,
                                                    tenant=tenant, user=args.user,
                                                    session_id=args.session))
    if args.json:
        write_run_data(out, [r.model_dump(mode="json") for r in runs])
        return 0
    if not runs:
        out.write(f"no runs in {OrchestratorConfig().store_url}\n")
        if args.session and args.tenant is None:
            elsewhere = read_store(lambda store: tenants_with_session(store, args.session))
            if elsewhere:  # sessions are per tenant: this one is under a tenant
                out.write(f"  session {args.session!r} has runs under tenant "
                          f"{', '.join(elsewhere)}: add --tenant {elsewhere[0]}\n")
        return 0
    width = max(34, *(len(r.run_id) for r in runs))
    for r in runs:
        steps = ", ".join(f"{n} {status}" for status, n in sorted(r.steps.items()))
        if not steps:
            # the counts are written when a run ends or pauses: one still running (or
            # whose process stopped) has its steps so far in `runs show`
            steps = "steps so far: `dagwright runs show`" if r.status == "running" else "no steps"
        out.write(f"{r.run_id:{width}} {r.status:17} {_when(r.started_at)}  {steps}\n"
                  f"    {r.query[:100]}\n")
        if r.context or r.session:
            out.write(f"    {_in_context(r.context, r.session, r.session_run)}\n")
    return 0


def cmd_runs_show(args: argparse.Namespace, out: TextIO) -> int:
    args.run_id = full_run_id(args.run_id)
    result = read_run(args.run_id)
    if result is None:
        raise DagwrightError(f"no run {args.run_id!r} in {OrchestratorConfig().store_url}; "
                             "'dagwright runs list' shows the runs it holds")
    if args.json:
        write_run_data(out, result.to_dict())
        return 0
    out.write(f"run {result.run_id}: {result.query}\n")
    if result.context or result.session:
        out.write(f"  {_in_context(result.context, result.session, result.session_run)}\n")
    render_result(result, out)
    if result.error:
        out.write(f"  error: {result.error}\n")
    return 0


def cmd_resume(args: argparse.Namespace, out: TextIO) -> int:
    orch = continuing("resuming a run calls its tools")
    try:
        args.run_id = full_run_id(args.run_id)
        result = orch.resume(args.run_id, credentials=credentials_of(args),
                             on_event=live_progress(args, orch.config, continuing=True))
    finally:
        orch.close()
    if args.json:
        write_run_data(out, result.to_dict())
    else:
        out.write(f"run {result.run_id}: {result.query}\n")
        render_result(result, out)
        write_next_steps(result, out, args.credentials_file)
    return exit_code_of(result)


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
        print_error(f"no LLM exchanges of run {args.run_id!r} in {path}",
               "`dagwright run` prints the run id on its first line; the run must have "
               "happened with ORCH_LLM_DEBUG_ENABLED=true")
        return EXIT_RUN_FAILED
    if args.json:
        for record in records:
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
    else:
        out.write(render_run(records, full=not args.brief))
    return EXIT_OK
