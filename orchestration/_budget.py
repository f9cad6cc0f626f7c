"""A run's budgets, checked where the spending happens.

Four budgets bound what one run may spend: LLM calls (``ORCH_MAX_LLM_CALLS_PER_RUN``),
LLM tokens (``ORCH_MAX_TOKENS_PER_RUN``), LLM cost (``ORCH_MAX_COST_PER_RUN``, priced
with ``ORCH_LLM_PRICES``) and, per capability, calls sent (``max_calls_per_run`` in the
catalog). What "ends the run" means, precisely:

* A budget is checked *before* spending: the LLM gateway asks before every LLM call,
  the send stage before every tool call. Tokens and cost are known only after a call,
  so the call that crosses those limits completes (its answer is used) and the next is
  refused: a run overshoots a token or cost budget by at most one call.
* The first refusal stops the run and is recorded as the run's
  :class:`~orchestration.result.BudgetExceeded` (which budget, limit, use, setting):
  from then on no LLM call and no tool call is made for this run, of any budget or
  capability. The refused attempt fails with category and code ``BUDGET_EXCEEDED``
  (nothing sent); steps in flight finish the attempt they are in and try no other;
  steps not started are skipped; no repair round, no answer synthesis.
* The run is then ``partial`` (some step succeeded) or ``failed``, never ``succeeded``,
  and ``RunResult.budget_exceeded`` / ``RunResult.error`` say why.

The counts live in the run's :class:`~orchestration.result.RunUsage` (data, stored with
the run), so a resumed run keeps the budget it has spent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orchestration.config import OrchestratorConfig
from orchestration.errors import ConfigError, LLMBudgetExceeded
from orchestration.protocol import ErrorCategory, ErrorSource, StepError
from orchestration.result import BudgetExceeded

if TYPE_CHECKING:
    from orchestration.catalog import Capability
    from orchestration.llm.base import LLMResponse
    from orchestration.state import RunState
    from orchestration.telemetry._observer import Observer


def check_prices(config: OrchestratorConfig, model: str | None) -> None:
    """A cost budget needs a price for the model the run will call: say so at start-up,
    not after the first call was made unpriced."""
    if config.max_cost_per_run is None or config.price_of(model) is not None:
        return
    known = ", ".join(sorted(config.llm_prices)) or "none"
    raise ConfigError(
        f"ORCH_MAX_COST_PER_RUN is set but ORCH_LLM_PRICES has no price for model "
        f"{model or '(unknown)'!r} (priced: {known}); add it, or a \"*\" entry for any model")


def _limit(own: Any, configured: Any, name: str, setting: str) -> tuple[Any, str]:
    """The limit a run works under and what its refusal names: the run's own, else the
    configured one."""
    if own is not None:
        return own, f"{name} of the run's limits"
    return configured, setting


class RunBudget:
    """The budgets of one run: asked before each LLM and tool call, told after each LLM
    call. Lives in the run's services; its counts live in the run's state.

    A run's own limits (``RunState.limits``: a tenant's, given with ``limits=``) replace
    the configured ones, each limit on its own; the refusal then names them."""

    def __init__(self, run: RunState, config: OrchestratorConfig, observer: Observer) -> None:
        self.run = run
        self.config = config
        self.observer = observer
        self.llm_calls_made = run.usage.llm_calls
        own = run.limits or None
        self.max_llm_calls, self._calls_setting = _limit(
            own and own.max_llm_calls_per_run, config.max_llm_calls_per_run,
            "max_llm_calls_per_run", "ORCH_MAX_LLM_CALLS_PER_RUN")
        self.max_tokens, self._tokens_setting = _limit(
            own and own.max_tokens_per_run, config.max_tokens_per_run,
            "max_tokens_per_run", "ORCH_MAX_TOKENS_PER_RUN")
        self.max_cost, self._cost_setting = _limit(
            own and own.max_cost_per_run, config.max_cost_per_run,
            "max_cost_per_run", "ORCH_MAX_COST_PER_RUN")

    @property
    def exceeded(self) -> BudgetExceeded | None:
        """The budget that stopped the run, or None while it runs within its budgets."""
        return self.run.budget_exceeded

    def stop_reason(self) -> str | None:
        """Why nothing new may start (for the scheduler), or None."""
        report = self.run.budget_exceeded
        return f"the run stopped: {report.describe()}" if report is not None else None

    @property
    def remaining_llm_calls(self) -> int:
        if self.run.budget_exceeded is not None:
            return 0
        return max(0, self.max_llm_calls - self.llm_calls_made)

    def _trip(self, report: BudgetExceeded) -> BudgetExceeded:
        """Record the first budget that stopped the run (later refusals cite it)."""
        if self.run.budget_exceeded is None:
            self.run.budget_exceeded = report
            self.observer.budget_exceeded(report)
        return self.run.budget_exceeded

    # --- LLM calls ----------------------------------------------------------------------
    def before_llm_call(self) -> None:
        """Count one LLM call, or raise :class:`LLMBudgetExceeded` when a budget refuses it."""
        usage = self.run.usage
        report = self.run.budget_exceeded
        if report is None:
            if self.llm_calls_made >= self.max_llm_calls:
                report = self._trip(BudgetExceeded(
                    budget="llm_calls", limit=self.max_llm_calls,
                    used=self.llm_calls_made, setting=self._calls_setting))
            elif self.max_tokens is not None and usage.tokens >= self.max_tokens:
                report = self._trip(BudgetExceeded(
                    budget="tokens", limit=self.max_tokens, used=usage.tokens,
                    setting=self._tokens_setting))
            elif self.max_cost is not None and (usage.cost or 0.0) >= self.max_cost:
                report = self._trip(BudgetExceeded(
                    budget="cost", limit=self.max_cost, used=round(usage.cost or 0, 6),
                    setting=self._cost_setting))
        if report is not None:
            reason = (None if report.budget == "llm_calls"
                      else f"no further LLM call: {report.describe()}")
            raise LLMBudgetExceeded(report.limit, budget=report.budget, setting=report.setting,
                                    reason=reason)
        self.llm_calls_made += 1

    def after_llm_call(self, purpose: str, response: LLMResponse, model: str | None) -> float | None:
        """Price an answered call (``None`` without a price) and add it to the run's cost."""
        price = self.config.price_of(response.model) or self.config.price_of(model)
        if price is None:
            return None
        usage = response.usage
        cost = price.cost(usage.input_tokens, usage.output_tokens)
        self.run.usage.record_cost(purpose, cost)
        self.observer.llm_cost(purpose, cost)
        return cost

    # --- tool calls ---------------------------------------------------------------------
    def admit_tool_call(self, capability: Capability) -> StepError | None:
        """Count one call of ``capability``, or the error of a call a budget refuses."""
        key = capability.key
        calls = self.run.usage.tool_calls
        used = calls.get(key, 0)
        report = self.run.budget_exceeded
        cap = capability.max_calls_per_run
        if report is None and cap is not None and used >= cap:
            report = self._trip(BudgetExceeded(
                budget="capability_calls", limit=cap, used=used, capability=key,
                setting=f"max_calls_per_run of {key} in the catalog"))
        if report is not None:
            return StepError(
                category=ErrorCategory.BUDGET_EXCEEDED, code="BUDGET_EXCEEDED",
                message=f"not sent: {report.describe()}", source=ErrorSource.ENGINE,
                retryable=False, request_sent=False,
                details={"budget": report.budget, "limit": report.limit, "used": report.used},
            )
        calls[key] = used + 1
        return None
