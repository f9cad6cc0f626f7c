"""The facade services use: ``Orchestrator.run(query)`` plans, executes and answers.

It composes the planner, the executor and the defense layers into a
:class:`~orchestration._engine.RunEngine` (the engine the local and the Temporal backends
share) and gives each run the services of this process: the run store, the pooled
transport, the LLM client, telemetry, real time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import time
import uuid
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import TracerProvider
from prometheus_client import CollectorRegistry

from executors.recovery import RecoveryHandler
from orchestration._budget import RunBudget, check_prices
from orchestration._engine import RunEngine, run_status
from orchestration._events import EventCallback, EventSink
from orchestration._extras import needs_extra
from orchestration._text import not_unicode
from orchestration._transport import ToolTransport
from orchestration.catalog import Catalog
from orchestration.clock import Clock
from orchestration.config import OrchestratorConfig
from orchestration.debug_store import LLMDebugStore
from orchestration.errors import (
    ApprovalError,
    ConfigError,
    DagwrightError,
    InvalidInput,
    LeaseLost,
    RunNotFound,
    StoreError,
)
from orchestration.events import RunEvent
from orchestration.handle import RunHandle
from orchestration.layer_settings import LayerSettings
from orchestration.llm._factory import client_from_config
from orchestration.llm._gateway import DebugRecorder, LLMGateway
from orchestration.llm.base import LLMClient
from orchestration.plan import Plan, ValidatedPlan
from orchestration.protocol import ErrorCategory, ErrorSource, StepError
from orchestration.redaction import Redactor
from orchestration.result import (
    Approval,
    RunResult,
    StepResult,
)
from orchestration.retry_policy import RetryPolicy
from orchestration.services import RunServices
from orchestration.state import RunState
from orchestration.store import RunStore, RunSummary, StoredRun, open_store
from orchestration.store._recorder import RunChanged, RunRecorder
from orchestration.telemetry import Telemetry
from orchestration.telemetry._observer import Observer
from planners.planner import Planner

if TYPE_CHECKING:
    from orchestration.temporal._client import TemporalRuns

__all__ = ["RUN_ID_PATTERN", "Orchestrator", "run_status"]

log = logging.getLogger("dagwright.run")
T = TypeVar("T")

_READS = 3
"""How many times a run is read again when another process changed it before this one
could take it over (:meth:`Orchestrator._as_read`)."""
RUN_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$"
"""What a caller-chosen ``run_id`` may look like (it names files, URLs and log lines)."""
_RUN_ID = re.compile(RUN_ID_PATTERN)


def _check_run_id(run_id: str) -> None:
    if not isinstance(run_id, str) or not _RUN_ID.match(run_id):
        raise InvalidInput(f"run_id {run_id!r} is not usable: use 1-200 letters, digits, '_', "
                           "'.', ':' or '-', starting with a letter or digit")


def _check_query(query: str) -> None:
    """A query is recorded and sent as UTF-8: text that cannot be (a lone surrogate, which
    a JSON escape such as \\ud800 decodes to) is refused here, naming where it is."""
    if not isinstance(query, str):
        raise InvalidInput(f"the query must be text, not {type(query).__name__}")
    problem = not_unicode("the query", query)
    if problem is not None:
        raise InvalidInput(problem)


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


class Orchestrator:
    """Plans a query into a DAG of tool calls, runs it with the defense layers, answers.

    ``llm`` defaults to the client the config describes. ``tracer_provider``,
    ``meter_provider`` and ``registry`` let a service route spans, OTel metrics and
    Prometheus metrics; by default the global OTel providers (no-ops until the service
    installs them) and Prometheus' default registry.
    ``handlers`` replaces the recovery chain (layers 3/4 and resilience) wholesale;
    ``clock`` is injectable so tests need not wait for backoff. ``store`` replaces the
    run store ``config.store_url`` names.
    """

    def __init__(
        self,
        catalog: Catalog,
        llm: LLMClient | None = None,
        config: OrchestratorConfig | None = None,
        *,
        tracer_provider: TracerProvider | None = None,
        registry: CollectorRegistry | None = None,
        meter_provider: MeterProvider | None = None,
        handlers: list[RecoveryHandler] | None = None,
        clock: Clock | None = None,
        planner: Planner | None = None,
        store: RunStore | None = None,
    ) -> None:
        self.config = config or OrchestratorConfig()
        self.catalog = catalog
        self.llm = llm if llm is not None else client_from_config(self.config)
        check_prices(self.config, getattr(self.llm, "model", None))
        self.telemetry = Telemetry.create(tracer_provider, registry, meter_provider)
        self.redactor = Redactor.from_config(self.config, catalog)
        self.observer = Observer(self.telemetry, self.redactor,
                                 provider=str(getattr(self.llm, "provider", "unknown")),
                                 model=getattr(self.llm, "model", None))
        self.debug_store = LLMDebugStore.from_config(self.config, self.redactor)
        self.clock = clock or Clock()
        self.layers = LayerSettings.from_config(self.config)
        self.engine = RunEngine(self.config, planner=planner, handlers=handlers)
        self.planner = self.engine.planner
        self.executor = self.engine.executor
        self.store: RunStore = store if store is not None else open_store(self.config.store_url)
        self._store_opened = False
        self._store_opening: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, asyncio.Lock] = weakref.WeakKeyDictionary()
        self._retention: asyncio.Task[None] | None = None
        self._transports: dict[int, ToolTransport] = {}
        self._temporal_runs: TemporalRuns | None = None
        self._active: dict[str, RunHandle] = {}

    @classmethod
    def from_env(
        cls, *, catalog: Catalog | str | os.PathLike[str] | None = None, **kwargs: Any
    ) -> Orchestrator:
        """Everything from ``ORCH_*`` variables. ``catalog`` (a :class:`Catalog` or a file)
        wins over ``ORCH_CATALOG``; the other keyword arguments go to the constructor."""
        config = kwargs.pop("config", None) or OrchestratorConfig()
        if catalog is None:
            if config.catalog is None:
                raise ConfigError("ORCH_CATALOG is not set: it must name a YAML or JSON tool "
                                  "catalog (or pass catalog=... / --catalog FILE)")
            catalog = config.catalog
        if not isinstance(catalog, Catalog):
            catalog = Catalog.from_file(catalog)
        return cls(catalog=catalog, config=config, **kwargs)

    # --- running --------------------------------------------------------------------
    def run(
        self,
        query: str,
        *,
        plan: Plan | dict[str, Any] | None = None,
        run_id: str | None = None,
        on_event: EventCallback | None = None,
    ) -> RunResult:
        """Synchronous :meth:`arun` for code without an event loop."""
        return self._sync("run", lambda: self.arun(query, plan=plan, run_id=run_id,
                                                   on_event=on_event))

    def resume(
        self,
        run_id: str,
        *,
        approvals: dict[str, Approval] | None = None,
        on_event: EventCallback | None = None,
    ) -> RunResult:
        """Synchronous :meth:`aresume`."""
        return self._sync("resume", lambda: self.aresume(run_id, approvals=approvals,
                                                         on_event=on_event))

    def get_run(self, run_id: str) -> RunResult | None:
        """Synchronous :meth:`aget_run`."""
        return self._sync("get_run", lambda: self.aget_run(run_id))

    def list_runs(self, status: str | None = None, limit: int = 50) -> list[RunSummary]:
        """Synchronous :meth:`alist_runs`."""
        return self._sync("list_runs", lambda: self.alist_runs(status, limit))

    def get_events(self, run_id: str, *, after: int = 0) -> list[RunEvent]:
        """Synchronous :meth:`aget_events`."""
        return self._sync("get_events", lambda: self.aget_events(run_id, after=after))

    def _sync(self, name: str, call: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Run ``call()`` on a new event loop, closing what it opened for that loop."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise RuntimeError(f"Orchestrator.{name}() was called inside a running event loop; "
                               f"use 'await orchestrator.a{name}(...)' there")
        # The result is handed out through a holder rather than as the main task's result:
        # when asyncio.run() restores the SIGINT handler, CPython formats a repr() of the
        # old handler, which holds the main task and so would repr the whole result.
        holder: list[T] = []

        async def main() -> None:
            try:
                holder.append(await call())
            finally:
                # this loop ends here, so the pools made for it (tools', the LLM client's,
                # the store's) are closed inside it. The catalog's sources (MCP sessions)
                # live on the catalog's own loop and stay open for the next run and for runs
                # of other threads; close() ends them.
                await self._close_loop_resources()
                await self.llm.aclose()

        asyncio.run(main())
        return holder[0]

    async def arun(
        self,
        query: str,
        *,
        plan: Plan | dict[str, Any] | None = None,
        run_id: str | None = None,
        on_event: EventCallback | None = None,
    ) -> RunResult:
        """Plan ``query`` (or use the given ``plan``), execute it, synthesise the answer.

        The run is recorded in the run store as it goes. ``run_id`` names it: a finished
        run with that id is returned as stored, without running anything; an interrupted
        one is resumed (see :meth:`aresume`). ``on_event`` receives every
        :class:`~orchestration.events.RunEvent` in order (sync or async; one that raises
        is logged once and gets no more events, the run goes on).

        Raises :class:`StoreError` when the store cannot record the run (before anything
        is sent) or lost a write on the way (the error carries the result),
        :class:`RunLeased` when another process is running it.
        """
        _check_query(query)
        if self.config.backend == "temporal":
            if run_id is not None:
                _check_run_id(run_id)
            return await self._temporal().run(query, plan=plan, run_id=run_id, on_event=on_event)
        return await self._arun(query, plan=plan, run_id=run_id, on_event=on_event)

    async def _arun(
        self,
        query: str,
        *,
        plan: Plan | dict[str, Any] | None = None,
        run_id: str | None = None,
        on_event: EventCallback | None = None,
        started: asyncio.Future[RunHandle] | None = None,
    ) -> RunResult:
        _check_query(query)  # (astart comes here directly)
        await self._open_store()
        if run_id is not None:
            _check_run_id(run_id)

            async def run_as_read(stored: StoredRun | None) -> RunResult | None:
                if stored is None:
                    return None
                if stored.state.query != query:
                    raise DagwrightError(
                        f"run {run_id!r} already exists for another query "
                        f"({stored.state.query[:200]!r}); choose another run_id, or resume it")
                if stored.state.status != "running":
                    return stored.state.to_result()
                return await self._continue(stored, on_event=on_event, started=started)

            existing = await self._as_read(run_id, run_as_read)
            if existing is not None:
                return existing
        run = RunState(run_id=run_id or uuid.uuid4().hex, query=query)
        if self.debug_store is not None:
            run.debug_path = str(self.debug_store.path)
        recorder = RunRecorder(self.store, run.run_id, lease_s=self.config.store_lease_s)
        await recorder.begin(run)
        return await self._execute(run, recorder, plan=plan, on_event=on_event, started=started)

    async def astart(
        self,
        query: str,
        *,
        plan: Plan | dict[str, Any] | None = None,
        run_id: str | None = None,
        on_event: EventCallback | None = None,
    ) -> RunHandle:
        """Start :meth:`arun` in the background; return once the run is recorded and held
        by this process (so :meth:`aget_run` finds it), while it goes on.

        Everything :meth:`arun` would raise before executing is raised here:
        :class:`RunLeased` for a run id another call or process is executing (one run
        id never runs twice at once), :class:`DagwrightError` for a run id taken by
        another query, :class:`StoreError`. A finished run id gives a handle that is
        already done, with the stored result. Stop the run with :meth:`acancel` (it ends
        ``cancelled``) or :meth:`RunHandle.interrupt` (it stays resumable).
        """
        self._local_only("astart")
        return await self._start(lambda started: self._arun(
            query, plan=plan, run_id=run_id, on_event=on_event, started=started))

    async def astart_resume(
        self,
        run_id: str,
        *,
        approvals: dict[str, Approval] | None = None,
        on_event: EventCallback | None = None,
    ) -> RunHandle:
        """Start :meth:`aresume` in the background; return once the decisions are applied
        and the run is held by this process.

        Raises what :meth:`aresume` raises before executing (:class:`RunNotFound`,
        :class:`ApprovalError`, :class:`RunLeased`); a run with nothing to do (finished,
        or still waiting) gives a handle that is already done."""
        self._local_only("astart_resume")
        return await self._start(lambda started: self._aresume(
            run_id, approvals=approvals, on_event=on_event, started=started))

    async def _start(
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

    def active_run(self, run_id: str) -> RunHandle | None:
        """The handle of ``run_id`` while this orchestrator executes it (started by
        :meth:`arun`, :meth:`astart` or a resume); None otherwise."""
        return self._active.get(run_id)

    async def acancel(self, run_id: str, *, reason: str = "cancelled on request") -> RunResult:
        """Cancel a run; it ends ``cancelled``, a final status (a resume returns it as it is).

        A run this orchestrator is executing has its in-flight steps cancelled: each is
        recorded with its attempts so far, ``cancelled`` (code ``RUN_CANCELLED``) or, when a
        call with a side effect was in flight, ``unknown`` (``OUTCOME_UNKNOWN``: the tool
        may have processed it). Steps that never started are ``skipped``; steps waiting
        for approval are ``cancelled``. A run that waits for approval, or whose process
        stopped, is cancelled in the store. A finished run is returned as it is.

        This differs from a shutdown (a cancelled task, :meth:`RunHandle.interrupt`),
        which leaves the run ``running`` for a resume. Raises :class:`RunNotFound` for an
        unknown id, :class:`RunLeased` while another live process executes the run, and
        :class:`InvalidInput` for a reason that cannot be recorded (not valid Unicode).
        """
        self._local_only("acancel")
        problem = not_unicode("the cancel reason", reason) if isinstance(reason, str) else (
            f"the cancel reason must be text, not {type(reason).__name__}")
        if problem is not None:
            raise InvalidInput(problem)
        handle = self._active.get(run_id)
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
        await self._open_store()
        return await self._as_read(run_id, lambda stored: self._cancel_stored(
            run_id, stored, reason))

    async def _cancel_stored(self, run_id: str, stored: StoredRun | None,
                             reason: str) -> RunResult:
        """Cancel a run no process of this orchestrator executes, as read from the store."""
        if stored is None:
            raise self._not_found(run_id)
        run = stored.state
        if run.status not in ("running", "awaiting_approval"):
            return run.to_result()
        recorder = RunRecorder(self.store, run_id, lease_s=self.config.store_lease_s)
        await recorder.take_over(stored)  # RunLeased while a live process executes it
        sink = EventSink(run, recorder, self.clock)
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
            self._announce_step(unknown, recorder, sink)
        for changed in run.cancel(reason):
            self._announce_step(changed, recorder, sink)
        sink.emit("run_finished", status=run.status, error=run.error)
        await sink.close()
        await recorder.finish(run)
        return run.to_result()

    @staticmethod
    def _announce_step(result: StepResult, recorder: RunRecorder, sink: EventSink) -> None:
        """Record a step result settled outside the executor, and tell the readers."""
        recorder.save_step(result)
        extra = {"reason": result.skipped_reason} if result.skipped_reason else {}
        sink.emit("step_finished", step_id=result.id, status=result.status,
                  attempts=len(result.attempts), duration_s=result.duration_s, **extra)

    async def astream(
        self,
        query: str,
        *,
        plan: Plan | dict[str, Any] | None = None,
        run_id: str | None = None,
    ) -> AsyncIterator[RunEvent]:
        """Run ``query`` and yield its events as they happen, ``run_finished`` last.

        Leaving the iteration early cancels the run (it stays resumable).
        """
        queue: asyncio.Queue[RunEvent | None] = asyncio.Queue()
        task = asyncio.get_running_loop().create_task(
            self.arun(query, plan=plan, run_id=run_id, on_event=queue.put_nowait))
        task.add_done_callback(lambda _: queue.put_nowait(None))
        try:
            while (event := await queue.get()) is not None:
                yield event
            await task  # its exception, if it failed
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, DagwrightError):
                    await task

    async def aresume(
        self,
        run_id: str,
        *,
        approvals: dict[str, Approval] | None = None,
        on_event: EventCallback | None = None,
    ) -> RunResult:
        """Continue a run whose process stopped, or that waits for approvals.

        **After a crash** (status ``running``): steps that finished are not run again;
        steps that were in flight are run again when that is safe — their capability is
        idempotent, or declares an idempotency-key header (the call is re-sent with the
        same key). A call with a side effect that may have happened and carries no key
        is not sent again: its step ends ``unknown`` (code ``OUTCOME_UNKNOWN``, the
        request in its details) and the steps that depend on it are skipped.

        **With approvals** (status ``awaiting_approval``): ``approvals`` maps pending step
        ids (or :data:`~orchestration.result.PLAN_APPROVAL`) to an :class:`Approval`;
        decided steps go on (approved) or fail ``REJECTED`` (their descendants are
        skipped), undecided ones keep waiting. A decision for a step that is not pending,
        or edited parameters that do not validate, raise :class:`ApprovalError` and
        change nothing. Pending approvals older than ``ORCH_APPROVAL_TIMEOUT_S`` are
        rejected as expired first.

        A finished run is returned as it is. Raises :class:`RunNotFound` for an unknown
        id and :class:`RunLeased` while another live process is executing the run.
        """
        if self.config.backend == "temporal":
            return await self._temporal().resume(run_id, approvals=approvals, on_event=on_event)
        return await self._aresume(run_id, approvals=approvals, on_event=on_event)

    async def _aresume(
        self,
        run_id: str,
        *,
        approvals: dict[str, Approval] | None = None,
        on_event: EventCallback | None = None,
        started: asyncio.Future[RunHandle] | None = None,
    ) -> RunResult:
        await self._open_store()
        return await self._as_read(run_id, lambda stored: self._resume_stored(
            run_id, stored, approvals=approvals, on_event=on_event, started=started))

    async def _resume_stored(
        self,
        run_id: str,
        stored: StoredRun | None,
        *,
        approvals: dict[str, Approval] | None,
        on_event: EventCallback | None,
        started: asyncio.Future[RunHandle] | None,
    ) -> RunResult:
        """:meth:`aresume`, from the run as read."""
        if stored is None:
            raise self._not_found(run_id)
        run = stored.state
        if approvals and run.status != "awaiting_approval":
            raise ApprovalError(f"run {run_id!r} is not waiting for approval (it is "
                                f"{run.status}); there is nothing to decide")
        waiting = {sid: step for sid, step in run.steps.items()
                   if step.status == "awaiting_approval"}
        expired = self.engine.expire(run)
        if run.status == "awaiting_approval" and not approvals and not expired:
            return run.to_result()  # nothing decided: it keeps waiting
        if run.status not in ("running", "awaiting_approval"):
            if expired:  # the plan approval expired: the run has failed
                await self._save(run)
            return run.to_result()
        approved = {}
        if approvals:
            services = self._services(run, RunRecorder(None, run_id, lease_s=1.0))
            approved = self.engine.decide(run, approvals, services)
            if run.status == "failed":  # the plan was rejected
                await self._save(run)
                return run.to_result()
        if run.pending_approvals and not approvals and not expired:
            return run.to_result()
        run.status = "running"
        # steps a rejection or an expiry settled: recorded with the execution that follows
        settled = [run.steps[sid] for sid in waiting
                   if sid in run.steps and run.steps[sid].status != "awaiting_approval"]
        return await self._continue(stored, approved=approved, on_event=on_event,
                                    started=started, settled=settled)

    async def aget_run(self, run_id: str) -> RunResult | None:
        """The run as the store has it (a running run with the steps finished so far);
        a run this orchestrator is executing as it is in memory (fresher: store writes
        are batched).

        Pending approvals older than ``ORCH_APPROVAL_TIMEOUT_S`` are rejected as expired
        here (and recorded); a resume then finishes the run. On the Temporal backend, the
        run as its workflow has it (live), else as the store has it."""
        handle = self._active.get(run_id)
        if handle is not None:
            return handle.current()
        if self.config.backend == "temporal":
            live = await self._temporal().get_run(run_id)
            if live is not None:
                return live
        await self._open_store()
        stored = await self.store.load(run_id)
        if stored is None:
            return None
        if self.engine.expire(stored.state):
            if stored.state.status == "awaiting_approval" and not stored.state.pending_approvals:
                stored.state.status = "running"  # nothing waits any more: resume finishes it
            await self._save(stored.state)
        return stored.state.to_result()

    async def alist_runs(self, status: str | None = None, limit: int = 50) -> list[RunSummary]:
        """Recent runs, newest first: id, query, status, start/end, step counts."""
        await self._open_store()
        if self.config.approval_timeout_s is not None:
            for waiting in await self.store.list_runs(status="awaiting_approval", limit=limit):
                await self.aget_run(waiting.run_id)  # expires what is overdue
        return await self.store.list_runs(status=status, limit=limit)

    async def aget_events(self, run_id: str, *, after: int = 0) -> list[RunEvent]:
        """The stored events of a run with ``seq > after``, in order (a late reader
        replays them, then follows live ones with ``on_event``/``astream``)."""
        if self.config.backend == "temporal":
            live = await self._temporal().get_events(run_id, after=after)
            if live is not None:
                return live
        await self._open_store()
        return await self.store.load_events(run_id, after=after)

    async def _as_read(self, run_id: str,
                       act: Callable[[StoredRun | None], Awaitable[T]]) -> T:
        """``act`` on the run as the store has it (None: it has no such run), read again
        when it changed before ``act`` could take it over (:class:`RunChanged`: another
        process resumed, decided or finished it meanwhile). Acting on the older reading
        would repeat what that process did — its payment among it."""
        for _ in range(_READS):
            try:
                return await act(await self.store.load(run_id))
            except RunChanged as exc:
                changed = exc
        raise changed  # (a RunLeased) another process keeps changing it

    async def _save(self, run: RunState) -> None:
        """Write a run changed outside an execution (a decision, an expiry) to the store."""
        recorder = RunRecorder(self.store, run.run_id, lease_s=self.config.store_lease_s)
        for step in run.steps.values():
            recorder.save_step(step)
        await recorder.finish(run)

    async def _continue(
        self,
        stored: StoredRun,
        *,
        approved: dict[str, dict[str, Any]] | None = None,
        on_event: EventCallback | None = None,
        started: asyncio.Future[RunHandle] | None = None,
        settled: list[StepResult] | None = None,
    ) -> RunResult:
        recorder = RunRecorder(self.store, stored.state.run_id, lease_s=self.config.store_lease_s)
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
        return await self._execute(stored.state, recorder, stored=stored, approved=approved,
                                   on_event=on_event, started=started, settled=settled)

    async def _execute(
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
    ) -> RunResult:
        """Run (or continue) ``run`` to its end under the observer; record its end.

        The work runs in a task of its own, registered with a :class:`RunHandle` while it
        runs (``started`` receives the handle), so that :meth:`acancel` stops exactly this
        run and not its caller. A cancellation of the caller (a shutdown) reaches the work
        too, and leaves the run resumable."""
        services = self._services(run, recorder)
        if on_event is not None:
            # someone watches the run live: the answer streams to them as it is written
            services.events.subscribe(on_event)
        for step in settled or ():  # decided before this execution (a rejection)
            self._announce_step(step, recorder, services.events)
        handle = RunHandle(run.run_id, run.query, state=run, sink=services.events,
                           cancellation=services.cancellation)
        self._active[run.run_id] = handle
        try:
            result = await self._execute_registered(run, services, handle, plan=plan,
                                                    stored=stored, approved=approved or {},
                                                    started=started)
        except BaseException as exc:
            handle._finish(exc)
            raise
        finally:
            if self._active.get(run.run_id) is handle:
                del self._active[run.run_id]
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
            with self.observer.run(run, planned_by=planned_by) as observation:
                run.trace_id = run.trace_id or observation.trace_id
                work = asyncio.get_running_loop().create_task(
                    self.engine.run(run, services, plan, stored, approved),
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
                        self._announce_step(result, recorder, services.events)
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

    def _not_found(self, run_id: str) -> RunNotFound:
        """The refusal to resume or decide a run the store does not have, in words that
        say what it may mean for the calls the run made."""
        return RunNotFound(
            f"no run {run_id!r} in the run store {self.store.url}, so it cannot be resumed. "
            "If it was started against this store, the store lost it (a database removed, "
            "replaced or restored from an older copy): the calls it made may have happened, "
            "so check with the tools before starting it again. 'dagwright runs list' shows "
            "the runs the store holds.")

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

    async def plan(self, query: str) -> ValidatedPlan:
        """Plan without executing (what ``dagwright plan`` shows); nothing is recorded."""
        _check_query(query)
        run = RunState(run_id=uuid.uuid4().hex, query=query)
        recorder = RunRecorder(None, run.run_id, lease_s=self.config.store_lease_s)
        return await self.engine.plan_only(run, self._services(run, recorder))

    # --- the Temporal backend (ORCH_BACKEND=temporal, the temporal extra) ----------------
    def _temporal(self) -> TemporalRuns:
        """The client side of runs on Temporal workers: the same engine runs them there."""
        if self._temporal_runs is None:
            try:
                from orchestration.temporal._client import TemporalRuns
            except ImportError as exc:
                raise ConfigError(needs_extra("ORCH_BACKEND=temporal", "temporal",
                                              exc.name)) from exc
            self._temporal_runs = TemporalRuns(self.config, store=self.store)
        return self._temporal_runs

    def _local_only(self, what: str) -> None:
        """Background runs and cancellation (what ``dagwright serve`` uses) are run by
        this process; on Temporal the workflow owns the run."""
        if self.config.backend == "temporal":
            raise ConfigError(
                f"{what} runs on the local backend only, and ORCH_BACKEND=temporal is set: "
                "use arun/aresume (the run executes on the workers), or unset ORCH_BACKEND "
                "for this process")

    # --- the store ----------------------------------------------------------------------
    async def _open_store(self) -> None:
        """Connect the run store once (creating its tables), and start its retention.
        Concurrent first runs wait for the one that opens it."""
        if self._store_opened:
            return
        loop = asyncio.get_running_loop()
        lock = self._store_opening.get(loop)
        if lock is None:
            lock = self._store_opening[loop] = asyncio.Lock()
        async with lock:
            if self._store_opened:
                return
            await self.store.open()
            self._store_opened = True
        days = self.config.store_retention_days
        if days is not None:
            self._retention = asyncio.get_running_loop().create_task(
                self._apply_retention(time.time() - days * 86400))

    async def _apply_retention(self, cutoff: float) -> None:
        """Delete runs that finished before ``cutoff``, off the runs' path."""
        try:
            deleted = await self.store.delete_finished_before(cutoff)
        except StoreError as exc:
            log.warning("run store retention failed: %s", exc)
        else:
            if deleted:
                log.info("run store retention deleted %d finished run(s)", deleted)

    def _services(self, run: RunState, recorder: RunRecorder) -> RunServices:
        """What one run uses: its LLM gateway (budget, usage), transport and deadline."""
        config = self.config
        budget = RunBudget(run, config, self.observer)
        return RunServices(
            # a snapshot: a catalog refresh during the run must not change what it planned with
            catalog=self.catalog.snapshot(), config=config, layers=self.layers,
            llm=LLMGateway(
                self.llm, observer=self.observer, usage=run.usage, run_id=run.run_id,
                budget=budget, policy=RetryPolicy.for_llm(config),
                clock=self.clock, debug_recorder=self._debug_recorder(),
            ),
            transport=self._transport(), observer=self.observer, recorder=recorder,
            events=EventSink(run, recorder, self.clock), clock=self.clock,
            deadline=asyncio.get_running_loop().time() + config.run_timeout_s,
            budget=budget,
            calls=self.engine.call_inspector(self.layers),
        )

    def _debug_recorder(self) -> DebugRecorder | None:
        """The LLM debug store's recorder when ``ORCH_LLM_DEBUG_ENABLED`` is on."""
        if self.debug_store is None:
            return None
        recorder: DebugRecorder = self.debug_store.recorder_for(self.redactor)
        return recorder

    # --- resources ------------------------------------------------------------------
    def _transport(self) -> ToolTransport:
        """One pooled transport per event loop (httpx clients are bound to their loop)."""
        loop_id = id(asyncio.get_running_loop())
        transport = self._transports.get(loop_id)
        if transport is None:
            config = self.config
            transport = ToolTransport.for_config(config)
            self._transports[loop_id] = transport
        return transport

    async def _close_loop_resources(self) -> None:
        """Close what this orchestrator opened for the current event loop: the tools' HTTP
        pool and the run store's connection."""
        if self._temporal_runs is not None:
            self._temporal_runs.forget_loop()
        transport = self._transports.pop(id(asyncio.get_running_loop()), None)
        if transport is not None:
            await transport.aclose()
        if self._retention is not None and not self._retention.done():
            await asyncio.wait([self._retention], timeout=5)
        await self.store.close()

    async def aclose(self) -> None:
        """Close the current loop's resources and the catalog's sources (MCP sessions)."""
        await self._close_loop_resources()
        await self.catalog.aclose()

    def close(self) -> None:
        """Close the catalog's sources from code without an event loop (after sync runs)."""
        self.catalog.close()

    async def __aenter__(self) -> Orchestrator:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
        await self.llm.aclose()
