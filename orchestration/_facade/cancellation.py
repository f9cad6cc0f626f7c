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
from orchestration.errors import RunLeased
from orchestration.protocol import ErrorCategory, ErrorSource, StepError
from orchestration.result import RunResult, StepResult
from orchestration.store import StoredRun
from orchestration.store._feed import CHANNEL_RUNS, feed_of
from orchestration.store._recorder import holder_is_dead
from orchestration.store._requests import RunRequest

CANCEL_WAIT_S = 10.0
"""How long a cancel of a run another live process executes waits for that process to
stop it (it acts within a second; a process that is gone loses its lease, and the run is
then cancelled here)."""
_POLL_S = 0.2
_FINAL = frozenset({"succeeded", "partial", "failed", "cancelled"})


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
    try:
        return await local.stores.as_read(
            run_id, lambda stored: cancel_stored(parts, local, run_id, stored, reason))
    except RunLeased:  # (RunChanged too, read three times: another process works it)
        return await _cancel_elsewhere(parts, local, run_id, reason)


async def _cancel_elsewhere(parts: FacadeParts, local: LocalRuns, run_id: str,
                            reason: str) -> RunResult:
    """Cancel a run another live process executes: ask it through the store (a cancel
    request, which it acts on within a second), and wait for the run to end. If that
    process lets go of the run without acting (it paused, stopped or died), the run is
    cancelled here, in the store."""
    store = parts.store
    await store.put_request(RunRequest(run_id, "cancel", "", {"reason": reason}))
    feed = feed_of(store)
    loop = asyncio.get_running_loop()
    patience = max(CANCEL_WAIT_S, parts.config.store_lease_s + 2 * _POLL_S)
    deadline = loop.time() + patience
    owner: str | None = None
    while True:
        await feed.wait(CHANNEL_RUNS, run_id, _POLL_S)
        stored = await store.load(run_id)
        if stored is None:
            raise local.stores.not_found(run_id)
        owner = stored.lease_owner
        if stored.state.status in _FINAL:
            await store.drop_requests(run_id, "cancel")
            return stored.state.to_result()
        released = (owner is None or (stored.lease_remaining_s or 0.0) <= 0
                    or holder_is_dead(owner))
        if released:
            try:
                result = await cancel_stored(parts, local, run_id, stored, reason)
            except RunLeased:
                pass  # taken or changed meanwhile: read again (a new holder sees the request)
            else:
                await store.drop_requests(run_id, "cancel")
                return result
        if loop.time() >= deadline:
            raise RunLeased(
                f"run {run_id!r} is executed by another process ({owner}), which has not "
                f"stopped it within {patience:.0f}s of the cancel "
                "request; the request stays in the run store, and the run is cancelled when "
                "that process sees it or when another process takes the run over")


async def cancel_stored(parts: FacadeParts, local: LocalRuns, run_id: str,
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
