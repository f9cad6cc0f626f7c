"""``dagwright sessions show S``: a session's runs, oldest first, with what each asked and
answered; and the options of a run in context (``--context k=v``, ``--session S``,
``--credentials-file F``) that ``run`` and ``resume`` share."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any, TextIO

from orchestration.cli._errors import UsageError
from orchestration.cli._kit import read_store
from orchestration.cli._parser import Commands
from orchestration.cli._render import write_run_data
from orchestration.config import OrchestratorConfig
from orchestration.errors import DagwrightError
from orchestration.sessions import check_session_id


def register(commands: Commands) -> None:
    sessions = commands.add_parser("sessions", help="sessions of follow-up runs in the run "
                                   "store (ORCH_STORE_URL)")
    sub = sessions.add_subparsers(dest="sessions_command", required=True)
    show = sub.add_parser("show", help="a session's runs, oldest first")
    show.add_argument("session_id", help="the id runs were given with --session")
    show.add_argument("--tenant", help="the session's tenant (sessions of tenants are apart)")
    show.add_argument("--json", action="store_true", help="print the session and its runs as JSON")
    show.set_defaults(fn=cmd_sessions_show)


def add_context_options(parser: argparse.ArgumentParser, *, new_run: bool) -> None:
    """The options of a run in context; ``new_run`` adds those only a new run takes."""
    if new_run:
        parser.add_argument("--context", action="append", default=[], metavar="KEY=VALUE",
                            help="who the run is for, e.g. --context tenant=acme --context "
                            "user=u-42 (repeatable; numbers and true/false are typed)")
        parser.add_argument("--session", metavar="SESSION_ID",
                            help="a follow-up in this session: its planner sees the earlier "
                            "runs, and its plan may use their outputs ({{run:N.step.path}})")
    parser.add_argument("--credentials-file", metavar="FILE", type=Path,
                        help="per-run credentials, a JSON file {tool or source: {header: "
                        "value}}: sent in place of the catalog's, never stored")


def _typed(text: str) -> Any:
    if text in ("true", "false"):
        return text == "true"
    try:
        number = float(text) if any(c in text for c in ".eE") else int(text)
    except ValueError:
        return text
    return number if not isinstance(number, float) or math.isfinite(number) else text


def key_values(option: str, items: list[str], example: str) -> dict[str, str]:
    """``OPTION KEY=VALUE`` given any number of times, as a mapping (keys and values
    stripped); a pair without ``=``, or a key given twice, is a :class:`UsageError`."""
    pairs: dict[str, str] = {}
    for item in items:
        key, equals, value = item.partition("=")
        key = key.strip()
        if not equals or not key:
            raise UsageError(f"{option} {item!r} is not KEY=VALUE", f"e.g. {option} {example}")
        if key in pairs:
            raise UsageError(f"{option} {key} is given twice", "give each key once")
        pairs[key] = value.strip()
    return pairs


def context_of(args: argparse.Namespace) -> dict[str, Any] | None:
    """``--context k=v ...`` as a mapping (checked by the orchestrator)."""
    pairs = key_values("--context", getattr(args, "context", None) or [], "user=u-42")
    return {key: _typed(value) for key, value in pairs.items()} or None


def credentials_of(args: argparse.Namespace) -> dict[str, Any] | None:
    """``--credentials-file``'s JSON (its values are never printed)."""
    path: Path | None = getattr(args, "credentials_file", None)
    if path is None:
        return None
    try:
        value = json.loads(path.read_text("utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot read --credentials-file {path}: {exc.strerror}",
                         "give a JSON file {\"tool\": {\"Header\": \"value\"}}") from None
    except ValueError:
        raise UsageError(f"--credentials-file {path} is not JSON",
                         "give a JSON file {\"tool\": {\"Header\": \"value\"}}") from None
    if not isinstance(value, dict):
        raise UsageError(f"--credentials-file {path} must hold a JSON object",
                         "{\"tool\": {\"Header\": \"value\"}}")
    return value


async def tenants_with_session(store: Any, session_id: str) -> list[str]:
    """The tenants whose runs have a session of this id: sessions are per tenant, and one
    asked for without ``--tenant`` is looked for among the runs without one."""
    runs = await store.list_runs(status=None, limit=1000, tenant=None, session_id=session_id)
    return sorted({str(r.context["tenant"]) for r in runs
                   if r.context and r.context.get("tenant")})


def cmd_sessions_show(args: argparse.Namespace, out: TextIO) -> int:
    check_session_id(args.session_id)

    async def read(store: Any) -> tuple[Any, list[Any], list[str]]:
        record = await store.get_session(args.tenant, args.session_id)
        runs = [] if record is None else await store.list_runs(
            status=None, limit=max(1, record.runs), tenant=args.tenant or "",
            session_id=args.session_id)
        elsewhere = (await tenants_with_session(store, args.session_id)
                     if record is None and args.tenant is None else [])
        return record, runs, elsewhere

    record, runs, elsewhere = read_store(read)
    if record is None and elsewhere:
        raise UsageError(
            f"no session {args.session_id!r} without a tenant; sessions are per tenant, and "
            f"{_listed(elsewhere)} {'has' if len(elsewhere) == 1 else 'have'} one",
            f"`dagwright sessions show {args.session_id} --tenant {elsewhere[0]}`")
    if record is None:
        raise DagwrightError(f"no session {args.session_id!r}"
                             + (f" of tenant {args.tenant!r}" if args.tenant else "")
                             + f" in {OrchestratorConfig().store_url}; a run started with "
                             "--session creates it")
    if args.json:
        write_run_data(out, {"session": args.session_id, "tenant": record.tenant,
                             "runs": [r.model_dump(mode="json") for r in runs]})
        return 0
    out.write(f"session {args.session_id}" + (f" (tenant {record.tenant})" if record.tenant else "")
              + f": {len(runs)} run(s)\n")
    for run in reversed(runs):  # oldest first: the conversation in order
        out.write(f"  run {run.session_run}: {run.run_id} {run.status}\n    {run.query[:100]}\n")
    return 0


def _listed(tenants: list[str]) -> str:
    return ("tenant " if len(tenants) == 1 else "tenants ") + ", ".join(tenants)
