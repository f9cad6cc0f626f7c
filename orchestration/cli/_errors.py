"""How a command's error reaches the user: one redacted line saying what was wrong, and
one saying what to do next (each error kind has its next step here)."""

from __future__ import annotations

import sys
from typing import TextIO

from orchestration._extras import MISSING_EXTRA
from orchestration.cli._kit import AmbiguousRunId
from orchestration.errors import (
    ApprovalError,
    CatalogError,
    ConfigError,
    CredentialsRequired,
    DagwrightError,
    InvalidInput,
    PlanningError,
    RunLeased,
    RunNotFound,
    StoreError,
    WorkflowError,
)
from orchestration.eval import CassetteError, DatasetError
from orchestration.redaction import DEFAULT_REDACTOR


class UsageError(DagwrightError):
    """A command used wrongly; carries what to do next."""

    def __init__(self, message: str, next_step: str) -> None:
        super().__init__(message)
        self.next_step = next_step


def next_step_for(exc: DagwrightError) -> str:
    if isinstance(exc, UsageError):
        return exc.next_step
    if MISSING_EXTRA.search(str(exc)):  # whatever the error's type: the fix is an install
        return ("run that install line in the environment dagwright runs from, then the "
                "command again")
    if isinstance(exc, AmbiguousRunId):
        return "`dagwright runs list` shows the run ids; give the whole id or a longer prefix"
    if isinstance(exc, ApprovalError):
        return ("`dagwright approvals list RUN_ID` shows what waits and its exact parameters "
                "(docs/troubleshooting.md#approvals)")
    if isinstance(exc, CredentialsRequired):
        return ("give them again, as a JSON file {\"tool\": {\"Header\": \"value\"}} for the "
                "tools it names: `dagwright resume RUN_ID --credentials-file FILE`, or for a "
                "run waiting for a person `dagwright approve RUN_ID STEP_ID --credentials-file "
                "FILE` (or reject) (docs/context.md)")
    if isinstance(exc, RunLeased):
        return ("wait for that process to end (or its lease, ORCH_STORE_LEASE_S, to expire), "
                "then `dagwright resume RUN_ID` (docs/troubleshooting.md#the-run-store)")
    if isinstance(exc, RunNotFound):
        return ("check ORCH_STORE_URL: `dagwright runs list` shows the runs that store holds "
                "(docs/troubleshooting.md#the-run-store)")
    if isinstance(exc, StoreError):
        return ("check that the run store ORCH_STORE_URL names is reachable and writable "
                "(docs/troubleshooting.md#the-run-store)")
    if isinstance(exc, DatasetError):
        return ("fix that case or line of the dataset: docs/eval.md#datasets describes a case "
                "(docs/troubleshooting.md#evals)")
    if isinstance(exc, CassetteError):
        return ("record the cassettes first (`dagwright eval DATASET --record DIR`), with the "
                "same --config names (docs/troubleshooting.md#evals)")
    if isinstance(exc, ConfigError):
        return ("fix the setting (docs/configuration.md lists every ORCH_* variable and its "
                "values); `dagwright config` prints what is in effect")
    if isinstance(exc, CatalogError):
        return ("fix the catalog; `dagwright tools --catalog FILE` checks a catalog without "
                "running anything (docs/troubleshooting.md)")
    if isinstance(exc, WorkflowError):
        return ("fix the workflow file, or save it again from a planned run (`dagwright plan "
                "\"...\" --save FILE --force`); `dagwright workflows` checks them all "
                "(docs/troubleshooting.md#workflows-and-tools-that-are-down)")
    if isinstance(exc, InvalidInput):
        # a workflow's refused inputs name them; a context, credentials or query do not
        where = (" (a workflow's inputs: `dagwright workflows` lists them)"
                 if "inputs" in str(exc) else "")
        return (f"correct what it names{where}; nothing was recorded or sent "
                "(docs/troubleshooting.md has each message)")
    if isinstance(exc, PlanningError):
        return ("check the LLM settings with `dagwright config`; to see what the LLM "
                "answered, set ORCH_LLM_DEBUG_ENABLED=true and use `dagwright debug RUN_ID`")
    return "see docs/troubleshooting.md"


def print_error(message: str, next_step: str) -> None:
    # stderr is a sink like any other: an error may quote a key or a catalog URL's password
    print(f"dagwright: error: {DEFAULT_REDACTOR.redact(message)}\n  next: {next_step}",
          file=sys.stderr)


def show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                 file: TextIO | None = None, line: str | None = None) -> None:
    """Warnings as one line a user reads, not a source location."""
    print(f"dagwright: warning: {message}", file=sys.stderr)
