"""What a run returns: the plan, each step's outcome and attempt history, usage, answer.

Everything here is JSON-serialisable through ``to_dict()`` so a service can log or
return a run as it is.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from orchestration.errors import DagwrightError, RetryExhausted, StepFailed
from orchestration.protocol import ErrorCategory, StepError

__all__ = [
    "PLAN_APPROVAL", "Approval", "Attempt", "AttemptOutcome", "BudgetExceeded", "BudgetKind",
    "CoercionRecord", "Layer", "PendingApproval", "PlanSource", "Provenance", "ProvenanceKind",
    "RunLimits", "RunResult", "RunStatus", "RunUsage", "StepResult", "StepStatus",
    "SynthesisStrategy", "WorkflowInfo"
]


Layer = Literal[
    "plan",  # parameters as the planner wrote them (layer 1)
    "resilience",  # same parameters again after a transport fault
    "validation_feedback",  # layer 3 corrected them
    "semantic_retry",  # layer 4 re-resolved them
    "transient_override",  # layer 4 declared the error transient
    "approval",  # a person approved the call (with the parameters shown, or edited ones)
]
AttemptOutcome = Literal[
    "succeeded",
    "failed",  # the tool (or the transport) answered with an error
    "invalid",  # pre-flight validation rejected the parameters; nothing was sent
    "unbound",  # a reference could not be resolved; nothing was sent
    "not_sent",  # a guard stopped the call (re-send guard, deadline): it cannot have been sent
    "cancelled",  # the deadline or the run's cancellation cut it after its request went out
]
StepStatus = Literal[
    "succeeded",
    "failed",
    "skipped",
    "unknown",  # a side effect may or may not have happened (OUTCOME_UNKNOWN): not re-sent
    "awaiting_approval",  # paused before its call until a person decides (pending_approvals)
    "cancelled",  # the run was cancelled while the step was running or waiting (code CANCELLED)
]
RunStatus = Literal[
    "running",  # in progress, or interrupted (resume it)
    "awaiting_approval",  # paused: every step that could run did; see pending_approvals
    "succeeded",
    "partial",
    "failed",
    "cancelled",
]

PlanSource = Literal[
    "llm",  # the planner wrote it for this run
    "cache",  # the plan of an earlier run of the same query (ORCH_PLAN_CACHE)
    "caller",  # given with plan=
    "workflow",  # a saved workflow's steps, its inputs bound
]
SynthesisStrategy = Literal["llm", "template", "raw"]
"""How a run's answer is composed: an LLM call, a template, or the outputs as JSON."""

PLAN_APPROVAL = "@plan"
"""The ``step_id`` of the approval of a whole plan (``ORCH_APPROVE_PLANS``)."""


class PendingApproval(BaseModel):
    """A call (or, with ``step_id == PLAN_APPROVAL``, a whole plan) waiting for a person.

    ``params`` are exactly what would be sent — bound and coerced; for a plan,
    ``{"plan": ...}``. Decide with ``orch.resume(run_id, approvals={step_id: Approval(...)})``.
    """

    step_id: str
    tool: str | None = None
    capability: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    reason: str
    requested_at: float


class Approval(BaseModel):
    """A person's decision on a pending approval.

    ``approved``: send it. ``params``, when given, is an edit merged onto the proposed
    parameters (JSON Merge Patch, RFC 7396: the keys given replace theirs, ``None``
    removes a key, the rest stay); the merged parameters pass layer 2 and schema
    validation as a whole. For the plan approval, ``params`` is a whole replacement plan.
    Rejected: the step fails with code ``REJECTED`` and ``note``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    approved: bool
    params: dict[str, Any] | None = None
    note: str | None = None


class CoercionRecord(BaseModel):
    """One change layer 2 made: where, from what, to what."""

    path: str
    old: Any
    new: Any
    rule: str = ""


ProvenanceKind = Literal[
    "query",  # a quote of the user's request
    "upstream",  # a path into the output of a step this one depends on
    "derived",  # arithmetic over such values, e.g. 100 * {{quote.price}}
    "tool_hint",  # a quote of the error the tool sent (its "did you mean ...")
    "removed",  # the parameter was removed: no value to ground
    "none",  # the answer named no source (or an unusable one)
]


class Provenance(BaseModel):
    """Where one corrected parameter's value comes from, and what the engine found when it
    checked that claim before sending (see ``executors/_grounding.py``).

    ``source`` is the claim as given (the quote, the path, the expression); ``value`` what
    the claim works out to, when it could be worked out; ``grounded`` whether it matches the
    value sent; ``reason`` a machine-readable cause when it does not (``quote_not_found``,
    ``value_mismatch``, ...), with ``detail`` in words.
    """

    kind: ProvenanceKind
    source: str | None = None
    value: Any = None
    grounded: bool
    reason: str | None = None
    detail: str | None = None


class Attempt(BaseModel):
    """One try of one step: who produced the parameters, what was sent, what came back."""

    number: int
    layer: Layer
    params: dict[str, Any] = Field(default_factory=dict)
    outcome: AttemptOutcome
    error: StepError | None = None
    latency_s: float = 0.0
    delay_s: float = 0.0
    coercions: list[CoercionRecord] = Field(default_factory=list)
    validation_errors: list[dict[str, Any]] = Field(default_factory=list)
    analysis: str | None = None
    note: str | None = None
    provenance: dict[str, Provenance] = Field(default_factory=dict)
    """Per corrected parameter (layer 4): the claimed source and the engine's verdict."""


