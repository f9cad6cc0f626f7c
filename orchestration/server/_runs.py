"""The runs a server executes: at most ``max_runs`` at once, resumed after a crash,
stopped at shutdown so that they stay resumable.

Every execution the server starts — a new run, a run continued after a person's
decision, an interrupted run resumed at start — takes one slot from the moment it is
asked for (so two requests at once cannot both take the last slot) until it ends. Past
the bound a request gets :class:`Busy` (the API answers 429 with ``Retry-After``).

Readers of a run's event stream wait on :meth:`RunManager.watch`; the manager wakes them
when an execution of that run starts or ends here, so a stream that waited through an
approval goes on the moment the run does.

**Several processes, one store** (``--workers N``, replicas behind a load balancer): a
run executes in the process that holds its lease, and every process looks after the
runs nobody executes any more. Every :data:`SWEEP_S` (and at start), with the slots it
has free, a process takes over the ``running`` runs whose lease expired by the store's
clock or whose holder on this machine died (a resume, which re-sends nothing that may
have happened), and resumes the runs whose decisions another process accepted without
a free slot (:meth:`RunManager.decide` queues them in the store).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from orchestration.errors import ApprovalError, DagwrightError, RunLeased
from orchestration.handle import RunHandle
from orchestration.orchestrator import Orchestrator
from orchestration.result import Approval
from orchestration.store._feed import CHANNEL_REQUESTS, CHANNEL_RUNS, feed_of
from orchestration.store._recorder import HOST, holder_is_dead
from orchestration.store._requests import RunRequest

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
    """Every slot is taken."""

    def __init__(self, max_runs: int, *, closing: bool = False) -> None:
        super().__init__("this server is shutting down; try again in a few seconds" if closing
                         else f"this server already executes {max_runs} runs "
                         f"(ORCH_SERVE_MAX_RUNS={max_runs}); try again in a few seconds")
        self.retry_after_s = RETRY_AFTER_S


class RunManager:
    """Starts, continues and stops the executions of one server."""

    def __init__(self, orchestrator: Orchestrator, *, max_runs: int) -> None:
        self.orchestrator = orchestrator
        self.max_runs = max_runs
        self.closing = False
        self.recovered: list[str] = []
        """Runs resumed at start because a crash had interrupted them."""
        self._used = 0
        self._executions: dict[str, RunHandle] = {}
        self._watchers: dict[str, set[asyncio.Event]] = {}
        self._slot_freed = asyncio.Event()
        self._recovery: asyncio.Task[None] | None = None

    @property
    def active(self) -> int:
        """Slots in use: executions running plus those being started."""
        return self._used

    # --- starting ---------------------------------------------------------------------
    async def start(self, query: str, *, plan: dict[str, object] | None,
                    run_id: str | None) -> RunHandle:
        """A new run (or the existing one of ``run_id``: see ``Orchestrator.astart``)."""
        self._take_slot()
        try:
            handle = await self.orchestrator.astart(query, plan=plan, run_id=run_id)
        except BaseException:
            self._free_slot()
            raise
        self._track(handle)
        return handle

    async def decide(self, run_id: str, step_id: str, approval: Approval) -> RunHandle | None:
        """Apply a person's decision and continue the run in the background; None when
        every slot here is taken and the decision was queued in the run store instead
        (checked first: a decision that does not fit raises as it would here), for the
        first process with a free slot to act on."""
        try:
            self._take_slot()
        except Busy:
            if self.closing:
                raise
            await self._queue_decision(run_id, step_id, approval)
            return None
        try:
            handle = await self.orchestrator.astart_resume(run_id, approvals={step_id: approval})
        except BaseException:
            self._free_slot()
            raise
        self._track(handle)
        return handle

    async def _queue_decision(self, run_id: str, step_id: str, approval: Approval) -> None:
        orchestrator = self.orchestrator
        current = await orchestrator.acheck_approvals(run_id, {step_id: approval})
        pending = next(p for p in current.pending_approvals if p.step_id == step_id)
        await orchestrator.store.put_request(RunRequest(
            run_id, "decision", step_id,
            {"approval": approval.model_dump(mode="json"), "requested_at": pending.requested_at}))
        log.info("run %s: the decision on step %s is queued (no free slot here); the first "
                 "server with a free slot continues the run", run_id, step_id)

    def _take_slot(self) -> None:
        if self.closing:
            raise Busy(self.max_runs, closing=True)
        if self._used >= self.max_runs:
            raise Busy(self.max_runs)
        self._used += 1

    def _free_slot(self) -> None:
        self._used -= 1
        self._slot_freed.set()

    def _track(self, handle: RunHandle) -> None:
        if handle.done():  # nothing to execute (a finished run id, a run that still waits)
            self._free_slot()
            return
        self._executions[handle.run_id] = handle
        self._wake(handle.run_id)
        handle.add_done_callback(self._ended)

    def _ended(self, handle: RunHandle) -> None:
        if self._executions.get(handle.run_id) is handle:
            del self._executions[handle.run_id]
        self._free_slot()
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
        waits for a slot — as far as this server's slots allow. Oldest first."""
        store = self.orchestrator.store
        if first:  # the store is opened by the first read
            await self.orchestrator.alist_runs(limit=1)
        for held in await store.list_unheld(host=HOST, limit=_MAX_UNHELD):
            if self._used >= self.max_runs or self.closing:
                return
            if self.orchestrator.active_run(held.run_id) is not None:
                continue
            if not held.free and not holder_is_dead(held.owner):
                continue
            if await self._resume(held.run_id, None):
                self.recovered.append(held.run_id)
                log.info("resumed run %s, interrupted by a stop of its process", held.run_id)
        decisions: dict[str, list[RunRequest]] = {}
        for request in await store.list_requests(kind="decision"):
            decisions.setdefault(request.run_id, []).append(request)
        for run_id, requests in decisions.items():
            if self._used >= self.max_runs or self.closing:
                return
            if self.orchestrator.active_run(run_id) is None:
                await self._resume_decided(run_id, requests)

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
        if approvals and await self._resume(run_id, approvals):
            await store.drop_requests(run_id, "decision", list(approvals))
            log.info("run %s: continued with the decision(s) on %s queued by another "
                     "server", run_id, ", ".join(approvals))

    async def _resume(self, run_id: str, approvals: dict[str, Approval] | None) -> bool:
        """Resume ``run_id`` here in a slot; False when another process holds it or it
        could not be resumed (logged)."""
        self._take_slot()
        try:
            handle = await self.orchestrator.astart_resume(run_id, approvals=approvals)
        except RunLeased:
            self._free_slot()
            log.info("run %s is executed by another live process; not resumed here", run_id)
            return False
        except ApprovalError as exc:
            self._free_slot()
            log.warning("run %s: a queued decision no longer applies (%s); dropped", run_id, exc)
            await self.orchestrator.store.drop_requests(run_id, "decision", list(approvals or ()))
            return False
        except DagwrightError as exc:
            self._free_slot()
            log.warning("could not resume run %s: %s", run_id, exc)
            return False
        self._track(handle)
        return True

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
