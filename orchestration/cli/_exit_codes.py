"""What the ``dagwright`` exit code says: which kind of outcome a command had.

Listed in ``dagwright --help`` and docs/troubleshooting.md (a test keeps them in step).
"""

from __future__ import annotations

from orchestration.result import RunResult

EXIT_OK, EXIT_RUN_FAILED, EXIT_USAGE, EXIT_PLANNING, EXIT_BUDGET, EXIT_INTERRUPTED = 0, 1, 2, 3, 4, 130
EXIT_AWAITING_APPROVAL, EXIT_CLOSED_PIPE = 5, 141
EXIT_EVAL_GATE = 6
EXIT_CODES: dict[int, str] = {
    EXIT_OK: "success (a run: every step succeeded)",
    EXIT_RUN_FAILED: "the run ended partial, failed or cancelled (steps failed); demo: a "
                     "scenario misbehaved; debug: no exchanges of that run",
    EXIT_USAGE: "usage or configuration error (arguments, ORCH_* settings, the catalog, a "
                "workflow that does not fit it); nothing ran",
    EXIT_PLANNING: "planning failed: no valid plan (LLM unreachable, refused, unusable answers)",
    EXIT_BUDGET: "a budget stopped the run (LLM calls, tokens, cost, or calls of a capability)",
    EXIT_AWAITING_APPROVAL: "the run is paused, waiting for a person: `dagwright approve "
                            "RUN_ID STEP_ID` (or `reject`) continues it; nothing failed",
    EXIT_EVAL_GATE: "eval: the gate failed — a regression against --baseline (a pass rate "
                    "below the baseline's interval, or a case that passed now fails) or a pass "
                    "rate under --min-pass-rate",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C); a run stays running in the run store: "
                      "`dagwright resume RUN_ID` continues it",
    EXIT_CLOSED_PIPE: "stdout was closed before the output ended (`| head`); the rest of "
                      "the output was dropped quietly",
}


def exit_code_of(result: RunResult) -> int:
    """The exit code of a finished run (see :data:`EXIT_CODES`)."""
    if result.status == "succeeded":
        return EXIT_OK
    if result.status == "awaiting_approval":
        return EXIT_AWAITING_APPROVAL
    if result.budget_exceeded is not None:
        return EXIT_BUDGET
    if result.plan is None and result.status != "cancelled":  # cancelled while planning
        return EXIT_PLANNING
    return EXIT_RUN_FAILED
