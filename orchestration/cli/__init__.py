"""The ``dagwright`` command: run and plan queries, inspect the catalog, settings, runs and
LLM exchanges, decide approvals, serve the HTTP API, host Temporal workers, and try the
offline demo.

Every command whose output is data takes ``--json``. Every error says what was wrong and
ends with what to do next; the exit code says which kind of outcome it was
(:data:`EXIT_CODES`, also in ``dagwright --help`` and docs/troubleshooting.md).

One module per command group (``_run``, ``_runs``, ``_approvals``, ...), registered in
``_app.COMMAND_GROUPS``; what they share is in ``_kit`` (run store, run ids),
``_render`` (plans, results, redacted output), ``_step_advice`` (what to do about the
steps of a run that did not succeed), ``_progress`` (the live display),
``_parser``, ``_errors`` and ``_exit_codes``.
"""

from __future__ import annotations

from orchestration.cli._app import build_parser, main
from orchestration.cli._exit_codes import EXIT_AWAITING_APPROVAL as EXIT_AWAITING_APPROVAL
from orchestration.cli._exit_codes import EXIT_BUDGET as EXIT_BUDGET
from orchestration.cli._exit_codes import EXIT_CLOSED_PIPE as EXIT_CLOSED_PIPE
from orchestration.cli._exit_codes import EXIT_CODES
from orchestration.cli._exit_codes import EXIT_INTERRUPTED as EXIT_INTERRUPTED
from orchestration.cli._exit_codes import EXIT_OK as EXIT_OK
from orchestration.cli._exit_codes import EXIT_PLANNING as EXIT_PLANNING
from orchestration.cli._exit_codes import EXIT_RUN_FAILED as EXIT_RUN_FAILED
from orchestration.cli._exit_codes import EXIT_USAGE as EXIT_USAGE
from orchestration.cli._exit_codes import exit_code_of as exit_code_of
from orchestration.cli._progress import Progress as Progress
from orchestration.cli._render import RedactingOutput, render_plan, render_result

# The other exit codes, exit_code_of and Progress stay importable from here (the tests
# use them), without joining the public API.
__all__ = ["EXIT_CODES", "RedactingOutput", "build_parser", "main", "render_plan",
           "render_result"]
