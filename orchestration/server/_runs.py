"""The runs a server executes: at most ``max_runs`` at once, resumed after a crash,
stopped at shutdown so that they stay resumable.

Every execution the server starts — a new run, a run continued after a person's
decision, an interrupted run resumed at start — takes one slot from the moment it is
asked for (so two requests at once cannot both take the last slot) until it ends. Past
the bound a request gets :class:`Busy` (the API answers 429 with ``Retry-After``). On a
server with tenants, a tenant with ``max_runs`` also holds at most that many slots.

Readers of a run's event stream wait on :meth:`RunManager.watch`; the manager wakes them
when an execution of that run starts or ends here, so a stream that waited through an
approval goes on the moment the run does.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from orchestration.credentials import Credentials
from orchestration.errors import DagwrightError, RunLeased
from orchestration.handle import RunHandle
from orchestration.orchestrator import Orchestrator
from orchestration.result import Approval, SynthesisStrategy
from orchestration.server._tenants import Tenant
from orchestration.workflows import WorkflowLibrary

__all__ = ["Busy", "RunManager"]

log = logging.getLogger("dagwright.serve")

RETRY_AFTER_S = 5
"""What a 429 tells a client to wait: runs take seconds to minutes."""


class Busy(Exception):
    """Every slot is taken: the server's, or the calling tenant's own."""

    def __init__(self, max_runs: int, *, closing: bool = False,
                 tenant: Tenant | None = None) -> None:
        if closing:
            message = "this server is shutting down; try again in a few seconds"
        elif tenant is not None:
            message = (f"tenant {tenant.name!r} already has {max_runs} runs executing (its "
                       "max_runs in ORCH_SERVE_TOKENS); try again when one has ended")
        else:
            message = (f"this server already executes {max_runs} runs "
                       f"(ORCH_SERVE_MAX_RUNS={max_runs}); try again in a few seconds")
        super().__init__(message)
        self.retry_after_s = RETRY_AFTER_S
        self.tenant = tenant.name if tenant is not None else None


class RunManager:
    """Starts, continues and stops the executions of one server."""

    def __init__(self, orchestrator: Orchestrator, *, max_runs: int) -> None:
        self.orchestrator = orchestrator
        self.max_runs = max_runs
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
                     credentials: Credentials | None = None) -> RunHandle:
        """Apply a person's decision and continue the run in the background."""
        return await self.resume(run_id, approvals={step_id: approval}, tenant=tenant,
                                 credentials=credentials)

    async def resume(self, run_id: str, *, approvals: dict[str, Approval] | None = None,
                     tenant: Tenant | None = None,
                     credentials: Credentials | None = None) -> RunHandle:
        """Continue a run (with decisions, and the credentials it needs) in the background."""
        self._take_slot(tenant)
        try:
            handle = await self.orchestrator.astart_resume(run_id, approvals=approvals,
                                                           credentials=credentials)
        except BaseException:
            self._free_slot(tenant)
            raise
        self._track(handle, tenant)
        return handle

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

    # --- after a crash ----------------------------------------------------------------
    def start_recovery(self) -> None:
        """Resume, in the background, the runs a crash left ``running``."""
        self._recovery = asyncio.get_running_loop().create_task(
            self._recover(), name="dagwright-serve-recovery")

    async def _recover(self) -> None:
        """Each interrupted run is resumed as a slot is free, oldest first. A run whose
        lease a live process holds (another server executing it) raises ``RunLeased``
        and is left to it."""
        try:
            interrupted = await self.orchestrator.alist_runs(status="running", limit=10_000)
        except DagwrightError as exc:
            log.error("could not list interrupted runs to resume them: %s", exc)
            return
        for summary in reversed(interrupted):
            if self.orchestrator.active_run(summary.run_id) is not None:
                continue
            while self._used >= self.max_runs and not self.closing:
                self._slot_freed.clear()
                await self._slot_freed.wait()
            if self.closing:
                return
            self._take_slot()
            try:
                handle = await self.orchestrator.astart_resume(summary.run_id)
            except RunLeased:
                self._free_slot()
                log.info("run %s is executed by another live process; not resumed here",
                         summary.run_id)
                continue
            except DagwrightError as exc:
                self._free_slot()
                log.warning("could not resume interrupted run %s: %s", summary.run_id, exc)
                continue
            self._track(handle)
            self.recovered.append(summary.run_id)
            log.info("resumed run %s, interrupted by a stop of its process", summary.run_id)

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
