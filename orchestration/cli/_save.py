"""``dagwright plan "query" --save FILE``: the plan made into a workflow file.

The query's values in the plan are proposed as inputs (``orchestration/workflows/
_draft.py`` says which); on a terminal each is confirmed, refused or renamed, otherwise
(or with ``--yes``) every one is taken. The workflow is checked against the catalog
before it is written, and the command says how to run it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TextIO

from orchestration.cli._kit import write_line
from orchestration.orchestrator import Orchestrator
from orchestration.plan import ValidatedPlan
from orchestration.workflows import Lift, WorkflowDraft, draft_workflow


def save_workflow(orch: Orchestrator, args: argparse.Namespace, plan: ValidatedPlan,
                  path: Path, out: TextIO) -> None:
    """Draft the workflow, let the user settle its inputs, check it, write it. With
    ``--json`` (the plan on stdout) what was saved is told on stderr."""
    if args.json:
        out = sys.stderr
    draft = draft_workflow(args.query, plan, orch.catalog, name=args.name or path.stem)
    if draft.lifts and not args.yes and sys.stdin.isatty():
        _confirm(draft)
    workflow = orch.load_workflow(draft.to_workflow())  # checked against the catalog
    header = (f"saved by `dagwright plan --save` from the query: {args.query}\n"
              f"catalog revision {orch.catalog.fingerprint}")
    text = (json.dumps(workflow.to_data(), indent=2, ensure_ascii=False) + "\n"
            if path.suffix == ".json" else workflow.to_yaml(header=header))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    taken = [lift for lift in draft.lifts if lift.accepted]
    write_line(out, f"saved workflow {workflow.name!r} to {path}")
    for lift in taken:
        uses = ", ".join(f"{step}.{param}" for step, param in lift.uses)
        write_line(out, f"  input {lift.name}: {_type(lift)} (was {lift.value!r}, in {uses})")
    example = " ".join(f"--input {lift.name}={_shell(lift.value)}" for lift in taken)
    write_line(out, f"run it: dagwright run --workflow {path} {example}".rstrip())


def _confirm(draft: WorkflowDraft) -> None:
    """Ask about each proposed input on the terminal: Enter takes it, n leaves the value
    as it is, a name renames the input."""
    print(f"{len(draft.lifts)} value(s) of the query can become inputs of the workflow:",
          file=sys.stderr)
    for lift in draft.lifts:
        uses = ", ".join(f"{step}.{param}" for step, param in lift.uses)
        sys.stderr.write(f"  {lift.value!r} ({uses}) as input {lift.name!r}? "
                         "[Enter: yes, n: keep the value, or type another name] ")
        sys.stderr.flush()
        answer = sys.stdin.readline().strip()
        if answer.lower() in ("n", "no"):
            lift.accepted = False
        elif answer and answer.lower() not in ("y", "yes"):
            lift.name = answer


def _type(lift: Lift) -> str:
    kind = lift.schema.get("type", "value")
    return kind if isinstance(kind, str) else "/".join(kind)


def _shell(value: object) -> str:
    text = str(value)
    return text if text.replace("_", "").replace("-", "").replace(".", "").isalnum() \
        else "'" + text.replace("'", "'\\''") + "'"
