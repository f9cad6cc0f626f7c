"""Continuing a stored run on the local backend: one whose process stopped (status
``running``), or one waiting for a person (``awaiting_approval``) — its decisions applied
and its overdue approvals expired first. See ``Orchestrator.aresume`` for the contract."""

from __future__ import annotations

import asyncio

from orchestration._events import EventCallback
from orchestration._facade.cancellation import cancel_stored
from orchestration._facade.local_runs import LocalRuns
from orchestration._facade.parts import FacadeParts
from orchestration.credentials import Credentials
from orchestration.errors import ApprovalError, CredentialsRequired
from orchestration.handle import RunHandle
from orchestration.result import Approval, RunResult
from orchestration.store import StoredRun
from orchestration.store._recorder import RunRecorder


async def resume(
    parts: FacadeParts,
    local: LocalRuns,
    run_id: str,
    *,
    approvals: dict[str, Approval] | None = None,
    on_event: EventCallback | None = None,
    started: asyncio.Future[RunHandle] | None = None,
    credentials: Credentials | None = None,
) -> RunResult:
    await local.stores.open()
    return await local.stores.as_read(run_id, lambda stored: _resume_stored(
        parts, local, run_id, stored, approvals=approvals, on_event=on_event,
        started=started, credentials=credentials))


async def _resume_stored(
    parts: FacadeParts,
    local: LocalRuns,
    run_id: str,
    stored: StoredRun | None,
    *,
    approvals: dict[str, Approval] | None,
    on_event: EventCallback | None,
    started: asyncio.Future[RunHandle] | None,
    credentials: Credentials | None,
) -> RunResult:
    """:func:`resume`, from the run as read (read again by the caller when another process
    changed it before this one could take it over)."""
    stores = local.stores
    if stored is None:
        raise stores.not_found(run_id)
    run = stored.state
    cancels = (await parts.store.list_requests(kind="cancel", run_id=run_id)
               if run.status in ("running", "awaiting_approval") else [])
    if cancels:
        # another process asked to cancel it while nobody could act on it: that stands
        request = cancels[0]
        reason = str((request.payload or {}).get("reason") or "cancelled on request")
        result = await cancel_stored(parts, local, run_id, stored, reason)
        await parts.store.drop_requests(run_id, "cancel")
        return result
    if approvals and run.status != "awaiting_approval":
        raise ApprovalError(f"run {run_id!r} is not waiting for approval (it is "
                            f"{run.status}); there is nothing to decide")
    waiting = {sid: step for sid, step in run.steps.items()
               if step.status == "awaiting_approval"}
    expired = parts.engine.expire(run)
    if run.status == "awaiting_approval" and not approvals and not expired:
        return run.to_result()  # nothing decided: it keeps waiting
    if run.status not in ("running", "awaiting_approval"):
        if expired:  # the plan approval expired: the run has failed
            await stores.save(run)
        return run.to_result()
    approved = {}
    if approvals:
        services = local.services(run, RunRecorder(None, run_id, lease_s=1.0))
        approved = parts.engine.decide(run, approvals, services)
        if run.status == "failed":  # the plan was rejected
            await stores.save(run)
            return run.to_result()
    if run.pending_approvals and not approvals and not expired:
        return run.to_result()
    run.status = "running"
    # steps a rejection or an expiry settled: recorded with the execution that follows
    settled = [run.steps[sid] for sid in waiting
               if sid in run.steps and run.steps[sid].status != "awaiting_approval"]
    return await local.continue_run(stored, approved=approved, on_event=on_event,
                                    started=started, settled=settled, credentials=credentials)


async def check_decisions(parts: FacadeParts, local: LocalRuns, run_id: str,
                          approvals: dict[str, Approval]) -> RunResult:
    """The run as it is, once ``approvals`` are known to fit it (they are tried on a copy:
    nothing changes); raises what :func:`resume` would for them without credentials."""
    stores = local.stores
    await stores.open()
    stored = await parts.store.load(run_id)
    if stored is None:
        raise stores.not_found(run_id)
    run = stored.state
    before = run.to_result()
    parts.engine.expire(run)
    if run.status != "awaiting_approval":
        raise ApprovalError(f"run {run_id!r} is not waiting for approval (it is "
                            f"{run.status}); there is nothing to decide")
    services = local.services(run, RunRecorder(None, run_id, lease_s=1.0))
    parts.engine.decide(run, approvals, services)
    missing = local.credentials_needed(run)
    if missing:  # (after the decisions: a rejected step needs nothing more)
        raise CredentialsRequired(run_id, missing)
    return before
