"""Ending a run ``cancelled``, for good, on the local backend.

A run this process executes is stopped through its handle (its in-flight steps end
``cancelled`` or ``unknown``). A run that waits for approval, or whose process stopped,
is cancelled in the store: a side-effect call that was in flight when its process
stopped ends ``unknown`` (``OUTCOME_UNKNOWN``), never guessed. See
``Orchestrator.acancel`` for the contract.
"""

from __future__ import annotations

import asyncio

from orchestration._events import EventSink
from orchestration._facade.inputs import check_cancel_reason
from orchestration._facade.local_runs import LocalRuns, announce_step
from orchestration._facade.parts import FacadeParts
from orchestration.protocol import ErrorCategory, ErrorSource, StepError
from orchestration.result import RunResult, StepResult
from orchestration.store import StoredRun


async def cancel(parts: FacadeParts, local: LocalRuns, run_id: str, reason: str) -> RunResult:
    check_cancel_reason(reason)
    handle = local.active.get(run_id)
    if handle is not None:
        handle._request_cancel(reason)
        try:
            ended = await handle.result()
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise
        else:
            if ended.status != "awaiting_approval":
                return ended
        # it paused, or was interrupted, before the cancellation reached it
    await local.stores.open()
    return await local.stores.as_read(
        run_id, lambda stored: _cancel_stored(parts, local, run_id, stored, reason))


async def _cancel_stored(parts: FacadeParts, local: LocalRuns, run_id: str,
                         stored: StoredRun | None, reason: str) -> RunResult:
    """Cancel a run no process executes (it waits, or its process stopped) in the store,
    as read from it."""
    if stored is None:
        raise local.stores.not_found(run_id)
    run = stored.state
    if run.status not in ("running", "awaiting_approval"):
        return run.to_result()
    recorder = local.stores.recorder(run.run_id)
    await recorder.take_over(stored)  # RunLeased while a live process executes it
    sink = EventSink(run, recorder, parts.clock)
    for marker in stored.open_calls:  # calls in flight when its process stopped
        step = next((s for s in (run.plan or {}).get("steps", [])
                     if s["id"] == marker.step_id), None)
        if step is None or marker.step_id in run.steps:
            continue
        unknown = StepResult(
            id=marker.step_id, tool=step["tool"], capability=step["capability"],
            status="unknown", attempts=stored.attempts.get(marker.step_id, []),
            error=StepError(
                category=ErrorCategory.INTERNAL_ERROR, code="OUTCOME_UNKNOWN",
                message="the run was cancelled after its process stopped while this "
                        "step's call, which has a side effect, was in flight; the tool "
                        "may have processed it (the request is in details.request)",
                source=ErrorSource.ENGINE, retryable=False, request_sent=True,
                step_id=marker.step_id, tool=step["tool"], capability=step["capability"],
                details={"request": marker.params, "attempt": marker.attempt}))
        run.record_step(unknown)
        announce_step(unknown, recorder, sink)
    for changed in run.cancel(reason):
        announce_step(changed, recorder, sink)
    sink.emit("run_finished", status=run.status, error=run.error)
    await sink.close()
    await recorder.finish(run)
    return run.to_result()
