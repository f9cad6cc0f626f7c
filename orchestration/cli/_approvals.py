"""``dagwright approvals list``, ``dagwright approve`` and ``dagwright reject``: the calls
that wait for a person, and the decision that continues their run."""

from __future__ import annotations

import argparse
import json
from typing import TextIO

from orchestration._json import UnreadableJSON, decode
from orchestration.cli._exit_codes import exit_code_of
from orchestration.cli._kit import continuing, full_run_id, read_store
from orchestration.cli._parser import Commands
from orchestration.cli._progress import live_progress
from orchestration.cli._render import render_result, write_next_steps, write_run_data
from orchestration.cli._sessions import add_context_options, credentials_of
from orchestration.config import OrchestratorConfig
from orchestration.errors import DagwrightError
from orchestration.result import Approval, PendingApproval
from orchestration.store import RunStore


def register(commands: Commands) -> None:
    approvals = commands.add_parser("approvals", help="calls waiting for a person")
    approvals_sub = approvals.add_subparsers(dest="approvals_command", required=True)
    pending = approvals_sub.add_parser("list", help="pending approvals, of one run or of all")
    pending.add_argument("run_id", nargs="?",
                         help="only this run (an id or a unique prefix; default: all runs)")
    pending.add_argument("--json", action="store_true", help="print the pending approvals as JSON")
    pending.set_defaults(fn=cmd_approvals_list)
    approve = commands.add_parser("approve", help="approve a pending call and continue the run")
    approve.add_argument("run_id", help="the run id (or a unique prefix of it)")
    approve.add_argument("step_id", help="the step (or @plan for the whole plan)")
    approve.add_argument("--params", metavar="JSON",
                         help="an edit of the proposed parameters as a JSON object, merged "
                         "onto them (RFC 7396): name only the keys you change, e.g. "
                         "'{\"amount\": 200}'; null removes a key; the result is validated "
                         "as a whole. For @plan: a whole replacement plan")
    approve.add_argument("--note", help="why (kept with the decision, shown under its attempt)")
    approve.add_argument("--json", action="store_true", help="print the RunResult as JSON")
    add_context_options(approve, new_run=False)  # a run started with them needs them again
    approve.set_defaults(fn=cmd_approve)
    reject = commands.add_parser("reject", help="reject a pending call; the run goes on "
                                 "without it")
    reject.add_argument("run_id", help="the run id (or a unique prefix of it)")
    reject.add_argument("step_id", help="the step (or @plan for the whole plan)")
    reject.add_argument("--note", required=True, help="why (kept in the step's error)")
    reject.add_argument("--json", action="store_true", help="print the RunResult as JSON")
    add_context_options(reject, new_run=False)  # the run goes on: its other calls need them
    reject.set_defaults(fn=cmd_reject)


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

    return read_store(read)


def cmd_approvals_list(args: argparse.Namespace, out: TextIO) -> int:
    pending = _pending(full_run_id(args.run_id) if args.run_id else None)
    if args.json:
        write_run_data(out, [{"run_id": rid, **p.model_dump(mode="json")}
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
    orch = continuing("deciding continues the run, which calls its tools")
    try:
        args.run_id = full_run_id(args.run_id)
        result = orch.resume(args.run_id, approvals={
            args.step_id: Approval(approved=approved, params=params, note=args.note)},
            credentials=credentials_of(args),
            on_event=live_progress(args, orch.config, continuing=True))
    finally:
        orch.close()
    if args.json:
        write_run_data(out, result.to_dict())
    else:
        render_result(result, out)
        write_next_steps(result, out, args.credentials_file)
    return exit_code_of(result)


def cmd_approve(args: argparse.Namespace, out: TextIO) -> int:
    return _decide(args, out, approved=True)


def cmd_reject(args: argparse.Namespace, out: TextIO) -> int:
    return _decide(args, out, approved=False)
