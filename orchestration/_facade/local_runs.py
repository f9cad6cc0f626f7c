"""The local backend: a run started, continued and executed in this process.

Each execution runs the engine in a task of its own, registered under a
:class:`~orchestration.handle.RunHandle` while it runs (``active``), under the observer,
with the services of this process (:meth:`LocalRuns.services`). The run's record in the
store is kept by its :class:`~orchestration.store._recorder.RunRecorder`: a run whose
record can no longer be written stops rather than go on sending without one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Coroutine
from functools import partial
from typing import Any

from orchestration._budget import RunBudget
from orchestration._events import EventCallback, EventSink
from orchestration._facade.inputs import RunInputs, check_query, check_run_id
from orchestration._facade.loop_resources import TransportPool
from orchestration._facade.parking import unpark
from orchestration._facade.parts import FacadeParts
from orchestration._facade.requests import RequestWatch
from orchestration._facade.sessions import LocalSessions
from orchestration._facade.store_access import RunStoreAccess
from orchestration._plan_cache import PlanCache
from orchestration.capability import Capability
from orchestration.credentials import Credentials, RunCredentials
from orchestration.errors import CredentialsRequired, DagwrightError, LeaseLost, StoreError
from orchestration.handle import RunHandle
from orchestration.llm._gateway import DebugRecorder, LLMGateway
from orchestration.plan import Plan, ValidatedPlan
from orchestration.result import RunResult, StepResult
from orchestration.retry_policy import RetryPolicy
from orchestration.services import CallInspector, RunServices
from orchestration.sessions import SessionHistory
from orchestration.state import RunSetup, RunState
from orchestration.store import StoredRun
from orchestration.store._recorder import RunRecorder

log = logging.getLogger("dagwright.run")


def _stop(work: asyncio.Task[Any]) -> None:
    """Cancel a run's work (the recorder's answer to a store failure)."""
    work.cancel()


def _log_background_failure(task: asyncio.Task[RunResult]) -> None:
    """A run started with ``astart`` that failed: nobody may be awaiting it, so say so."""
    if task.cancelled():
        return
    exc = task.exception()
    if exc is not None:
        log.error("a background run failed: %s: %s", type(exc).__name__, exc)


def announce_step(result: StepResult, recorder: RunRecorder, sink: EventSink) -> None:
    """Record a step result settled outside the executor, and tell the readers."""
    recorder.save_step(result)
    extra = {"reason": result.skipped_reason} if result.skipped_reason else {}
    sink.emit("step_finished", step_id=result.id, status=result.status,
              attempts=len(result.attempts), duration_s=result.duration_s, **extra)


class LocalRuns:
    """Runs executed by this process, and the handles of those executing now."""

    def __init__(self, parts: FacadeParts, stores: RunStoreAccess,
                 transports: TransportPool) -> None:
        self._parts = parts
        self.stores = stores
        self._transports = transports
        self.sessions = LocalSessions(parts, stores)
        self.active: dict[str, RunHandle] = {}
        self._plans: PlanCache | None = None
        self.requests = RequestWatch(lambda: self._parts.store, self.active)
        """Cancels asked by other processes for the runs executing here."""
        # what every run's services share, made once per configuration rather than per
        # run: (config, layers) -> (the LLM retry policy, the call inspector)
        self._shared: tuple[object, object, RetryPolicy, CallInspector] | None = None

    # --- starting and continuing ----------------------------------------------------------
    async def start_new(
        self,
        query: str,
        *,
        plan: Plan | dict[str, Any] | None = None,
        run_id: str | None = None,
        on_event: EventCallback | None = None,
        started: asyncio.Future[RunHandle] | None = None,
        inputs: RunInputs | None = None,
        setup: RunSetup | None = None,
    ) -> RunResult:
        """Record a new run and execute it; a ``run_id`` already stored for this query is
        returned as it is (finished) or continued (interrupted). ``inputs``: who the run
        is for, its credentials, session and limits (checked by the facade); ``setup``:
        how the new run answers, the workflow it is made from."""
        check_query(query)  # (astart comes here directly)
        inputs = inputs or RunInputs()
        await self.stores.open()
        if run_id is not None:
            check_run_id(run_id)
            existing = await self.stores.as_read(run_id, partial(
                self._existing, query, on_event=on_event, started=started,
                credentials=inputs.credentials))
            if existing is not None:
                return existing
        run = (setup or RunSetup()).new_state(
            run_id or uuid.uuid4().hex, query, context=inputs.context,
            credentials_for=sorted(inputs.credentials or {}), limits=inputs.limits)
        if inputs.session_id is not None:
            run.session = inputs.session_id
            run.session_run = await self.sessions.number(inputs.session_id, run.tenant)
        if self._parts.debug_store is not None:
            run.debug_path = str(self._parts.debug_store.path)
        recorder = self.stores.recorder(run.run_id)
        await recorder.begin(run)
        return await self.execute(run, recorder, plan=plan, on_event=on_event, started=started,
                                  credentials=RunCredentials(inputs.credentials))

    async def _existing(
        self, query: str, stored: StoredRun | None, *, on_event: EventCallback | None,
        started: asyncio.Future[RunHandle] | None, credentials: Credentials | None,
    ) -> RunResult | None:
        """A run id given to :meth:`start_new` that the store holds: its result when it
        finished, else the run continued (a method, not a closure of ``start_new``: the
        cells of a closure's variables live as long as the run, for every run)."""
        if stored is None:
            return None
        if stored.state.query != query:
            raise DagwrightError(
                f"run {stored.state.run_id!r} already exists for another query "
                f"({stored.state.query[:200]!r}); choose another run_id, or resume it")
        if stored.state.status != "running":
            return stored.state.to_result()
        return await self.continue_run(stored, on_event=on_event, started=started,
                                       credentials=credentials)

    async def continue_run(
        self,
        stored: StoredRun,
        *,
        approved: dict[str, dict[str, Any]] | None = None,
        on_event: EventCallback | None = None,
        started: asyncio.Future[RunHandle] | None = None,
        settled: list[StepResult] | None = None,
        credentials: Credentials | None = None,
    ) -> RunResult:
        """Take a stored run over (its lease) and execute it from where it stopped.

        A run started with per-run credentials that still has calls for those tools
        needs them again (:class:`CredentialsRequired`, raised before anything changes)."""
        run = stored.state
        given = RunCredentials(credentials, required=run.credentials_for)
        missing = given.needed_by(self._remaining_capabilities(run))
        if missing:
            raise CredentialsRequired(run.run_id, missing)
        run.credentials_for = sorted(given.required)
        if given:
            unpark(run)  # it waited for these credentials (parking.py): it has them now
        recorder = self.stores.recorder(stored.state.run_id)
        await recorder.take_over(stored)
        # the run's status and the decisions made for it (approvals, rejections) are the
        # store's before any call they allow can leave: a crash after an approved call
        # was sent must find a running run with that call's marker, not a step that
        # still waits for a person
        recorder.save_run(stored.state)
        try:
            await recorder.flush()
        except StoreError:
            with contextlib.suppress(StoreError):
                await recorder.finish(None)
            raise
        return await self.execute(stored.state, recorder, stored=stored, approved=approved,
                                  on_event=on_event, started=started, settled=settled,
                                  credentials=given)

    def credentials_needed(self, run: RunState) -> list[str]:
        """The names of the per-run credentials ``run`` was started with that its calls
        still to make need: what a resume without credentials lacks."""
        return RunCredentials(None, required=run.credentials_for).needed_by(
            self._remaining_capabilities(run))

    def _remaining_capabilities(self, run: RunState) -> list[Capability]:
        """The capabilities a continued run may still call: those of its plan's steps not
        finished yet (every capability while it has no plan)."""
        catalog = self._parts.catalog
        if run.plan is None:
            return list(catalog)
        out: list[Capability] = []
        for step in run.plan.get("steps", []):
            result = run.steps.get(step.get("id"))
            if result is not None and result.status not in ("awaiting_approval", "running"):
                continue
            if catalog.has(step.get("tool", ""), step.get("capability", "")):
                out.append(catalog.get(step["tool"], step["capability"]))
        return out

    async def start_in_background(
        self, execute: Callable[[asyncio.Future[RunHandle]], Coroutine[Any, Any, RunResult]]
    ) -> RunHandle:
        """Run ``execute`` in a task of its own until it signals that the run started
        executing (then the task goes on in the background) or ends without executing."""
        loop = asyncio.get_running_loop()
        started: asyncio.Future[RunHandle] = loop.create_future()
        task = loop.create_task(execute(started))
        try:
            waiting: set[asyncio.Future[Any]] = {task, started}
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            task.cancel()  # the caller left before the run started: it stays resumable
            raise
        if started.done():
            handle = started.result()
            handle._owner = task
            task.add_done_callback(_log_background_failure)
            return handle
        started.cancel()
        return RunHandle.finished(task.result())  # or raise what stopped it

    async def plan(self, query: str) -> ValidatedPlan:
        """Plan without executing; nothing is recorded."""
        check_query(query)
        run = RunState(run_id=uuid.uuid4().hex, query=query)
        recorder = RunRecorder(None, run.run_id, lease_s=self._parts.config.store_lease_s)
        return await self._parts.engine.plan_only(run, self.services(run, recorder))

    # --- executing ---------------------------------------------------------------------------
    async def execute(
        self,
        run: RunState,
        recorder: RunRecorder,
        *,
        plan: Plan | dict[str, Any] | None = None,
        stored: StoredRun | None = None,
        approved: dict[str, dict[str, Any]] | None = None,
        on_event: EventCallback | None = None,
        started: asyncio.Future[RunHandle] | None = None,
        settled: list[StepResult] | None = None,
        credentials: RunCredentials | None = None,
    ) -> RunResult:
        """Run (or continue) ``run`` to its end under the observer; record its end.

        The work runs in a task of its own, registered with a :class:`RunHandle` while it
        runs (``started`` receives the handle), so that ``acancel`` stops exactly this
        run and not its caller. A cancellation of the caller (a shutdown) reaches the work
        too, and leaves the run resumable."""
        try:
            session = await self.sessions.history(run)
        except BaseException:
            with contextlib.suppress(StoreError):
                await recorder.finish(None)  # let go of the run: it stays resumable
            raise
        services = self.services(run, recorder, credentials=credentials, session=session)
        if on_event is not None:
            # someone watches the run live: the answer streams to them as it is written
            services.events.subscribe(on_event)
        for step in settled or ():  # decided before this execution (a rejection)
            announce_step(step, recorder, services.events)
        handle = RunHandle(run.run_id, run.query, state=run, sink=services.events,
                           cancellation=services.cancellation)
        self.active[run.run_id] = handle
        self.requests.ensure()
        try:
            result = await self._execute_registered(run, services, handle, plan=plan,
                                                    stored=stored, approved=approved or {},
                                                    started=started)
        except BaseException as exc:
            handle._finish(exc)
            raise
        finally:
            if self.active.get(run.run_id) is handle:
                del self.active[run.run_id]
        handle._finish(result)
        return result

    async def _execute_registered(
        self,
        run: RunState,
        services: RunServices,
        handle: RunHandle,
        *,
        plan: Plan | dict[str, Any] | None,
        stored: StoredRun | None,
        approved: dict[str, dict[str, Any]],
        started: asyncio.Future[RunHandle] | None,
    ) -> RunResult:
        began = time.perf_counter()
        recorder = services.recorder
        planned_by = "resume" if stored is not None else "caller" if plan is not None else "llm"
        shutdown_too = False
        try:
            with self._parts.observer.run(run, planned_by=planned_by) as observation:
                run.trace_id = run.trace_id or observation.trace_id
                work = asyncio.get_running_loop().create_task(
                    self._parts.engine.run(run, services, plan, stored, approved),
                    name=f"dagwright-run-{run.run_id}")
                # a run whose record can no longer be written (or that another process
                # took over) stops at once rather than go on sending without a record
                recorder.on_failure = lambda _error: _stop(work)
                if recorder.failure is not None:
                    work.cancel()
                handle._attach(work)
                if started is not None and not started.done():
                    started.set_result(handle)
                try:
                    await work
                except asyncio.CancelledError:
                    current = asyncio.current_task()
                    if recorder.failure is not None and not (current and current.cancelling()):
                        return await self._stopped_by_store(run, services, recorder.failure)
                    if not services.cancellation.requested:
                        raise
                    # cancelled on purpose (acancel): the run ends cancelled, for good
                    task = asyncio.current_task()
                    shutdown_too = task is not None and task.cancelling() > 0
                    for result in run.cancel(services.cancellation.reason or "cancelled"):
                        announce_step(result, recorder, services.events)
        except BaseException:
            # stopped from outside (a shutdown, a caller that left): leave the run
            # resumable, let go of it
            with contextlib.suppress(StoreError):
                await recorder.finish(None)
            await services.events.close()
            raise
        finally:
            run.usage.wall_time_s += time.perf_counter() - began
        services.events.emit("run_finished", status=run.status, error=run.error)
        await services.events.close()
        try:
            await recorder.finish(run)
        except StoreError as exc:
            exc.result = run.to_result()
            raise
        if shutdown_too:
            raise asyncio.CancelledError
        return run.to_result()

    async def _stopped_by_store(self, run: RunState, services: RunServices,
                                failure: StoreError) -> RunResult:
        """End a run the store stopped: raise ``failure`` — for a lost lease as it is (the
        run is the new holder's), otherwise with the run's result, marked failed, so the
        work done is not lost with the record."""
        await services.events.close()
        with contextlib.suppress(StoreError):
            await services.recorder.finish(None)
        if isinstance(failure, LeaseLost):
            raise failure
        run.fail(f"the run store failed, so the run stopped before sending anything more: "
                 f"{failure}. Its record in the store ends before this point; resume it "
                 f"once the store is back (dagwright resume {run.run_id}), and calls it may "
                 "have sent are reported as unknown, never sent twice.")
        failure.result = run.to_result()
        raise failure

    # --- what a run uses ----------------------------------------------------------------------
    def services(self, run: RunState, recorder: RunRecorder, *,
                 credentials: RunCredentials | None = None,
                 session: SessionHistory | None = None) -> RunServices:
        """What one run uses: its LLM gateway (budget, usage), transport and deadline, its
        per-run credentials and the earlier runs of its session."""
        parts = self._parts
        config = parts.config
        shared = self._shared
        if shared is None or shared[0] is not config or shared[1] is not parts.layers:
            shared = self._shared = (config, parts.layers, RetryPolicy.for_llm(config),
                                     parts.engine.call_inspector(parts.layers))
        budget = RunBudget(run, config, parts.observer)
        return RunServices(
            # a snapshot: a catalog refresh during the run must not change what it planned with
            catalog=parts.catalog.snapshot(), config=config, layers=parts.layers,
            llm=LLMGateway(
                parts.llm, observer=parts.observer, usage=run.usage, run_id=run.run_id,
                budget=budget, policy=shared[2],
                clock=parts.clock, debug_recorder=self._debug_recorder(),
            ),
            transport=self._transports.for_current_loop(config), observer=parts.observer,
            recorder=recorder, events=EventSink(run, recorder, parts.clock), clock=parts.clock,
            deadline=asyncio.get_running_loop().time() + config.run_timeout_s,
            budget=budget,
            calls=shared[3],
            credentials=credentials if credentials else None, session=session,
            plans=self._plan_cache() if config.plan_cache else None,
        )

    def _plan_cache(self) -> PlanCache:
        """The plan cache on this orchestrator's run store (``ORCH_PLAN_CACHE``)."""
        if self._plans is None:
            self._plans = PlanCache(self._parts.store, self._parts.observer)
        return self._plans

    def _debug_recorder(self) -> DebugRecorder | None:
        """The LLM debug store's recorder when ``ORCH_LLM_DEBUG_ENABLED`` is on."""
        debug_store = self._parts.debug_store
        if debug_store is None:
            return None
        recorder: DebugRecorder = debug_store.recorder_for(self._parts.redactor)
        return recorder
