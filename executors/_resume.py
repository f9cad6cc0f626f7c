"""Where a resumed run picks up: what to do with the steps that were in flight.

The run store knows which steps finished (they are not run again) and which calls with a
side effect were started without a recorded outcome. For each such call:

=========================================  ============================================
the capability                             on resume
=========================================  ============================================
declares an idempotency-key header         the same request is sent again with the same
                                           key: the tool recognises the repeat
is not idempotent and has no key header    not sent again: the step ends ``unknown``
                                           (``OUTCOME_UNKNOWN``, the request in its
                                           details), its descendants are skipped
=========================================  ============================================

A step whose side-effect call succeeded (its outcome and data are stored) but whose
result was not recorded before the process stopped is finished from the stored data.
Idempotent steps that were in flight have no marker; they simply run again.
"""

from __future__ import annotations

from typing import Any, cast

from executors._step_runner import ResumePoint
from orchestration.errors import CatalogError
from orchestration.protocol import OUTCOME_UNKNOWN, ErrorCategory, ErrorSource, StepError
from orchestration.result import Attempt, Layer, StepResult
from orchestration.services import RunServices
from orchestration.state import RunState
from orchestration.store._base import StoredRun

__all__ = ["resume_point"]


def resume_point(run: RunState, services: RunServices, stored: StoredRun,
                 approved: dict[str, dict[str, Any]] | None = None) -> ResumePoint:
    """Settle the steps ``stored`` left in flight; what the executor needs to go on.

    Steps settled here (unknown outcome, or finished from stored data) are recorded in
    ``run`` and its store; the rest is returned for the step runner.
    """
    steps = {s["id"]: s for s in (run.plan or {}).get("steps", [])}
    for (step_id, _number), output in sorted(stored.outputs.items()):
        step = steps.get(step_id)
        if step is None or _settled(run, step_id):
            continue
        _settle(run, services, StepResult(
            id=step_id, tool=step["tool"], capability=step["capability"], status="succeeded",
            output=output, attempts=stored.attempts.get(step_id, [])))
    resend = {}
    for marker in stored.open_calls:
        step = steps.get(marker.step_id)
        if step is None or _settled(run, marker.step_id):
            continue
        try:
            capability = services.catalog.get(step["tool"], step["capability"])
        except CatalogError:
            capability = None
        if capability is not None and capability.idempotency_key_header:
            resend[marker.step_id] = marker
            continue
        if capability is not None and capability.is_idempotent:
            continue  # safe to run again from the start
        unknown = StepError(
            category=ErrorCategory.INTERNAL_ERROR, code=OUTCOME_UNKNOWN,
            message="the process running this step stopped while its call was in flight; "
                    "the tool may have processed the request, and the capability declares "
                    "no idempotency key, so it is not sent again. Check with the tool "
                    "whether it happened (the request is in details.request).",
            source=ErrorSource.ENGINE, retryable=False, request_sent=True,
            step_id=marker.step_id, tool=step["tool"], capability=step["capability"],
            details={"request": marker.params, "attempt": marker.attempt,
                     "layer": marker.layer, "started_at": marker.started_at})
        # the call that may have happened is an attempt of the step's history, like any
        # call cut in flight (``cancelled``: its request may have reached the tool)
        in_flight = Attempt(number=marker.attempt, layer=cast(Layer, marker.layer),
                            params=marker.params, outcome="cancelled", error=unknown)
        earlier = [a for a in stored.attempts.get(marker.step_id, [])
                   if a.number != marker.attempt]
        _settle(run, services, StepResult(
            id=marker.step_id, tool=step["tool"], capability=step["capability"],
            status="unknown", attempts=[*earlier, in_flight], error=unknown))
    # a step still recorded as waiting whose approval was decided, but whose process
    # stopped before its call could leave (no marker): it runs again, and asks again
    # unless this resume carries the decision — nothing of it was sent
    waiting = {p.step_id for p in run.pending_approvals}
    for step_id in [sid for sid, result in run.steps.items()
                    if result.status == "awaiting_approval" and sid not in waiting]:
        del run.steps[step_id]
    return ResumePoint(attempts=dict(stored.attempts), resend=resend, approved=approved or {})


def _settled(run: RunState, step_id: str) -> bool:
    """Whether the step has a result of its own. A step recorded as waiting for approval
    has none: a person approved it, its call was sent, and the process stopped before the
    outcome — its open marker decides, like any step's in flight."""
    result = run.steps.get(step_id)
    return result is not None and result.status != "awaiting_approval"


def _settle(run: RunState, services: RunServices, result: StepResult) -> None:
    run.record_step(result)
    services.recorder.save_step(result)
