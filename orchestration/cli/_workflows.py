"""``dagwright workflows``: the saved workflows, each checked against the catalog.

Lists every file of the workflows directory (``ORCH_WORKFLOWS_DIR``, else ``workflows/``
beside the catalog) with its inputs and whether it fits the catalog as it is now —
nothing runs, and no LLM is needed. Exit code 2 when one does not fit, so a deployment
can check its workflows after a catalog change.
"""

from __future__ import annotations

import argparse
import json
from typing import Any, TextIO

from orchestration._engine import RunEngine
from orchestration.cli._exit_codes import EXIT_OK, EXIT_USAGE
from orchestration.cli._kit import catalog_for, write_line
from orchestration.cli._parser import Commands
from orchestration.config import OrchestratorConfig
from orchestration.workflows import WorkflowEntry, WorkflowLibrary


def register(commands: Commands) -> None:
    workflows = commands.add_parser(
        "workflows", help="list the saved workflows, each checked against the catalog")
    workflows.add_argument("--catalog", help="tool catalog file (default: ORCH_CATALOG)")
    workflows.add_argument("--dir", help="workflows directory (default: ORCH_WORKFLOWS_DIR, "
                           "else workflows/ beside the catalog)")
    workflows.add_argument("--json", action="store_true", help="print the list as JSON")
    workflows.set_defaults(fn=cmd_workflows)


def cmd_workflows(args: argparse.Namespace, out: TextIO) -> int:
    config = OrchestratorConfig()
    catalog = catalog_for(args, config)
    try:
        library = (WorkflowLibrary(args.dir) if args.dir
                   else WorkflowLibrary.for_config(config, catalog))
        entries = library.checked_entries(catalog, RunEngine(config),
                                          max_steps=config.max_plan_steps)
    finally:
        catalog.close()
    if args.json:
        out.write(json.dumps([_as_json(e) for e in entries], indent=2, ensure_ascii=False)
                  + "\n")
    else:
        for entry in entries:
            _write(entry, out)
        fits = sum(1 for e in entries if not e.problems)
        write_line(out, f"{len(entries)} workflow(s) in {library.directory}, {fits} fit the "
                        f"catalog at revision {catalog.fingerprint}")
    return EXIT_OK if all(not e.problems for e in entries) else EXIT_USAGE


def _inputs(entry: WorkflowEntry) -> str:
    if entry.workflow is None:
        return ""
    shown = []
    for name, schema in entry.workflow.inputs.items():
        kind = schema.get("type", "any")
        text = f"{name} ({kind if isinstance(kind, str) else '/'.join(kind)}"
        if "default" in schema:
            text += f", default {schema['default']!r}"
        shown.append(text + ")")
    return ", ".join(shown) or "none"


def _write(entry: WorkflowEntry, out: TextIO) -> None:
    verdict = "fits" if not entry.problems else "DOES NOT FIT"
    write_line(out, f"{entry.name:24} {entry.path}  {verdict}")
    if entry.workflow is not None:
        write_line(out, f"    inputs: {_inputs(entry)}")
        if entry.workflow.description:
            write_line(out, f"    {entry.workflow.description}")
    for number, problem in enumerate(entry.problems, 1):
        write_line(out, f"    {number}. {problem}")


def _as_json(entry: WorkflowEntry) -> dict[str, Any]:
    workflow = entry.workflow
    return {"name": entry.name, "path": str(entry.path), "fits": not entry.problems,
            "problems": entry.problems,
            "description": workflow.description if workflow is not None else None,
            "inputs": workflow.inputs if workflow is not None else {},
            "revision": workflow.revision if workflow is not None else None}
