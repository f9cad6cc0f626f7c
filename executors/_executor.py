"""The executor: runs a validated plan with a step runner per run and the ready-set scheduler."""

from __future__ import annotations

from executors._prepare import CapabilityCache
from executors._scheduler import run_dag
from executors._step_runner import StepRunner
from executors.recovery import RecoveryHandler
from orchestration.context import RunContext
from orchestration.plan import ValidatedPlan
from orchestration.protocol import ErrorCategory, StepError
from orchestration.result import StepResult


class Executor:
    """Executes plans. Holds what outlives a run: prepared capabilities and the handlers.

    ``handlers`` is the recovery chain consulted after a failed attempt (see
    :mod:`executors.recovery`); :func:`executors.layers.default_handlers` builds the
    standard one from the configuration.
    """

    def __init__(self, handlers: list[RecoveryHandler] | None = None) -> None:
        self.capabilities = CapabilityCache()
        self.handlers: list[RecoveryHandler] = list(handlers or [])

    async def execute(self, plan: ValidatedPlan, ctx: RunContext) -> dict[str, StepResult]:
        runner = StepRunner(ctx, plan, self.capabilities, self.handlers)

        async def run_step(step_id: str) -> StepResult:
            try:
                return await runner.run(step_id)
            except Exception as exc:  # a bug must fail the step, never the run
                step = plan.steps[step_id]
                return StepResult(
                    id=step_id, tool=step.tool, capability=step.capability, status="failed",
                    error=StepError(
                        category=ErrorCategory.INTERNAL_ERROR, code="EXECUTOR_ERROR",
                        message=f"{type(exc).__name__}: {exc}", step_id=step_id,
                        tool=step.tool, capability=step.capability,
                    ),
                )

        def skip_step(step_id: str, reason: str) -> StepResult:
            step = plan.steps[step_id]
            ctx.telemetry.metrics.steps.labels(step.tool, step.capability, "skipped").inc()
            return StepResult(
                id=step_id, tool=step.tool, capability=step.capability, status="skipped",
                skipped_reason=reason,
            )

        return await run_dag(
            plan, run_step, skip_step,
            max_concurrency=ctx.config.max_concurrency, deadline=ctx.run_deadline,
        )
