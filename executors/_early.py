"""Starting the steps of a plan while the planner is still writing it.

With a streaming LLM client (``ORCH_STREAM_PLAN``), the planner hands each step over the
moment it is complete and valid on its own, every step after the steps it depends on
(:mod:`planners._plan_stream`). :class:`EarlySteps` decides which of them may start
before the whole plan has been validated, starts them as their dependencies succeed,
and — once the plan is whole — hands them to the scheduler, or throws them away if the
plan is not accepted.

**Which steps start early.** A step whose capability

* is idempotent (the engine's word for "may be sent again": what lets the re-send guard
  and a resume repeat a call),
* needs no approval, and
* is not an HTTP ``PUT`` or ``DELETE`` (idempotent, yet they change the tool's state,
  which a plan that is then rejected must not have done),

and whose dependencies all started early and succeeded. Every call with a side effect
waits for the validated plan, so nothing a rejected plan asked for can have changed
anything; the price of a rejected plan is the idempotent calls made for it.

**What a started step does** is what it would do in the plan: the same step runner
(layers, retries, deadline), given the early steps as one plan that grows as they
arrive. The part of it a step depends on is complete and final once the step is ready:
a step's edges are written in the step itself, and its ancestors were ready before it.

**Recording.** Results go into the run as they finish (later steps bind to their
outputs) and ``step_finished`` is emitted, but nothing reaches the run store before the
plan: the engine saves the plan, then :meth:`EarlySteps.handover` writes the results. A
process that stops while the plan streams leaves a run with neither plan nor steps,
which a resume plans again (the idempotent calls are repeated, harmlessly).

**Throwing away** (:meth:`EarlySteps.discard`): when the planner rejects the answer, the
stream fails, a step shows that the answer cannot be accepted, or planning fails, times
out or is cancelled. Steps in flight are cancelled and awaited, every result of the
attempt leaves the run, the run keeps a warning and a ``plan_discarded`` event (reason,
step ids) tells readers that the events of those steps no longer stand.

**Handing over** (:meth:`EarlySteps.handover`): every step that started must be in the
validated plan, identical; otherwise everything is thrown away and the plan runs as if
nothing had started. Finished results count as done for the scheduler, running tasks
are awaited by it.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections import deque
from typing import TYPE_CHECKING

from executors._executor import failed_by_bug
from executors._step_runner import StepRunner
from orchestration.capability import Capability
from orchestration.plan import Step, ValidatedPlan, same_step
from orchestration.result import StepResult
from orchestration.services import RunServices
from orchestration.state import RunState

if TYPE_CHECKING:
    from executors._executor import Executor

__all__ = ["EarlySteps", "may_start_early"]

_STATE_CHANGING_METHODS = frozenset({"PUT", "DELETE"})


def may_start_early(capability: Capability) -> bool:
    """Whether a call of ``capability`` may be made before its plan is validated (see the
    module docstring)."""
    return (capability.is_idempotent and not capability.requires_approval
            and capability.method not in _STATE_CHANGING_METHODS)


class EarlySteps:
    """The steps of one run started while its plan streams (a ``StepListener``)."""

    def __init__(self, executor: Executor, run: RunState, services: RunServices) -> None:
        self.executor = executor
        self.run = run
        self.services = services
        # the run's context, not the planner's: the step spans are children of the run
        # span, as the scheduler's are, not of the plan span they happen to start under
        self._context = contextvars.copy_context()
        self._steps: dict[str, Step] = {}
        self._early: set[str] = set()  # steps that may start early
        # the early steps as one plan, grown as they arrive: what their runners share
        # (made with the first early step: a plan that arrives whole never needs one)
        self._plan: ValidatedPlan | None = None
        self._runner: StepRunner | None = None  # the early steps' runner, shared as the plan
        self._blocked: dict[str, set[str]] = {}  # dependencies not yet succeeded
        self._dependents: dict[str, list[str]] = {}
        self._ready: deque[str] = deque()
        self._tasks: dict[str, asyncio.Task[StepResult]] = {}
        self._running = 0  # tasks whose step has not ended (counted, not searched for)
        self._began: list[str] = []  # steps whose runner started (step_started emitted)
        self._results: dict[str, StepResult] = {}
        self._unsaved: list[str] = []
        self._handed_over = False
        self.started_total = 0
        """Steps started early over every attempt (those thrown away included)."""

    # --- the StepListener side (the planner) --------------------------------------------
    def step_ready(self, step: Step, dependencies: set[str]) -> None:
        """A step of the plan is complete and valid on its own: start it when it may."""
        if self._handed_over:
            return
        self._steps[step.id] = step
        capability = self.services.catalog.get(step.tool, step.capability)
        if (not may_start_early(capability) or step.requires_approval
                or not dependencies <= self._early):
            return
        if any(d in self._results and self._results[d].status != "succeeded"
               for d in dependencies):
            return  # it will be skipped; the scheduler says why
        self._early.add(step.id)
        if self._plan is None:
            self._plan = ValidatedPlan.growing()
        self._plan.add_step(step, sorted(dependencies))
        waiting = {d for d in dependencies if d not in self._results}
        self._blocked[step.id] = waiting
        for dependency in waiting:
            self._dependents.setdefault(dependency, []).append(step.id)
        if not waiting:
            self._ready.append(step.id)
            self._pump()

    async def discard(self, reason: str) -> None:
        """Throw away what was started for the current answer (see the module docstring)."""
        if self._handed_over:
            return
        tasks = list(self._tasks.values())
        began = list(self._began)
        for task in tasks:
            task.cancel()
        try:
            if tasks:
                await asyncio.wait(tasks)
        finally:
            self.run.discard_steps(self._tasks)
            self._reset()
            if began:
                self.run.warn(f"{reason}; the step(s) started while the plan streamed "
                              f"({', '.join(began)}) were stopped and their results dropped")
                self.services.events.emit("plan_discarded", reason=reason, steps=began)

    # --- the executor side ----------------------------------------------------------------
    async def handover(self, plan: ValidatedPlan) -> dict[str, asyncio.Task[StepResult]]:
        """The plan is whole and validated: write what finished to the store (the plan is
        recorded by now) and return the tasks still running, for the scheduler to await.
        Steps that started but are not in ``plan`` as they started are thrown away first,
        with everything else started (the plan then runs as if nothing had)."""
        if self._handed_over:
            return {}
        differ = [sid for sid in self._tasks if not same_step(plan.steps.get(sid), self._steps[sid])]
        if differ:
            await self.discard(f"the validated plan does not have the step(s) "
                               f"{', '.join(differ)} as they streamed")
        self._handed_over = True
        for step_id in self._unsaved:
            result = self.run.steps.get(step_id)
            if result is not None:
                self.services.recorder.save_step(result)
        self._unsaved.clear()
        return {sid: task for sid, task in self._tasks.items() if not task.done()}

    # --- running ----------------------------------------------------------------------------
    def _pump(self) -> None:
        """Start ready steps while the concurrency bound allows; none once the deadline
        passed or a budget stopped the run (the scheduler skips them, saying why)."""
        services = self.services
        loop = asyncio.get_running_loop()
        while self._ready and self._running < services.config.max_concurrency:
            if loop.time() >= services.deadline or services.budget.stop_reason() is not None:
                self._ready.clear()
                return
            step_id = self._ready.popleft()
            runner = self._runner
            assert self._plan is not None  # a step is ready: it was added to the plan
            if runner is None or runner.plan is not self._plan:  # one per (growing) plan
                runner = self._runner = StepRunner(self._plan, self.run, services,
                                                   self.executor.capabilities,
                                                   self.executor.handlers)
            self._tasks[step_id] = loop.create_task(
                self._run(step_id, runner), name=f"dagwright-early-step-{step_id}",
                context=self._context.copy())
            self.started_total += 1
            self._running += 1

    async def _run(self, step_id: str, runner: StepRunner) -> StepResult:
        """One early step to its end, recorded; a failure is a failed result."""
        self._began.append(step_id)
        try:
            result = await runner.run_step(step_id)
        except asyncio.CancelledError:
            reason = self.services.cancellation.reason
            if reason is not None:  # the run is cancelled on purpose: say what stopped
                self._record(runner.cancelled(step_id, reason))
            raise
        except Exception as exc:
            result = failed_by_bug(self._steps[step_id], exc)
        finally:
            self._running -= 1
        self._record(result)
        self._settled(step_id, result)
        return result

    def _record(self, result: StepResult) -> None:
        self.run.record_step(result)
        if self._handed_over:
            self.services.recorder.save_step(result)
        else:
            self._unsaved.append(result.id)  # written once the plan is recorded
        self.services.events.emit("step_finished", step_id=result.id, status=result.status,
                                  attempts=len(result.attempts), duration_s=result.duration_s)

    def _settled(self, step_id: str, result: StepResult) -> None:
        """A step finished: start what waited for it (until the scheduler takes over)."""
        self._results[step_id] = result
        if self._handed_over:
            return
        for dependent in self._dependents.pop(step_id, []):
            blocked = self._blocked[dependent]
            if result.status != "succeeded":
                self._early.discard(dependent)  # it will be skipped, not started
                continue
            blocked.discard(step_id)
            if not blocked and dependent in self._early:
                self._ready.append(dependent)
        self._pump()

    def _reset(self) -> None:
        self._steps.clear()
        self._early.clear()
        self._plan = None
        self._blocked.clear()
        self._dependents.clear()
        self._ready.clear()
        self._tasks.clear()
        self._running = 0
        self._began.clear()
        self._results.clear()
        self._unsaved.clear()
