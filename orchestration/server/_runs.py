"""The runs a server executes: at most ``max_runs`` at once, resumed after a crash,
stopped at shutdown so that they stay resumable.

Every execution the server starts — a new run, a run continued after a person's
decision, an interrupted run resumed at start — takes one slot from the moment it is
asked for (so two requests at once cannot both take the last slot) until it ends. Past
the bound a request gets :class:`Busy` (the API answers 429 with ``Retry-After``). On a
server with tenants, a tenant with ``max_runs`` also holds at most that many slots *of
this process*: both bounds are per process (``--workers N`` processes and R replicas
give a tenant up to N x R x ``max_runs``; docs/serve.md).

Readers of a run's event stream wait on :meth:`RunManager.watch`; the manager wakes them
when an execution of that run starts or ends here, so a stream that waited through an
approval goes on the moment the run does.

**Several processes, one store** (``--workers N``, replicas behind a load balancer): a
run executes in the process that holds its lease, and every process looks after the
runs nobody executes any more. Every :data:`SWEEP_S` (and at start), with the slots it
has free, a process takes over the ``running`` runs whose lease expired by the store's
clock or whose holder on this machine died (a resume, which re-sends nothing that may
have happened), and resumes the runs whose decisions another process accepted without
a free slot (:meth:`RunManager.decide` queues them in the store). Each takes a slot of
the run's own tenant. A run that needs the per-run credentials it was started with is
never taken over (they are never stored): it is parked, marked as waiting for a resume
that gives them (``orchestration/_facade/parking.py``).

Who may ask what of a run is decided where the request arrives, from the store: a
tenant's request about another tenant's run is answered 404 by every process
(``_api.read_run``) before anything is written, so a cancel or a decision queued in the
store for another process was always made by the run's own tenant.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

from orchestration.credentials import Credentials
from orchestration.errors import ApprovalError, CredentialsRequired, DagwrightError, RunLeased
from orchestration.handle import RunHandle
from orchestration.orchestrator import Orchestrator
from orchestration.result import Approval, RunResult, SynthesisStrategy
from orchestration.server._tenants import Tenant
from orchestration.store._feed import CHANNEL_REQUESTS, CHANNEL_RUNS, feed_of
from orchestration.store._recorder import HOST, holder_is_dead
from orchestration.store._requests import RunRequest
from orchestration.workflows import WorkflowLibrary

__all__ = ["Busy", "RunManager"]

log = logging.getLogger("dagwright.serve")

RETRY_AFTER_S = 5
"""What a 429 tells a client to wait: runs take seconds to minutes."""
SWEEP_S = 1.0
"""How often a server looks for runs to take over and queued decisions (a PostgreSQL
store also wakes it when a decision is queued)."""
STREAM_POLL_S = 0.25
"""How often an event stream of a run executing elsewhere reads the store when the store
cannot announce changes (SQLite); on PostgreSQL a notification wakes it at once."""
_MAX_UNHELD = 1000


class Busy(Exception):
    """Every slot is taken: the server's, or the calling tenant's own."""

    def __init__(self, max_runs: int, *, closing: bool = False,
                 tenant: Tenant | None = None) -> None:
        if closing:
            message = "this server is shutting down; try again in a few seconds"
        elif tenant is not None:
            runs = "run" if max_runs == 1 else "runs"
            message = (f"tenant {tenant.name!r} already has {max_runs} {runs} executing (its "
                       "max_runs in ORCH_SERVE_TOKENS); try again when one has ended")
        else:
            message = (f"this server already executes {max_runs} runs "
                       f"(ORCH_SERVE_MAX_RUNS={max_runs}); try again in a few seconds")
        super().__init__(message)
        self.retry_after_s = RETRY_AFTER_S
        self.tenant = tenant.name if tenant is not None else None


class RunManager:
    """Starts, continues and stops the executions of one server."""

    def __init__(self, orchestrator: Orchestrator, *, max_runs: int,
                 tenants: Iterable[Tenant] = ()) -> None:
        self.orchestrator = orchestrator
        self.max_runs = max_runs
        self._tenants = {tenant.name: tenant for tenant in tenants}
        """The tenants this server knows, by name: a run taken over, or continued with a
        queued decision, takes a slot of its own tenant."""
        self._parked: set[str] = set()
        """Runs left to a resume with their per-run credentials (:meth:`_park`)."""
        self.closing = False
        self.recovered: list[str] = []
        """Runs resumed at start because a crash had interrupted them."""
        self._used = 0
        self._used_by: dict[str, int] = {}
        """Slots in use by each tenant (a tenant with ``max_runs`` is held to it)."""
        self._executions: dict[str, RunHandle] = {}
        self._watchers: dict[str, set[asyncio.Event]] = {}
        self._slot_freed = asyncio.Event()
        self._recovery: asyncio.Task[None] | None = None
        self.may_take_over: Callable[[], bool] = lambda: True
        """Whether this server may take runs over now: a worker of ``serve --workers``
        whose supervisor is gone is about to stop, and so are its siblings, whose runs it
        must not take over only to stop them again (``_workers.py``)."""

    @property
    def active(self) -> int:
        """Slots in use: executions running plus those being started."""
        return self._used

    # --- starting ---------------------------------------------------------------------
    async def start(self, query: str, *, plan: dict[str, object] | None,
                    run_id: str | None, tenant: Tenant | None = None,
                    context: dict[str, Any] | None = None,
                    credentials: Credentials | None = None,
                    session_id: str | None = None,
                    synthesis: SynthesisStrategy | None = None) -> RunHandle:
        """A new run (or the existing one of ``run_id``: see ``Orchestrator.astart``),
        within ``tenant``'s limits: its run slots and its runs' budgets."""
        return await self._started(tenant, lambda: self.orchestrator.astart(
            query, plan=plan, run_id=run_id, context=context, credentials=credentials,
            session_id=session_id, limits=tenant.limits if tenant is not None else None,
            synthesis=synthesis))

    async def start_workflow(self, name: str, inputs: dict[str, Any] | None, *,
                             run_id: str | None, tenant: Tenant | None = None,
                             context: dict[str, Any] | None = None,
                             credentials: Credentials | None = None,
                             session_id: str | None = None,
                             synthesis: SynthesisStrategy | None = None) -> RunHandle:
        """A run of the saved workflow ``name`` (see ``Orchestrator.astart_workflow``),
        looked up by name in the workflows directory only: a client never names a file.
        Within ``tenant``'s limits, in its context, as :meth:`start`."""
        orch = self.orchestrator
        path = WorkflowLibrary.for_config(orch.config, orch.catalog).find(name)
        return await self._started(tenant, lambda: orch.astart_workflow(
            path, inputs, run_id=run_id, context=context, credentials=credentials,
            session_id=session_id, limits=tenant.limits if tenant is not None else None,
            synthesis=synthesis))

    def as_a_client_sees_it(self, text: str) -> str:
        """A message about a saved workflow without the server's own paths (its
        workflows directory, the files in it, its catalog's file) nor advice for its
        operator: a client names a workflow, never a file, and cannot act on either."""
        orch = self.orchestrator
        directory = str(WorkflowLibrary.for_config(orch.config, orch.catalog).directory)
        text = text.replace("; `dagwright workflows` lists them, and ORCH_WORKFLOWS_DIR "
                            "names the directory", "")
        text = text.replace(directory + os.sep, "").replace(
            directory, "the server's workflows directory")
        if orch.catalog.path is not None:
            text = text.replace(str(orch.catalog.path), Path(orch.catalog.path).name)
        return text

    async def _started(self, tenant: Tenant | None,
                       start: Callable[[], Awaitable[RunHandle]]) -> RunHandle:
        """``start()`` in a slot of ``tenant`` taken first (freed again when it raises)."""
        self._take_slot(tenant)
        try:
            handle = await start()
        except BaseException:
            self._free_slot(tenant)
            raise
        self._track(handle, tenant)
        return handle

    async def decide(self, run_id: str, step_id: str, approval: Approval, *,
                     tenant: Tenant | None = None,
                     credentials: Credentials | None = None) -> RunHandle | None:
        """Apply a person's decision and continue the run in the background; None when
        no slot is free here (the server's, or the run's tenant's) and the decision was
        queued in the run store instead (checked first: a decision that does not fit
        raises as it would here), for the first process with a free slot to act on.

        A decision that comes with per-run credentials is never queued (they are never
        stored, and the process that would act on it has none): it gets :class:`Busy`
        (429), to be sent again. One without the credentials its run needs raises
        :class:`CredentialsRequired`, as it would with a slot free: sent again as it is,
        it could never be carried out."""
        try:
            self._take_slot(tenant)
        except Busy:
            if self.closing or credentials:
                raise
            await self._queue_decision(run_id, step_id, approval)
            return None
        return await self._resume_in_slot(run_id, {step_id: approval}, tenant, credentials)

    async def resume(self, run_id: str, *, approvals: dict[str, Approval] | None = None,
                     tenant: Tenant | None = None,
                     credentials: Credentials | None = None) -> RunHandle:
        """Continue a run (with decisions, and the credentials it needs) in the background."""
        self._take_slot(tenant)
        return await self._resume_in_slot(run_id, approvals, tenant, credentials)

    async def _resume_in_slot(self, run_id: str, approvals: dict[str, Approval] | None,
                              tenant: Tenant | None,
                              credentials: Credentials | None) -> RunHandle:
        """``astart_resume`` in the slot of ``tenant`` just taken (freed if it raises)."""
        try:
            handle = await self.orchestrator.astart_resume(run_id, approvals=approvals,
                                                           credentials=credentials)
        except BaseException:
            self._free_slot(tenant)
            raise
        self._track(handle, tenant)
        return handle

    async def _queue_decision(self, run_id: str, step_id: str, approval: Approval) -> None:
        orchestrator = self.orchestrator
        # raises what a resume here would, CredentialsRequired included (the run needs
        # credentials this decision does not bring: no retry would change that)
        current = await orchestrator.acheck_approvals(run_id, {step_id: approval})
        pending = next(p for p in current.pending_approvals if p.step_id == step_id)
        await orchestrator.store.put_request(RunRequest(
            run_id, "decision", step_id,
            {"approval": approval.model_dump(mode="json"), "requested_at": pending.requested_at}))
        log.info("run %s: the decision on step %s is queued (no free slot here); the first "
                 "server with a free slot continues the run", run_id, step_id)

    def _take_slot(self, tenant: Tenant | None = None) -> None:
        if self.closing:
            raise Busy(self.max_runs, closing=True)
        if self._used >= self.max_runs:
            raise Busy(self.max_runs)
        if tenant is not None:
            used = self._used_by.get(tenant.name, 0)
            if tenant.max_runs is not None and used >= tenant.max_runs:
                raise Busy(tenant.max_runs, tenant=tenant)
            self._used_by[tenant.name] = used + 1
        self._used += 1

    def _free_slot(self, tenant: Tenant | None = None) -> None:
        self._used -= 1
        if tenant is not None:
            left = self._used_by.get(tenant.name, 1) - 1
            if left > 0:
                self._used_by[tenant.name] = left
            else:
                self._used_by.pop(tenant.name, None)
        self._slot_freed.set()

    def _track(self, handle: RunHandle, tenant: Tenant | None = None) -> None:
        if handle.done():  # nothing to execute (a finished run id, a run that still waits)
            self._free_slot(tenant)
            return
        self._executions[handle.run_id] = handle
        self._wake(handle.run_id)
        handle.add_done_callback(functools.partial(self._ended, tenant))

    def _ended(self, tenant: Tenant | None, handle: RunHandle) -> None:
        if self._executions.get(handle.run_id) is handle:
            del self._executions[handle.run_id]
        self._free_slot(tenant)
        self._wake(handle.run_id)

    # --- runs nobody executes: after a crash, a dead process, a queued decision -----
    def start_recovery(self) -> None:
        """Look after the runs nobody executes, now and every :data:`SWEEP_S`."""
        self._recovery = asyncio.get_running_loop().create_task(
            self._sweep_forever(), name="dagwright-serve-recovery")

    async def _sweep_forever(self) -> None:
        feed = feed_of(self.orchestrator.store)
        first = True
        while not self.closing:
            try:
                await self._sweep(first)
            except DagwrightError as exc:
                log.error("could not look for runs to take over: %s", exc)
            first = False
            await feed.wait(CHANNEL_REQUESTS, None, SWEEP_S)

    async def _sweep(self, first: bool) -> None:
        """Take over the runs whose holder is gone, and resume the runs whose decision
        waits for a slot — as far as this server's slots (and each run's tenant's) allow.
        Oldest first."""
        store = self.orchestrator.store
        if not self.may_take_over():
            return
        if first:  # the store is opened by the first read
            await self.orchestrator.alist_runs(limit=1)
        unheld = await store.list_unheld(host=HOST, limit=_MAX_UNHELD)
        self._parked &= {held.run_id for held in unheld}  # resumed or ended meanwhile
        for held in unheld:
            if self._used >= self.max_runs or self.closing or not self.may_take_over():
                return
            if held.run_id in self._parked or self.orchestrator.active_run(held.run_id):
                continue
            if not held.free and not holder_is_dead(held.owner):
                continue
            current = await self.orchestrator.aget_run(held.run_id)
            if current is None or current.status != "running":
                continue
            if await self._resume(held.run_id, None, self._tenant_of(current)):
                self.recovered.append(held.run_id)
                log.info("resumed run %s: %s", held.run_id,
                         "its process stopped, or went quiet past its lease" if held.free
                         else f"its process ({held.owner}) died")
        decisions: dict[str, list[RunRequest]] = {}
        for request in await store.list_requests(kind="decision"):
            decisions.setdefault(request.run_id, []).append(request)
        for run_id, requests in decisions.items():
            if self._used >= self.max_runs or self.closing or not self.may_take_over():
                return
            if self.orchestrator.active_run(run_id) is None:
                await self._resume_decided(run_id, requests)

    def _tenant_of(self, run: RunResult) -> Tenant | None:
        """The tenant a run executes for (its context's), with its ``max_runs`` when this
        server knows its tokens; None for a run of no tenant."""
        name = (run.context or {}).get("tenant")
        if not isinstance(name, str) or not name:
            return None
        return self._tenants.get(name) or Tenant(name)

    async def _resume_decided(self, run_id: str, requests: list[RunRequest]) -> None:
        """Resume a run with the decisions another process queued for it (those that
        answer the approvals it waits for now; the rest are stale and dropped)."""
        store = self.orchestrator.store
        current = await self.orchestrator.aget_run(run_id)
        waiting = {p.step_id: p.requested_at for p in current.pending_approvals} \
            if current is not None and current.status == "awaiting_approval" else {}
        approvals: dict[str, Approval] = {}
        for request in requests:
            payload = request.payload or {}
            if waiting.get(request.key) == payload.get("requested_at"):
                approvals[request.key] = Approval.model_validate(payload.get("approval"))
        stale = [r.key for r in requests if r.key not in approvals]
        if stale:
            await store.drop_requests(run_id, "decision", stale)
        if (approvals and current is not None
                and await self._resume(run_id, approvals, self._tenant_of(current))):
            await store.drop_requests(run_id, "decision", list(approvals))
            log.info("run %s: continued with the decision(s) on %s queued by another "
                     "server", run_id, ", ".join(approvals))

    async def _resume(self, run_id: str, approvals: dict[str, Approval] | None,
                      tenant: Tenant | None) -> bool:
        """Resume ``run_id`` here in a slot of ``tenant``; False when no slot is free for
        it, another process holds it, it needs per-run credentials (it is parked: see
        :meth:`_park`) or it could not be resumed (logged)."""
        try:
            self._take_slot(tenant)
        except Busy:
            return False  # (the tenant's slots here are taken: another server may have one)
        try:
            handle = await self.orchestrator.astart_resume(run_id, approvals=approvals)
        except RunLeased:
            self._free_slot(tenant)
            log.info("run %s is executed by another live process; not resumed here", run_id)
            return False
        except CredentialsRequired as exc:
            self._free_slot(tenant)
            await self._park(run_id, exc)
            return False
        except ApprovalError as exc:
            self._free_slot(tenant)
            log.warning("run %s: a queued decision no longer applies (%s); dropped", run_id, exc)
            await self.orchestrator.store.drop_requests(run_id, "decision", list(approvals or ()))
            return False
        except DagwrightError as exc:
            self._free_slot(tenant)
            log.warning("could not resume run %s: %s", run_id, exc)
            return False
        self._track(handle, tenant)
        return True

    async def _park(self, run_id: str, needed: CredentialsRequired) -> None:
        """Leave a run that needs its per-run credentials to whoever resumes it with
        them: it is marked so in the store (a warning on the run) and this server does
        not try it again while it waits (nothing was taken over, nothing sent)."""
        self._parked.add(run_id)
        try:
            await self.orchestrator.apark_for_credentials(run_id)
        except DagwrightError as exc:  # (RunLeased: resumed elsewhere meanwhile)
            log.info("run %s: not marked as waiting for credentials: %s", run_id, exc)
            return
        log.warning("run %s stopped with its process and needs the per-run credentials it "
                    "was started with for %s (never stored): not taken over; it waits for a "
                    "client to resume it with them (POST /v1/runs/%s/resume)", run_id,
                    ", ".join(repr(n) for n in needed.names), run_id)

    # --- readers ----------------------------------------------------------------------
    def watch(self, run_id: str) -> asyncio.Event:
        """An event set when an execution of ``run_id`` starts or ends here (or the
        server closes); :meth:`unwatch` it after."""
        event = asyncio.Event()
        self._watchers.setdefault(run_id, set()).add(event)
        return event

    def unwatch(self, run_id: str, event: asyncio.Event) -> None:
        watchers = self._watchers.get(run_id)
        if watchers is not None:
            watchers.discard(event)
            if not watchers:
                del self._watchers[run_id]

    def _wake(self, run_id: str) -> None:
        for event in self._watchers.get(run_id, ()):
            event.set()

    async def changed(self, run_id: str, wake: asyncio.Event) -> None:
        """Until ``wake`` is set (an execution of the run started or ended here), the
        store announces a change of the run (PostgreSQL), or a poll's time passed."""
        feed = feed_of(self.orchestrator.store)
        timeout = 1.0 if feed.listens else STREAM_POLL_S
        waits = [asyncio.ensure_future(wake.wait()),
                 asyncio.ensure_future(feed.wait(CHANNEL_RUNS, run_id, timeout))]
        try:
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()

    # --- stopping ---------------------------------------------------------------------
    async def shutdown(self) -> None:
        """Stop every execution as a process shutdown does: the runs stay ``running`` in
        the store and the next server start resumes them."""
        self.closing = True
        self._slot_freed.set()
        if self._recovery is not None and not self._recovery.done():
            self._recovery.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._recovery
        executions = list(self._executions.values())
        if executions:
            log.info("stopping %d run(s); they stay resumable and are resumed at the next "
                     "start", len(executions))
            await asyncio.gather(*(h.interrupt() for h in executions), return_exceptions=True)
        for run_id in list(self._watchers):
            self._wake(run_id)
