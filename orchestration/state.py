"""What a run *is*: plain data that can be serialised whole and picked up again.

:class:`RunState` holds everything a run has produced so far — its query, plan, each
finished step with its attempts, the outputs later steps bind to, usage, warnings and
the answer — and nothing it merely *uses* (catalog, config, LLM client, telemetry,
transport, clock: those are :class:`~orchestration.services.RunServices`). Keeping the
two apart is what lets a run be stored, resumed in another process, or replayed on
another backend: the state is data, the services are rebuilt where the run continues.

The engine changes a state only through its methods (:meth:`RunState.record_step`,
:meth:`RunState.finish`, ...), so the places a run moves forward are few and named.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from orchestration.context import context_text
from orchestration.protocol import ErrorCategory, ErrorSource, StepError
from orchestration.result import (
    BudgetExceeded,
    PendingApproval,
    PlanSource,
    RunLimits,
    RunResult,
    RunStatus,
    RunUsage,
    StepResult,
    SynthesisStrategy,
    WorkflowInfo,
)

__all__ = ["RunSetup", "RunState"]


class RunState(BaseModel):
    """The data of one run, from its start to its end.

    ``steps`` holds the results of finished steps of every round (the original plan and
    any repair rounds) in the order they finished; ``superseded`` names the failed or
    skipped ones a repair round made up for. ``outputs`` (the data of succeeded steps,
    which references bind to) is derived from ``steps`` and kept in step with it.
    """

    run_id: str
    query: str
    status: RunStatus = "running"
    plan: dict[str, Any] | None = None
    steps: dict[str, StepResult] = Field(default_factory=dict)
    superseded: list[str] = Field(default_factory=list)
    replans: list[dict[str, Any]] = Field(default_factory=list)
    usage: RunUsage = Field(default_factory=RunUsage)
    warnings: list[str] = Field(default_factory=list)
    answer: str | None = None
    error: str | None = None
    trace_id: str | None = None
    debug_path: str | None = None
    """Where the LLM debug store keeps this run's prompts and answers, when it is on."""
    pending_approvals: list[PendingApproval] = Field(default_factory=list)
    """Calls (or the plan) waiting for a person; the run is ``awaiting_approval``."""
    approved_plan: bool = False
    """The whole plan was approved (``ORCH_APPROVE_PLANS``)."""
    approval_notes: dict[str, str] = Field(default_factory=dict)
    """The note a person gave with an approval, by step id, until the approved call's
    attempt carries it."""
    event_seq: int = 0
    """The sequence number of the run's last event."""
    budget_exceeded: BudgetExceeded | None = None
    context: dict[str, Any] | None = None
    """Who the run is for (see :mod:`orchestration.context`): stored and indexed, on every
    span and event of the run, read by ``requires_approval`` conditions."""
    session: str | None = None
    session_run: int | None = None
    """The run's number in its session (1, 2, ...), within the session's tenant."""
    credentials_for: list[str] = Field(default_factory=list)
    """The tools and sources this run was given per-run credentials for: names only (the
    values live in the run's services, never here), so a resume can ask for them again."""
    limits: RunLimits | None = None
    """Budgets of this run that replace the configured ones (a tenant's)."""
    plan_source: PlanSource | None = None
    """Where the plan came from: the planner, the plan cache, the caller, a workflow."""
    answer_strategy: SynthesisStrategy | None = None
    """How the answer is composed (None: ORCH_SYNTHESIS_STRATEGY); the one used, once
    the answer is made."""
    answer_template: str | None = None
    """The workflow's answer template (strategy ``template``)."""
    workflow: WorkflowInfo | None = None
    """The saved workflow this run was made from, its inputs and named outputs."""
    started_at: float = Field(default_factory=time.time)
    finished_at: float | None = None

    _outputs: dict[str, Any] = PrivateAttr(default_factory=dict)

    @classmethod
    def from_stored(cls, record: dict[str, Any], steps: dict[str, StepResult]) -> RunState:
        """A state from a store's run record and step results (in any order): the steps
        are put back in the order the record lists (``step_order``), the rest after."""
        order = [sid for sid in record.get("step_order", []) if sid in steps]
        ordered = {sid: steps[sid] for sid in order}
        ordered.update({sid: s for sid, s in steps.items() if sid not in ordered})
        return cls.model_validate({**record, "steps": ordered})

    def model_post_init(self, context: Any, /) -> None:
        """Rebuild the outputs when a state is loaded (they are not stored twice)."""
        self._outputs = {sid: s.output for sid, s in self.steps.items() if s.status == "succeeded"}

    @property
    def outputs(self) -> dict[str, Any]:
        """Data of the succeeded steps by step id: what ``{{step.path}}`` binds to."""
        # read from the private-attribute dict directly: ``self._outputs`` goes through
        # the model's ``__getattr__`` fallback (~1.3 µs), and this is read once per step
        return self.__pydantic_private__["_outputs"]  # type: ignore[index]

    # --- moving the run forward ---------------------------------------------------------
    def record_step(self, result: StepResult) -> None:
        """A step finished (succeeded, failed or skipped)."""
        self.steps[result.id] = result
        if result.status == "succeeded":
            self.outputs[result.id] = result.output
        else:
            self.outputs.pop(result.id, None)

    def discard_steps(self, step_ids: Iterable[str]) -> None:
        """Forget steps that ran for a plan that was then thrown away (a streamed plan the
        planner did not accept): their results, outputs and pending approvals."""
        gone = set(step_ids)
        for step_id in gone:
            self.steps.pop(step_id, None)
            self.outputs.pop(step_id, None)
        self.pending_approvals = [p for p in self.pending_approvals if p.step_id not in gone]

    def arrange(self, order: list[str]) -> None:
        """Put the steps of a finished round in plan (topological) order: results are
        recorded as steps finish, but readers expect the order of the plan."""
        ordered = {sid: self.steps[sid] for sid in order if sid in self.steps}
        self.steps = {**{k: v for k, v in self.steps.items() if k not in ordered}, **ordered}

    def warn(self, text: str) -> None:
        """Something the caller should know that did not fail the run."""
        self.warnings.append(text)

    def fail(self, error: str, *, at: float | None = None) -> None:
        """The run ends failed before or outside its steps (planning, a deadline), at
        wall-clock time ``at`` (now by default; the engine passes its clock's)."""
        self.status = "failed"
        self.error = error
        self.finished_at = time.time() if at is None else at

    def finish(self, status: RunStatus, *, at: float | None = None) -> None:
        """The run ends with ``status``; ``error`` sums up the steps that failed for good."""
        self.status = status
        failures = [s.error.describe() for s in self.steps.values()
                    if s.error is not None and s.id not in self.superseded]
        self.error = "; ".join(failures) if failures else None
        self.finished_at = time.time() if at is None else at

    def pause(self) -> None:
        """Every step that could run did; the rest waits for ``pending_approvals``."""
        self.status = "awaiting_approval"
        self.finished_at = None
    def settle_budget(self) -> None:
        """If a budget stopped the run, say so: the run did not do all it was asked (it is
        not ``succeeded``) and its error starts with the budget (see ``_budget``)."""
        report = self.budget_exceeded
        if report is None:
            return
        if self.status in ("succeeded", "running"):
            self.status = "partial" if any(
                s.status == "succeeded" for s in self.live_steps.values()) else "failed"
        reason = report.describe()
        if reason not in (self.error or ""):
            self.error = f"run stopped: {reason}" + (f"; {self.error}" if self.error else "")
        self.finished_at = self.finished_at or time.time()

    def cancel(self, reason: str) -> list[StepResult]:
        """The run ends ``cancelled`` (a final status: a resume returns it as it is).

        Steps waiting for a person become ``cancelled`` and their approvals are dropped;
        steps of the plan that never started are ``skipped``. Steps stopped while they ran
        were recorded by the executor as they stopped. Returns the step results this
        added or changed, for the caller to record and announce.
        """
        changed: list[StepResult] = []
        for step in list(self.steps.values()):
            if step.status == "awaiting_approval":
                changed.append(step.model_copy(update={
                    "status": "cancelled",
                    "error": StepError(
                        category=ErrorCategory.CANCELLED, code="RUN_CANCELLED",
                        message=f"the run was cancelled ({reason}) while this call waited "
                                "for approval; it was not sent",
                        source=ErrorSource.ENGINE, retryable=False, request_sent=False,
                        step_id=step.id, tool=step.tool, capability=step.capability)}))
        for plan_step in (self.plan or {}).get("steps", []):
            if plan_step["id"] not in self.steps:
                changed.append(StepResult(
                    id=plan_step["id"], tool=plan_step["tool"],
                    capability=plan_step["capability"], status="skipped",
                    skipped_reason=f"the run was cancelled ({reason}) before this step started"))
        for result in changed:
            self.record_step(result)
        self.pending_approvals = []
        self.status = "cancelled"
        self.error = f"cancelled: {reason}"
        self.finished_at = time.time()
        return changed

    # --- reading it ---------------------------------------------------------------------
    @property
    def live_steps(self) -> dict[str, StepResult]:
        """Steps whose results stand: every step but those a repair round replaced."""
        return {sid: s for sid, s in self.steps.items() if sid not in self.superseded}

    def to_result(self) -> RunResult:
        """The public view of this state (what :meth:`Orchestrator.run` returns)."""
        plan = self.plan
        if plan is not None and self.replans:
            plan = {**plan, "replans": list(self.replans)}
        return RunResult(
            run_id=self.run_id, query=self.query, status=self.status, answer=self.answer,
            plan=plan, steps=dict(self.steps), usage=self.usage, error=self.error,
            warnings=list(self.warnings), trace_id=self.trace_id,
            pending_approvals=list(self.pending_approvals),
            budget_exceeded=self.budget_exceeded, context=self.context,
            session=self.session, session_run=self.session_run, plan_source=self.plan_source,
            answer_strategy=self.answer_strategy, workflow=self.workflow,
        )

    @property
    def tenant(self) -> str | None:
        """The context's tenant (None: the run belongs to no tenant)."""
        return context_text(self.context, "tenant")

    @property
    def user(self) -> str | None:
        return context_text(self.context, "user")


class RunSetup(BaseModel):
    """What a caller decides about a new run besides its query and plan: how its answer is
    composed, and the workflow it is made from (with where its plan comes from). Plain
    data, so it travels to a Temporal worker with the run's request."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    plan_source: PlanSource | None = None
    answer_strategy: SynthesisStrategy | None = None
    answer_template: str | None = None
    workflow: WorkflowInfo | None = None

    def new_state(self, run_id: str, query: str, **fields: Any) -> RunState:
        """A new run's state with these settings (``fields``: the rest, e.g. its start)."""
        return RunState(run_id=run_id, query=query, **fields,
                        **self.model_dump(exclude_none=True))