class StepResult(BaseModel):
    """A step's final state. ``output`` is set when it succeeded, ``error`` when it failed."""

    id: str
    tool: str
    capability: str
    status: StepStatus
    output: Any = None
    error: StepError | None = None
    skipped_reason: str | None = None
    attempts: list[Attempt] = Field(default_factory=list)
    started_at_s: float | None = None
    duration_s: float = 0.0

    def raise_for_status(self) -> None:
        """Raise if the step did not succeed; do nothing if it did.

        A failed step that was retried raises :class:`RetryExhausted`, a step that failed
        on its only attempt :class:`StepFailed`; both carry every attempt (layer,
        parameters, error, delay, analysis), and the message names what stopped the retries
        (``details["gave_up"]``: a cap, a give-up reason). A skipped step raises
        :class:`StepFailed` naming the upstream failure.
        """
        if self.status == "succeeded":
            return
        if self.status == "skipped" or self.error is None:
            raise StepFailed(
                StepError(
                    category=ErrorCategory.BINDING_ERROR,
                    code="UPSTREAM_FAILED",
                    message=self.skipped_reason or f"step {self.id!r} did not run",
                    retryable=False,
                    request_sent=False,
                    step_id=self.id,
                    tool=self.tool,
                    capability=self.capability,
                ),
                self.attempts,
            )
        exc_type = RetryExhausted if len(self.attempts) > 1 else StepFailed
        exc = exc_type(self.error, self.attempts)
        gave_up = self.error.details.get("gave_up")
        if gave_up:
            exc.args = (f"{self.error.describe()} (stopped: {gave_up})",)
        raise exc


class WorkflowInfo(BaseModel):
    """The saved workflow a run was made from: which one (name, file, ``revision`` — a
    digest of the file's content), the inputs it ran with (validated, coerced), and its
    named ``outputs``: ``output_refs`` as the file writes them, resolved against the
    run's results when the run ends (an output whose step did not succeed is None, and
    a warning says why)."""

    name: str
    path: str | None = None
    revision: str
    inputs: dict[str, Any] = Field(default_factory=dict)
    output_refs: dict[str, Any] = Field(default_factory=dict)
    outputs: dict[str, Any] = Field(default_factory=dict)


BudgetKind = Literal["llm_calls", "tokens", "cost", "capability_calls"]


class BudgetExceeded(BaseModel):
    """Which budget stopped a run, its limit, what had been used, and the setting to raise.

    A budget stops a run when the run needs more than it allows — an LLM call or a tool
    call is refused — not when the last allowed unit is spent: tokens and cost are known
    only after a call, so the call that crosses the limit completes and the next is refused.
    """

    budget: BudgetKind
    limit: float
    used: float
    setting: str
    capability: str | None = None

    def describe(self) -> str:
        """``the run's LLM token budget is spent: 10234 of 10000 tokens (ORCH_MAX_...)``."""
        what = {"llm_calls": ("LLM call", "calls"), "tokens": ("LLM token", "tokens"),
                "cost": ("LLM cost", ""), "capability_calls": ("call", "calls")}[self.budget]
        name = (f"the run's {what[0]} budget of capability {self.capability}"
                if self.capability else f"the run's {what[0]} budget")
        unit = f" {what[1]}" if what[1] else ""
        return f"{name} is spent: {self.used:g} of {self.limit:g}{unit} ({self.setting})"


