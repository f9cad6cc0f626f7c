"""A run as a Temporal workflow: the workflow id is the run id, the engine runs inside.

The workflow runs :class:`~orchestration._engine.RunEngine` — the very code the local
backend runs: ready-set scheduling, bind → prepare → send → classify → decide for every
step, the recovery chain's decisions, repair rounds, the approval pause — with the
services of :mod:`orchestration.temporal._workflow_services`, whose tool and LLM calls
are activities and whose time is workflow time. So the same plan gives the same result on
both backends, and the run survives the loss of any worker: Temporal replays the history
on another one, which reaches the same state without calling anything again.

Approvals: a paused run (``awaiting_approval``) waits in the workflow — durably, for as
long as it takes, or until ``ORCH_APPROVAL_TIMEOUT_S`` on a timer — for the ``decide``
update (validated before it is accepted: a decision that does not fit is refused and
changes nothing). The ``settled`` update returns once the run has paused or ended; the
``run`` and ``events`` queries read it at any time.

Determinism: the workflow runs unsandboxed (``sandboxed=False``). The engine is shared,
already-imported code, which Temporal's sandbox would pass through unchecked anyway; what
makes it replay-safe is that it reads time, waits and calls the world only through its
services (see docs/scale-out.md), and the tests prove it by replaying recorded histories.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy as TemporalRetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

from orchestration._engine import RunEngine
from orchestration.errors import ApprovalError
from orchestration.events import RunEvent
from orchestration.layer_settings import LayerSettings
from orchestration.result import Approval, RunLimits
from orchestration.services import RunServices
from orchestration.sessions import SessionHistory
from orchestration.state import RunSetup, RunState
from orchestration.temporal._context import context_for
from orchestration.temporal._payloads import RECORD_RUN, WORKFLOW
from orchestration.temporal._workflow_services import run_services

__all__ = ["RunWorkflow"]

_RECORD_RETRY = TemporalRetryPolicy(maximum_attempts=5, initial_interval=timedelta(seconds=1))
"""Recording a run writes rows by key (upserts), so repeating it is harmless."""


@workflow.defn(name=WORKFLOW, sandboxed=False)
class RunWorkflow:
    """One dagwright run. Input: ``{"query", "plan" (or None), "config"}`` and, when
    given, ``"context"``, ``"limits"``, ``"session"`` (the run's number in its
    session and the earlier runs it may build on) and ``"setup"`` (how it answers, the
    saved workflow it is made from); result: the run's
    :class:`~orchestration.state.RunState` as JSON. Never credentials."""

    @workflow.init
    def __init__(self, request: dict[str, Any]) -> None:
        info = workflow.info()
        session = request.get("session")
        self._session = SessionHistory.from_payload(session) if session else None
        setup = RunSetup.model_validate(request.get("setup") or {})
        self._state = setup.new_state(
            info.workflow_id, request["query"], started_at=workflow.now().timestamp(),
            context=request.get("context"),
            limits=RunLimits.model_validate(request["limits"]) if request.get("limits") else None,
            session=self._session.session_id if self._session else None,
            session_run=self._session.number if self._session else None)
        self._events: list[RunEvent] = []
        self._recorded_seq = 0
        self._settled = 0
        """How many times the run has paused or ended (``settled`` waits for the next)."""
        self._approved: dict[str, dict[str, Any]] = {}
        self._decided = False
        self._engine: RunEngine | None = None
        self._services: RunServices | None = None

    @workflow.run
    async def run(self, request: dict[str, Any]) -> dict[str, Any]:
        context = context_for(workflow.info().task_queue)
        engine = self._engine = context.engine_for(request["config"])
        state = self._state
        plan: dict[str, Any] | None = request.get("plan")
        approved: dict[str, dict[str, Any]] = {}
        while True:
            services = self._services = run_services(
                state, engine.config, context.catalog, self._events.append,
                calls=engine.call_inspector(LayerSettings.from_config(engine.config)),
                session=self._session)
            stretch_started = workflow.time()
            await engine.run(state, services, plan, None, approved)
            state.usage.wall_time_s += workflow.time() - stretch_started
            services.events.emit("run_finished", status=state.status, error=state.error)
            await services.events.close()
            await self._settle(engine)
            plan = None
            if state.status != "awaiting_approval":
                break
            approved = await self._decisions(engine)
            if state.status == "failed":  # the plan was rejected, or its approval expired
                await self._settle(engine)
                break
            state.status = "running"
        await workflow.wait_condition(workflow.all_handlers_finished)
        return state.model_dump(mode="json")

    async def _settle(self, engine: RunEngine) -> None:
        """The run paused or ended: record it in the workers' run store, then let the
        clients waiting in ``settled`` have it."""
        state = self._state
        new_events = [e.model_dump(mode="json") for e in self._events
                      if e.seq > self._recorded_seq]
        try:
            await workflow.execute_activity(
                RECORD_RUN, {"state": state.model_dump(mode="json"), "events": new_events},
                start_to_close_timeout=timedelta(seconds=60), retry_policy=_RECORD_RETRY,
                summary="record the run")
            self._recorded_seq = state.event_seq
        except ActivityError as exc:
            state.warn(f"the run store could not record the run (its Temporal history "
                       f"still holds it): {exc.cause or exc}")
        self._settled += 1

    async def _decisions(self, engine: RunEngine) -> dict[str, dict[str, Any]]:
        """Wait for a person's decisions (the ``decide`` update) or for pending approvals
        to expire; the approved parameters by step id."""
        state = self._state
        while True:
            wait = self._until_expiry(engine)
            try:
                await workflow.wait_condition(lambda: self._decided, timeout=wait)
            except TimeoutError:
                if engine.expire(state, now=workflow.now().timestamp()):
                    return {}  # the run goes on: expired steps failed, their descendants skip
                continue
            self._decided = False
            approved, self._approved = self._approved, {}
            return approved

    def _until_expiry(self, engine: RunEngine) -> float | None:
        """Seconds until the oldest pending approval expires (None: they never do)."""
        timeout = engine.config.approval_timeout_s
        pending = self._state.pending_approvals
        if timeout is None or not pending:
            return None
        now = workflow.now().timestamp()
        return max(0.001, min(p.requested_at for p in pending) + timeout - now + 0.001)

    # --- a person's decisions ----------------------------------------------------------------
    def _apply(self, state: RunState, decisions: dict[str, dict[str, Any]]) -> dict[str, Any]:
        engine, services = self._engine, self._services
        if engine is None or services is None or state.status != "awaiting_approval":
            raise ApprovalError(f"run {state.run_id!r} is not waiting for approval (it is "
                                f"{state.status}); there is nothing to decide")
        engine.expire(state, now=workflow.now().timestamp())
        approvals = {step_id: Approval.model_validate(d) for step_id, d in decisions.items()}
        return engine.decide(state, approvals, services)

    @workflow.update(name="decide")
    def decide(self, decisions: dict[str, dict[str, Any]]) -> dict[str, int]:
        """Apply decisions (step id → :class:`Approval` as JSON); the run goes on. Returns
        what the caller waits past: the run's settle count and last event number."""
        try:
            self._approved.update(self._apply(self._state, decisions))
        except ApprovalError as exc:  # the validator saw the same state: only a race
            raise ApplicationError(str(exc), type="ApprovalError", non_retryable=True) from exc
        self._decided = True
        return {"settled": self._settled, "event_seq": self._state.event_seq}

    @decide.validator
    def _check_decide(self, decisions: dict[str, dict[str, Any]]) -> None:
        """Refuse a decision that does not fit before it is accepted (nothing changes):
        the same checks, made on a copy of the run."""
        try:
            self._apply(self._state.model_copy(deep=True), decisions)
        except (ApprovalError, ValueError) as exc:
            raise ApplicationError(str(exc), type="ApprovalError", non_retryable=True) from exc

    @workflow.update(name="settled")
    async def settled(self, after: int) -> dict[str, Any]:
        """Wait until the run has paused or ended more than ``after`` times; the run."""
        await workflow.wait_condition(lambda: self._settled > after)
        return self.current()

    # --- reading it ----------------------------------------------------------------------------
    @workflow.query(name="run")
    def current(self) -> dict[str, Any]:
        """The run as it is now, and how many times it has settled."""
        return {"settled": self._settled, "state": self._state.model_dump(mode="json")}

    @workflow.query(name="events")
    def events(self, after: int) -> list[dict[str, Any]]:
        """The run's events with ``seq > after``, in order."""
        return [e.model_dump(mode="json") for e in self._events if e.seq > after]
