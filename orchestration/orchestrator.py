"""The facade services use: ``Orchestrator.run(query)`` plans, executes and answers.

It composes the planner, the executor and the defense layers into a
:class:`~orchestration._engine.RunEngine` (the engine the local and the Temporal backends
share) and gives each run the services of this process: the run store, the pooled
transport, the LLM client, telemetry, real time.

This module is the public surface: the constructor, the methods and their contracts, the
choice of backend, and the synchronous wrappers. Each concern behind it has a module of
its own in ``orchestration/_facade/`` (the local backend's executions, resume,
cancellation, run history, the run store, per-loop resources, Temporal).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from typing import Any, TypeVar

from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import TracerProvider
from prometheus_client import CollectorRegistry

from executors.recovery import RecoveryHandler
from orchestration._budget import check_prices
from orchestration._engine import RunEngine, run_status
from orchestration._events import EventCallback
from orchestration._facade.cancellation import cancel
from orchestration._facade.history import RunHistory
from orchestration._facade.inputs import (
    RUN_ID_PATTERN,
    RunInputs,
    check_inputs,
    check_query,
    check_run_id,
    check_synthesis,
)
from orchestration._facade.local_runs import LocalRuns
from orchestration._facade.loop_resources import TransportLayer, TransportPool, run_on_new_loop
from orchestration._facade.parking import park_for_credentials
from orchestration._facade.resume import check_decisions, resume
from orchestration._facade.store_access import RunStoreAccess
from orchestration._facade.temporal import TemporalBackend, llm_for
from orchestration._facade.workflows import FacadeWorkflows, WorkflowRef
from orchestration.catalog import Catalog
from orchestration.circuit import CircuitBreakers
from orchestration.clock import Clock
from orchestration.config import OrchestratorConfig
from orchestration.context import RunContext
from orchestration.credentials import Credentials
from orchestration.debug_store import LLMDebugStore
from orchestration.errors import ConfigError, DagwrightError
from orchestration.events import RunEvent
from orchestration.handle import RunHandle
from orchestration.layer_settings import LayerSettings
from orchestration.llm.base import LLMClient
from orchestration.plan import Plan, ValidatedPlan
from orchestration.redaction import Redactor
from orchestration.result import Approval, RunLimits, RunResult, SynthesisStrategy
from orchestration.sessions import Session
from orchestration.state import RunSetup
from orchestration.store import RunStore, RunSummary, open_store
from orchestration.telemetry import Telemetry
from orchestration.telemetry._observer import Observer
from orchestration.workflows import Workflow, WorkflowEntry
from planners.planner import Planner

__all__ = ["RUN_ID_PATTERN", "Orchestrator", "run_status"]

T = TypeVar("T")
ContextArg = RunContext | Mapping[str, Any] | None
LimitsArg = RunLimits | Mapping[str, Any] | None

class Orchestrator:
    """Plans a query into a DAG of tool calls, runs it with the defense layers, answers.

    ``llm`` defaults to the client the config describes. ``tracer_provider``,
    ``meter_provider`` and ``registry`` let a service route spans, OTel metrics and
    Prometheus metrics; by default the global OTel providers (no-ops until the service
    installs them) and Prometheus' default registry.
    ``handlers`` replaces the recovery chain (layers 3/4 and resilience) wholesale;
    ``clock`` is injectable so tests need not wait for backoff. ``store`` replaces the
    run store ``config.store_url`` names. ``transport_layer`` wraps the tool transport
    made for each event loop — it is given the pooled transport and returns the one runs
    use, which delegates to it, as httpx transports are layered (``orchestration.eval``
    records and replays tool calls this way); local backend only.
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
        transport_layer: TransportLayer | None = None,
    ) -> None:
        self.config = config or OrchestratorConfig()
        if transport_layer is not None and self.config.backend != "local":
            raise ConfigError("transport_layer= wraps this process's tool transport, which "
                              "runs on the Temporal backend do not use (their workers "
                              "call the tools); use it with ORCH_BACKEND=local")
        self.catalog = catalog
        self.llm = llm if llm is not None else llm_for(self.config)
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
        # the parts behind the facade read what they use of it from it (FacadeParts)
        self.circuits = CircuitBreakers(self.config, clock=self.clock,
                                        listener=self.observer.circuit_changed)
        """The tools' circuit breakers, shared by every run of this orchestrator."""
        self._stores = RunStoreAccess(self)
        self._transports = TransportPool(transport_layer, self.circuits)
        self._temporal = TemporalBackend(self)
        self._local = LocalRuns(self, self._stores, self._transports)
        self._history = RunHistory(self, self._local, self._temporal)
        self._workflows = FacadeWorkflows(self)

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

    # --- synchronous wrappers, for code without an event loop ----------------------------
    def run(
        self,
        query: str,
        *,
        plan: Plan | dict[str, Any] | None = None,
        run_id: str | None = None,
        on_event: EventCallback | None = None,
        context: ContextArg = None,
        credentials: Credentials | None = None,
        session_id: str | None = None,
        limits: LimitsArg = None,
        synthesis: SynthesisStrategy | None = None,
    ) -> RunResult:
        """Synchronous :meth:`arun` for code without an event loop."""
        return self._sync("run", lambda: self.arun(
            query, plan=plan, run_id=run_id, on_event=on_event, context=context,
            credentials=credentials, session_id=session_id, limits=limits,
            synthesis=synthesis))

    def resume(
        self,
        run_id: str,
        *,
        approvals: dict[str, Approval] | None = None,
        on_event: EventCallback | None = None,
        credentials: Credentials | None = None,
    ) -> RunResult:
        """Synchronous :meth:`aresume`."""
        return self._sync("resume", lambda: self.aresume(
            run_id, approvals=approvals, on_event=on_event, credentials=credentials))

    def run_workflow(
        self,
        workflow: WorkflowRef,
        inputs: dict[str, Any] | None = None,
        *,
        run_id: str | None = None,
        on_event: EventCallback | None = None,
        synthesis: SynthesisStrategy | None = None,
        context: ContextArg = None,
        credentials: Credentials | None = None,
        session_id: str | None = None,
        limits: LimitsArg = None,
    ) -> RunResult:
        """Synchronous :meth:`arun_workflow`."""
        return self._sync("run_workflow", lambda: self.arun_workflow(
            workflow, inputs, run_id=run_id, on_event=on_event, synthesis=synthesis,
            context=context, credentials=credentials, session_id=session_id, limits=limits))

    def get_run(self, run_id: str) -> RunResult | None:
        """Synchronous :meth:`aget_run`."""
        return self._sync("get_run", lambda: self.aget_run(run_id))

    def list_runs(self, status: str | None = None, limit: int = 50, *,
                  tenant: str | None = None, user: str | None = None,
                  session_id: str | None = None) -> list[RunSummary]:
        """Synchronous :meth:`alist_runs`."""
        return self._sync("list_runs", lambda: self.alist_runs(
            status, limit, tenant=tenant, user=user, session_id=session_id))

    def get_session(self, session_id: str, *, tenant: str | None = None) -> Session | None:
        """Synchronous :meth:`aget_session`."""
        return self._sync("get_session", lambda: self.aget_session(session_id, tenant=tenant))

    def get_events(self, run_id: str, *, after: int = 0) -> list[RunEvent]:
        """Synchronous :meth:`aget_events`."""
        return self._sync("get_events", lambda: self.aget_events(run_id, after=after))

    def _sync(self, name: str, call: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Run ``call()`` on a new event loop, closing what it opened for that loop."""
        return run_on_new_loop(name, call, self._end_of_sync_loop)

    async def _end_of_sync_loop(self) -> None:
        # this loop ends here, so the pools made for it (tools', the LLM client's, the
        # store's) are closed inside it. The catalog's sources (MCP sessions) live on the
        # catalog's own loop and stay open for the next run and for runs of other
        # threads; close() ends them.
        await self._close_loop_resources()
        await self.llm.aclose()

    # --- running ----------------------------------------------------------------------
    async def arun(
        self,
        query: str,
        *,
        plan: Plan | dict[str, Any] | None = None,
        run_id: str | None = None,
        on_event: EventCallback | None = None,
        context: ContextArg = None,
        credentials: Credentials | None = None,
        session_id: str | None = None,
        limits: LimitsArg = None,
        synthesis: SynthesisStrategy | None = None,
    ) -> RunResult:
        """Plan ``query`` (or use the given ``plan``), execute it, synthesise the answer.

        The run is recorded in the run store as it goes. ``run_id`` names it: a finished
        run with that id is returned as stored, without running anything; an interrupted
        one is resumed (see :meth:`aresume`). ``on_event`` receives every
        :class:`~orchestration.events.RunEvent` in order (sync or async; one that raises
        is logged once and gets no more events, the run goes on). ``synthesis`` chooses
        how this run's answer is composed (``llm``, ``template``, ``raw``; default
        ``ORCH_SYNTHESIS_STRATEGY``).

        Runs in context (docs/context.md): ``context`` says who the run is for (a
        mapping or a :class:`~orchestration.context.RunContext`: ``tenant``, ``user``,
        anything flat) — stored, filterable, on every span and event, read by
        ``requires_approval`` conditions; ``credentials`` maps tool or source names to
        headers sent in place of the catalog's, for this run only, and never recorded
        (local backend only); ``session_id`` makes the run a follow-up of the session's
        earlier runs, whose outputs its plan may use (``{{run:N.step.path}}``);
        ``limits`` (a :class:`~orchestration.result.RunLimits`) replace the configured
        budgets for this run. An input that cannot be used raises :class:`InvalidInput`
        before anything is recorded.

        Raises :class:`StoreError` when the store cannot record the run (before anything
        is sent) or lost a write on the way (the error carries the result),
        :class:`RunLeased` when another process is running it.
        """
        check_query(query)
        self._temporal.refuse_credentials(credentials)
        inputs = self._inputs(context, credentials, session_id, limits)
        setup = RunSetup(answer_strategy=check_synthesis(synthesis))
        return await self._start(query, plan, run_id, on_event, inputs, setup)

    async def _start(self, query: str, plan: Plan | dict[str, Any] | None, run_id: str | None,
                     on_event: EventCallback | None, inputs: RunInputs,
                     setup: RunSetup) -> RunResult:
        """A new run, on the backend this orchestrator uses, to its end."""
        if self._temporal.enabled:
            if run_id is not None:
                check_run_id(run_id)
            return await self._temporal.runs().run(query, plan=plan, run_id=run_id,
                                                   on_event=on_event, inputs=inputs,
                                                   setup=setup)
        return await self._local.start_new(query, plan=plan, run_id=run_id, on_event=on_event,
                                           inputs=inputs, setup=setup)

    def _inputs(self, context: ContextArg, credentials: Credentials | None,
                session_id: str | None, limits: LimitsArg) -> RunInputs:
        return check_inputs(self.catalog, context=context, credentials=credentials,
                            session_id=session_id, limits=limits)

    async def arun_workflow(
        self,
        workflow: WorkflowRef,
        inputs: dict[str, Any] | None = None,
        *,
        run_id: str | None = None,
        on_event: EventCallback | None = None,
        synthesis: SynthesisStrategy | None = None,
        context: ContextArg = None,
        credentials: Credentials | None = None,
        session_id: str | None = None,
        limits: LimitsArg = None,
    ) -> RunResult:
        """Run a saved workflow with ``inputs``: no planning (and no planning LLM call);
        every defense layer and the resilience policy apply to its steps.

        ``workflow`` is a :class:`~orchestration.workflows.Workflow`, the path of its file,
        or its name in the workflows directory (``ORCH_WORKFLOWS_DIR``, else
        ``workflows/`` beside the catalog). It is checked against the catalog first, and
        the inputs are validated (layer 2 coercion, then their schemas) and bound into its
        steps; what does not fit raises :class:`~orchestration.errors.WorkflowError` or
        :class:`~orchestration.errors.InvalidInput`, naming every problem, before
        anything is recorded or sent. The result's ``workflow`` holds the inputs and the
        named outputs; its answer follows ``synthesis``, else the workflow's ``answer``,
        else ``ORCH_SYNTHESIS_STRATEGY``. ``run_id`` and ``on_event`` as in :meth:`arun`;
        so are ``context``, ``credentials`` and ``limits`` (who the run is for, its own
        headers for the tools, its budgets) and ``session_id`` (the run joins the session:
        it is numbered in it, and later runs of the session may use its outputs).
        """
        self._temporal.refuse_credentials(credentials)
        given = self._inputs(context, credentials, session_id, limits)
        call = self._workflows.call(workflow, inputs, check_synthesis(synthesis))
        return await self._start(call.query, call.plan, run_id, on_event, given, call.setup)

    async def astart_workflow(
        self,
        workflow: WorkflowRef,
        inputs: dict[str, Any] | None = None,
        *,
        run_id: str | None = None,
        on_event: EventCallback | None = None,
        synthesis: SynthesisStrategy | None = None,
        context: ContextArg = None,
        credentials: Credentials | None = None,
        session_id: str | None = None,
        limits: LimitsArg = None,
    ) -> RunHandle:
        """Start :meth:`arun_workflow` in the background (as :meth:`astart` does a query);
        what the workflow or its inputs do not fit raises here, before anything runs."""
        self._temporal.refuse("astart_workflow")
        given = self._inputs(context, credentials, session_id, limits)
        call = self._workflows.call(workflow, inputs, check_synthesis(synthesis))
        return await self._local.start_in_background(lambda started: self._local.start_new(
            call.query, plan=call.plan, run_id=run_id, on_event=on_event, started=started,
            inputs=given, setup=call.setup))

    def load_workflow(self, workflow: WorkflowRef) -> Workflow:
        """The workflow (by name, path, or as given), checked against the catalog as it is
        now: :class:`~orchestration.errors.WorkflowError` lists every problem, with the
        catalog's revision."""
        return self._workflows.load(workflow)

    def list_workflows(self) -> list[WorkflowEntry]:
        """Every workflow file of the workflows directory, each with the problems that keep
        it from running (none: it fits the catalog)."""
        return self._workflows.entries()

    async def astart(
        self,
        query: str,
        *,
        plan: Plan | dict[str, Any] | None = None,
        run_id: str | None = None,
        on_event: EventCallback | None = None,
        context: ContextArg = None,
        credentials: Credentials | None = None,
        session_id: str | None = None,
        limits: LimitsArg = None,
        synthesis: SynthesisStrategy | None = None,
    ) -> RunHandle:
        """Start :meth:`arun` in the background; return once the run is recorded and held
        by this process (so :meth:`aget_run` finds it), while it goes on. ``context``,
        ``credentials``, ``session_id`` and ``limits`` as for :meth:`arun`.

        Everything :meth:`arun` would raise before executing is raised here:
        :class:`RunLeased` for a run id another call or process is executing (one run
        id never runs twice at once), :class:`DagwrightError` for a run id taken by
        another query, :class:`StoreError`. A finished run id gives a handle that is
        already done, with the stored result. Stop the run with :meth:`acancel` (it ends
        ``cancelled``) or :meth:`RunHandle.interrupt` (it stays resumable).
        """
        self._temporal.refuse("astart")
        check_query(query)
        inputs = self._inputs(context, credentials, session_id, limits)
        setup = RunSetup(answer_strategy=check_synthesis(synthesis))
        return await self._local.start_in_background(lambda started: self._local.start_new(
            query, plan=plan, run_id=run_id, on_event=on_event, started=started,
            inputs=inputs, setup=setup))

    async def astart_resume(
        self,
        run_id: str,
        *,
        approvals: dict[str, Approval] | None = None,
        on_event: EventCallback | None = None,
        credentials: Credentials | None = None,
    ) -> RunHandle:
        """Start :meth:`aresume` in the background; return once the decisions are applied
        and the run is held by this process.

        Raises what :meth:`aresume` raises before executing (:class:`RunNotFound`,
        :class:`ApprovalError`, :class:`RunLeased`); a run with nothing to do (finished,
        or still waiting) gives a handle that is already done."""
        self._temporal.refuse("astart_resume")
        given = self._inputs(None, credentials, None, None).credentials
        return await self._local.start_in_background(lambda started: resume(
            self, self._local, run_id, approvals=approvals, on_event=on_event,
            started=started, credentials=given))

    async def astream(
        self,
        query: str,
        *,
        plan: Plan | dict[str, Any] | None = None,
        run_id: str | None = None,
        context: ContextArg = None,
        credentials: Credentials | None = None,
        session_id: str | None = None,
        limits: LimitsArg = None,
        synthesis: SynthesisStrategy | None = None,
    ) -> AsyncIterator[RunEvent]:
        """Run ``query`` and yield its events as they happen, ``run_finished`` last; the
        keyword arguments as for :meth:`arun`.

        Leaving the iteration early cancels the run (it stays resumable).
        """
        queue: asyncio.Queue[RunEvent | None] = asyncio.Queue()
        task = asyncio.get_running_loop().create_task(
            self.arun(query, plan=plan, run_id=run_id, on_event=queue.put_nowait,
                      context=context, credentials=credentials, session_id=session_id,
                      limits=limits, synthesis=synthesis))
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
        credentials: Credentials | None = None,
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

        **Per-run credentials** are never stored: a run started with ``credentials=``
        that still has calls for those tools needs them again here, or raises
        :class:`CredentialsRequired` (naming them) before anything changes.

        A finished run is returned as it is. Raises :class:`RunNotFound` for an unknown
        id and :class:`RunLeased` while another live process is executing the run.
        """
        self._temporal.refuse_credentials(credentials)
        given = self._inputs(None, credentials, None, None)
        if self._temporal.enabled:
            return await self._temporal.runs().resume(run_id, approvals=approvals,
                                                      on_event=on_event)
        return await resume(self, self._local, run_id, approvals=approvals, on_event=on_event,
                            credentials=given.credentials)

    async def acheck_approvals(self, run_id: str, approvals: dict[str, Approval]) -> RunResult:
        """Check decisions without applying them: the run as it is, or what
        :meth:`aresume` would raise for ``approvals`` (:class:`ApprovalError`,
        :class:`RunNotFound`). For a service that accepts a decision now and has it
        applied later, wherever a slot is free (``dagwright serve``): a run that needs
        per-run credentials to go on raises :class:`CredentialsRequired`, as a resume
        without them would."""
        self._temporal.refuse("acheck_approvals")
        return await check_decisions(self, self._local, run_id, approvals)

    async def apark_for_credentials(self, run_id: str) -> list[str]:
        """For a process that takes over the runs nobody executes (``dagwright serve``):
        the per-run credentials the stopped run ``run_id`` needs to go on (they are never
        stored), [] when it needs none. A run that needs some is not taken over: it stays
        ``running`` and resumable with them, and gets a warning saying so (once), written
        under its lease taken for that alone — nothing is sent. Raises
        :class:`RunNotFound`, and :class:`RunLeased` while a live process executes it."""
        self._temporal.refuse("apark_for_credentials")
        return await park_for_credentials(self._local, run_id)

    async def plan(self, query: str) -> ValidatedPlan:
        """Plan without executing (what ``dagwright plan`` shows); nothing is recorded."""
        return await self._local.plan(query)

    # --- runs executing here --------------------------------------------------------
    def active_run(self, run_id: str) -> RunHandle | None:
        """The handle of ``run_id`` while this orchestrator executes it (started by
        :meth:`arun`, :meth:`astart` or a resume); None otherwise."""
        return self._local.active.get(run_id)

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
        self._temporal.refuse("acancel")
        return await cancel(self, self._local, run_id, reason)

    # --- the run history --------------------------------------------------------------
    async def aget_run(self, run_id: str) -> RunResult | None:
        """The run as the store has it (a running run with the steps finished so far);
        a run this orchestrator is executing as it is in memory (fresher: store writes
        are batched).

        Pending approvals older than ``ORCH_APPROVAL_TIMEOUT_S`` are rejected as expired
        here (and recorded); a resume then finishes the run. On the Temporal backend, the
        run as its workflow has it (live), else as the store has it."""
        return await self._history.get_run(run_id)

    async def alist_runs(self, status: str | None = None, limit: int = 50, *,
                         tenant: str | None = None, user: str | None = None,
                         session_id: str | None = None) -> list[RunSummary]:
        """Recent runs, newest first: id, query, status, start/end, step counts, context
        and session. ``tenant`` and ``user`` keep the runs whose context names them;
        ``session_id`` a session's runs (newest first)."""
        return await self._history.list_runs(status, limit, tenant=tenant, user=user,
                                             session_id=session_id)

    async def aget_session(self, session_id: str, *,
                           tenant: str | None = None) -> Session | None:
        """The session ``session_id`` of ``tenant`` (sessions of different tenants are
        apart) with its runs, newest first; None when it has no run."""
        return await self._local.sessions.get(session_id, tenant)

    async def aget_events(self, run_id: str, *, after: int = 0) -> list[RunEvent]:
        """The stored events of a run with ``seq > after``, in order (a late reader
        replays them, then follows live ones with ``on_event``/``astream``)."""
        return await self._history.events(run_id, after)

    # --- resources ------------------------------------------------------------------
    async def _close_loop_resources(self) -> None:
        """Close what this orchestrator opened for the current event loop: the tools' HTTP
        pool and the run store's connection."""
        self._temporal.forget_loop()
        await self._transports.aclose_current_loop()
        await self._stores.close()

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