class RunLimits(BaseModel):
    """Budgets of one run that replace the configured ones (``ORCH_MAX_LLM_CALLS_PER_RUN``,
    ``ORCH_MAX_TOKENS_PER_RUN``, ``ORCH_MAX_COST_PER_RUN``) for that run: what a service
    gives each of its tenants (``dagwright serve`` takes them from ``ORCH_SERVE_TOKENS``).
    A limit left None keeps the configured one. Stored with the run, so a resumed run
    keeps them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_llm_calls_per_run: int | None = Field(None, ge=1)
    max_tokens_per_run: int | None = Field(None, ge=1)
    max_cost_per_run: float | None = Field(None, gt=0, allow_inf_nan=False)


class RunUsage(BaseModel):
    """Totals of one run; ``by_purpose`` splits LLM calls and tokens by why they were made.

    ``cost`` is the LLM cost priced with ``ORCH_LLM_PRICES`` (None without a price for
    the model), and ``cost_by_purpose`` the same cost split by purpose (only priced calls
    appear), so what each defense layer spent can be told apart (``dagwright eval``);
    ``tool_calls`` counts the calls sent per capability (``tool.capability``), what
    ``max_calls_per_run`` budgets are checked against.
    """

    llm_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float | None = None
    wall_time_s: float = 0.0
    by_purpose: dict[str, dict[str, int]] = Field(default_factory=dict)
    cost_by_purpose: dict[str, float] = Field(default_factory=dict)
    tool_calls: dict[str, int] = Field(default_factory=dict)

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def record_llm(self, purpose: str, input_tokens: int, output_tokens: int) -> None:
        self.llm_calls += 1
        self.input_tokens += input_tokens
        self.output_tokens += output_tokens
        slot = self.by_purpose.setdefault(
            purpose, {"calls": 0, "input_tokens": 0, "output_tokens": 0}
        )
        slot["calls"] += 1
        slot["input_tokens"] += input_tokens
        slot["output_tokens"] += output_tokens

    def record_cost(self, purpose: str, cost: float) -> None:
        """Add the priced cost of one LLM call made for ``purpose``."""
        self.cost = (self.cost or 0.0) + cost
        self.cost_by_purpose[purpose] = self.cost_by_purpose.get(purpose, 0.0) + cost


class RunResult(BaseModel):
    """The outcome of :meth:`Orchestrator.run`.

    ``status`` is ``succeeded`` when every step succeeded, ``failed`` when planning failed
    or no step succeeded, ``partial`` otherwise; ``awaiting_approval`` when the run paused
    for ``pending_approvals``. ``error`` explains a run-level failure. ``budget_exceeded``
    says which budget stopped the run, if one did (the run is then never ``succeeded``).
    ``plan_source`` says where the plan came from (``cache``: no planning LLM call);
    ``answer_strategy`` how the answer was composed; ``workflow`` the saved workflow the
    run was made from, with its inputs and named outputs.
    """

    run_id: str
    query: str
    status: RunStatus
    answer: str | None = None
    plan: dict[str, Any] | None = None
    steps: dict[str, StepResult] = Field(default_factory=dict)
    usage: RunUsage = Field(default_factory=RunUsage)
    error: str | None = None
    warnings: list[str] = Field(default_factory=list)
    trace_id: str | None = None
    pending_approvals: list[PendingApproval] = Field(default_factory=list)
    budget_exceeded: BudgetExceeded | None = None
    context: dict[str, Any] | None = None
    """Who the run is for (``context=`` of the run; see :mod:`orchestration.context`)."""
    session: str | None = None
    session_run: int | None = None
    """The run's number in its session: later runs refer to its outputs as
    ``{{run:N.step.path}}``."""
    plan_source: PlanSource | None = None
    answer_strategy: SynthesisStrategy | None = None
    workflow: WorkflowInfo | None = None

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def raise_for_status(self) -> None:
        """Raise for the first failed step of ``steps`` (see
        :meth:`StepResult.raise_for_status`), or :class:`DagwrightError` with the run's error
        when it failed before any step ran (planning); do nothing when every step succeeded."""
        if self.status == "succeeded":
            return
        for step in self.steps.values():
            if step.status == "failed":
                step.raise_for_status()
        for step in self.steps.values():
            step.raise_for_status()
        raise DagwrightError(self.error or f"run {self.run_id} {self.status}")

    def outputs(self) -> dict[str, Any]:
        """Outputs of the succeeded steps, by step id."""
        return {k: s.output for k, s in self.steps.items() if s.status == "succeeded"}
