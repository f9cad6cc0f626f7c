"""What to do about the steps of a run that did not succeed, by why each one stopped.

The LLM debug store (``dagwright debug``) is the way into the layers' own failures — a
parameter no layer could correct, a plan that did not fit. Other causes need something
else, and a hint to "run again" can be wrong for them: a call that may have happened
(``OUTCOME_UNKNOWN``) would be sent again by a new run, a rejection was a person's
decision, a tool that did not answer or refused the credentials is fixed outside
dagwright. Each such cause gets its own advice here.
"""

from __future__ import annotations

from collections.abc import Iterable

from orchestration.protocol import ErrorCategory
from orchestration.result import RunResult, StepResult


def _names(steps: Iterable[StepResult]) -> str:
    return ", ".join(f"{s.id!r} ({s.tool}.{s.capability})" for s in steps)


def step_advice(result: RunResult) -> tuple[list[str], bool]:
    """The advice for the steps whose cause has one, and whether other steps failed (for
    which the LLM debug store is the advice)."""
    unknown: list[StepResult] = []
    rejected: list[StepResult] = []
    unreachable: list[StepResult] = []
    slow: list[StepResult] = []
    refused: list[StepResult] = []
    circuit: list[StepResult] = []
    others = False
    for step in result.steps.values():
        if step.status == "unknown":
            unknown.append(step)
            continue
        if step.status != "failed" or step.error is None:
            continue
        category, code = step.error.category, step.error.code
        if category is ErrorCategory.REJECTED:
            rejected.append(step)
        elif category is ErrorCategory.CONNECTION_ERROR:
            unreachable.append(step)
        elif category is ErrorCategory.TIMEOUT and not code.endswith("_DEADLINE_EXCEEDED"):
            # a tool that did not answer in time (the engine's own deadlines aside)
            slow.append(step)
        elif category is ErrorCategory.AUTH_ERROR:
            refused.append(step)
        elif category is ErrorCategory.CIRCUIT_OPEN:
            circuit.append(step)
        else:
            others = True
    advice: list[str] = []
    if unknown:
        advice.append(
            f"the call of {_names(unknown)} may have happened: check with the tool before "
            "doing it again — running the query again would send it again; its request is "
            f"under steps.<id>.error.details.request in `dagwright runs show {result.run_id} "
            "--json` (docs/troubleshooting.md#steps)")
    if rejected:
        advice.append(f"{_names(rejected)} was rejected by a person (nothing was sent) and "
                      "the steps that needed it were skipped; nothing to fix")
    if unreachable:
        advice.append(f"the tool of {_names(unreachable)} did not answer: check that it is "
                      "running and that its URL in the catalog is right (`dagwright tools` "
                      "shows each capability's URL)")
    if slow:
        advice.append(f"the tool of {_names(slow)} did not answer in time: check it, or "
                      "give it longer (timeout_s on the capability, ORCH_TOOL_TIMEOUT_S)")
    if refused:
        advice.append(f"the tool of {_names(refused)} refused the credentials: check its "
                      "headers or credentials in the catalog (or the run's "
                      "--credentials-file); no LLM can fix credentials")
    if circuit:
        advice.append(f"the circuit breaker of the tool of {_names(circuit)} is open after "
                      "repeated failures: nothing was sent; check the tool "
                      "(docs/workflows.md#circuit-breakers)")
    return advice, others
