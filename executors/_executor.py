"""The executor: runs a validated plan with a step runner per run and the ready-set scheduler."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from executors._prepare import CapabilityCache
from executors._scheduler import run_dag
from executors._step_runner import ResumePoint, StepRunner
from executors.recovery import RecoveryHandler
from orchestration.plan import Step, ValidatedPlan
from orchestration.protocol import ErrorCategory, ErrorSource, StepError
from orchestration.result import StepResult
from orchestration.services import RunServices
from orchestration.state import RunState

if TYPE_CHECKING:
    from executors._early import EarlySteps


def failed_by_bug(step: Step, exc: Exception) -> StepResult:
    """The result of a step whose code raised: a bug must fail the step, never the run."""
    return StepResult(
        id=step.id, tool=step.tool, capability=step.capability, status="failed",
        error=StepError(
            category=ErrorCategory.INTERNAL_ERROR, code="EXECUTOR_ERROR",
            message=f"{type(exc).__name__}: {exc}", source=ErrorSource.ENGINE,
            step_id=step.id, tool=step.tool, capability=step.capability,
        ),
    )


class Executor:
    """Executes plans. Holds what outlives a run: prepared capabilities and the handlers.

    ``handlers`` is the recovery chain consulted after a failed attempt (see
    :mod:`executors.recovery`); :func:`executors.layers.default_handlers` builds the
    standard one.
    """

    def __init__(self, handlers: list[RecoveryHandler] | None = None) -> None:
        self.capabilities = CapabilityCache()
        self.handlers: list[RecoveryHandler] = list(handlers or [])

    async def execute(
        self, plan: ValidatedPlan, run: RunState, services: RunServices,
        *, resume: ResumePoint | None = None, early: EarlySteps | None = None,
    ) -> dict[str, StepResult]:
        """Run every step of ``plan`` that ``run`` has not finished yet; each result is
        recorded in ``run`` (and its store) as it finishes.

        Steps ``run`` already holds (a resumed run, or steps ``early`` finished while the
        plan streamed) are not run again: their results count as done, so their
        successors start and their failures skip descendants. Steps ``early`` still runs
        are awaited, not started again. Returns this plan's results in plan order.
        """
        started = await early.handover(plan) if early is not None else {}
        execution = _Execution(plan, run, services,
                               StepRunner(plan, run, services, self.capabilities,
                                          self.handlers, resume))
        done = {sid: run.steps[sid] for sid in plan.order if sid in run.steps}
        results = await run_dag(plan, execution.run_step, execution.skip_step, done=done,
                                max_concurrency=services.config.max_concurrency,
                                deadline=services.deadline,
                                stopped=services.budget.stop_reason, started=started)
        run.arrange(list(results))
        return results


class _Execution:
    """What the scheduler calls back for one execution of a plan: run a step, skip one.

    One small object rather than closures over the execution's variables: those were
    three functions and a cell per variable, alive for the whole run, which the garbage
    collector walked at every full collection while a batch of runs was in flight."""

    __slots__ = ("plan", "run", "runner", "services")

    def __init__(self, plan: ValidatedPlan, run: RunState, services: RunServices,
                 runner: StepRunner) -> None:
        self.plan = plan
        self.run = run
        self.services = services
        self.runner = runner

    def record(self, result: StepResult, **extra: str) -> None:
        self.run.record_step(result)
        services = self.services
        services.recorder.save_step(result)
        services.events.emit("step_finished", step_id=result.id, status=result.status,
                             attempts=len(result.attempts), duration_s=result.duration_s,
                             **extra)

    async def run_step(self, step_id: str) -> StepResult:
        try:
            result = await self.runner.run_step(step_id)
        except asyncio.CancelledError:
            reason = self.services.cancellation.reason
            if reason is not None:
                # cancelled on purpose: the step's history is kept. On a shutdown
                # nothing is recorded, so that a resume runs the step again.
                self.record(self.runner.cancelled(step_id, reason))
            raise
        except Exception as exc:  # a bug must fail the step, never the run
            result = failed_by_bug(self.plan.steps[step_id], exc)
        self.record(result)
        return result

    def skip_step(self, step_id: str, reason: str) -> StepResult:
        step = self.plan.steps[step_id]
        self.services.observer.step_skipped(step)
        result = StepResult(id=step_id, tool=step.tool, capability=step.capability,
                            status="skipped", skipped_reason=reason)
        self.record(result, reason=reason)
        return result
