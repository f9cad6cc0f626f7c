"""Ready-set DAG scheduling on asyncio.

A step starts the moment all of its own dependencies have succeeded — not level by
level — subject to a concurrency bound. When a step fails, everything downstream of it
is skipped with the reason, while independent branches run to completion. Cancelling
the caller cancels every in-flight step.

Steps run on a pool of at most ``max_concurrency`` worker tasks, not a task each: a
worker whose step ended settles it (its successors become ready) and takes the next
ready step in the same loop turn, as a bare client's worker loop does. A task per step,
handed off through a scheduler task, cost ~250 µs per HTTP call at concurrency 8
(``benchmarks/http_calls.py``). Workers start on demand — a ready step that finds no
idle worker starts one while the pool is below the bound — so a wide bound costs
nothing on a narrow plan.

Steps may already be running when the scheduler is called (``started``: steps a streamed
plan started before it was whole, see :mod:`executors._early`); they keep their own
tasks, are awaited like the workers' steps and hold a worker's place until they end.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Coroutine
from functools import partial
from typing import Any

from orchestration.plan import ValidatedPlan
from orchestration.result import StepResult

RunStep = Callable[[str], Coroutine[Any, Any, StepResult]]
SkipStep = Callable[[str, str], StepResult]


async def run_dag(
    plan: ValidatedPlan,
    run_step: RunStep,
    skip_step: SkipStep,
    *,
    max_concurrency: int,
    deadline: float | None = None,
    done: dict[str, StepResult] | None = None,
    stopped: Callable[[], str | None] | None = None,
    started: dict[str, asyncio.Task[StepResult]] | None = None,
) -> dict[str, StepResult]:
    """Run every step of ``plan``; returns a result for each, in topological order.

    ``run_step`` must not raise (it turns failures into failed results). Steps that could
    not start — an upstream failure, the run ``deadline`` (event-loop time) passed, or
    ``stopped()`` giving a reason (a spent budget) — get ``skip_step(step_id, reason)``.
    Steps in ``done`` (a resumed run) are not run: they count as finished with the
    result given. Steps in ``started`` are running already: their tasks (which must not
    raise either) are awaited, and cancelled with the scheduler's own when it is.
    """
    dag = _DagRun(plan, run_step, skip_step, max_concurrency=max_concurrency,
                  deadline=deadline, stopped=stopped)
    return await dag.run(done or {}, started or {})


class _DagRun:
    """One execution of a plan's DAG: the ready queue, the worker pool, the results."""

    def __init__(
        self, plan: ValidatedPlan, run_step: RunStep, skip_step: SkipStep, *,
        max_concurrency: int, deadline: float | None,
        stopped: Callable[[], str | None] | None,
    ) -> None:
        self.plan = plan
        self.run_step = run_step
        self.skip_step = skip_step
        self.max_concurrency = max_concurrency
        self.deadline = deadline
        self.stopped = stopped
        self.loop = asyncio.get_running_loop()
        upstream = plan.upstream
        self.waiting = {node: len(upstream[node]) for node in plan.order}
        self.results: dict[str, StepResult] = {}
        self.ready: deque[str] = deque()
        self.idle: deque[asyncio.Future[None]] = deque()  # workers waiting for a step
        self.workers: list[asyncio.Task[None]] = []
        self.early: dict[str, asyncio.Task[StepResult]] = {}
        self.busy = 0  # steps running now (on workers, and early ones)
        self.finished: asyncio.Future[None] = self.loop.create_future()

    async def run(self, done: dict[str, StepResult],
                  started: dict[str, asyncio.Task[StepResult]]) -> dict[str, StepResult]:
        self._take_done(done)
        self.early = {sid: task for sid, task in started.items() if sid not in self.results}
        self.ready.extend(node for node in self.plan.order
                          if self.waiting[node] == 0 and node not in self.results
                          and node not in self.early)
        for step_id, early_task in self.early.items():
            self.busy += 1
            early_task.add_done_callback(partial(self._early_ended, step_id))
        try:
            self._serve_ready()
            self._check_finished()
            await self.finished
        finally:
            pending: list[asyncio.Task[Any]] = [
                t for t in [*self.workers, *self.early.values()] if not t.done()]
            if self.finished.done() and not self.finished.cancelled() \
                    and self.finished.exception() is None:
                # every step ended: the idle workers were woken and leave on their own.
                # (Cancelling them would leave a CancelledError whose traceback holds
                # this object, and with it the run, until a full garbage collection.)
                await asyncio.gather(*pending)
            else:
                for task in pending:
                    task.cancel()
                if pending:
                    await asyncio.gather(*pending, return_exceptions=True)
        return {node: self.results[node] for node in self.plan.order if node in self.results}

    def _take_done(self, done: dict[str, StepResult]) -> None:
        """Steps a resumed run finished before: their results stand, nothing re-runs."""
        for node in self.plan.order:
            if node in done:
                self.results[node] = done[node]
        for node, result in list(self.results.items()):
            if result.status == "succeeded":
                for successor in self.plan.downstream[node]:
                    self.waiting[successor] -= 1
            elif result.status != "awaiting_approval":
                self._skip_downstream(node, result.status)

    # --- the workers --------------------------------------------------------------------
    async def _worker(self) -> None:
        while True:
            if not self.ready:
                if self.finished.done():
                    return
                waiter = self.loop.create_future()
                self.idle.append(waiter)
                await waiter
                continue
            step_id = self.ready.popleft()
            if not self._may_start(step_id):
                self._check_finished()
                continue
            self.busy += 1
            try:
                result = await self.run_step(step_id)
            finally:
                self.busy -= 1
            # this worker takes the first step its own made ready: others are woken (or
            # started) only for the rest
            for _ in range(self._settle(step_id, result) - 1):
                self._wake_or_spawn()
            self._check_finished()

    def _may_start(self, step_id: str) -> bool:
        """Whether the step may start now; if not, it and its descendants are skipped."""
        if self.deadline is not None and self.loop.time() >= self.deadline:
            reason = "the run deadline passed before it started"
        else:
            stop = self.stopped() if self.stopped is not None else None
            if stop is None:
                return True
            reason = f"{stop} before it started"
        self.results[step_id] = self.skip_step(step_id, reason)
        self._skip_downstream(step_id, "did not run")
        return False

    def _settle(self, step_id: str, result: StepResult) -> int:
        """Record a finished step and make ready what it unblocks; returns how many steps
        it made ready (the caller finds them workers)."""
        self.results[step_id] = result
        unblocked = 0
        if result.status == "succeeded":
            for successor in self.plan.downstream[step_id]:
                self.waiting[successor] -= 1
                if self.waiting[successor] == 0 and successor not in self.results:
                    self.ready.append(successor)
                    unblocked += 1
        elif result.status != "awaiting_approval":
            # a paused step's descendants simply wait (no result): they run once a
            # person approves it, or are skipped when it is rejected
            self._skip_downstream(step_id, result.status)
        return unblocked

    def _serve_ready(self) -> None:
        """A worker for each ready step, as far as the bound allows."""
        for _ in range(len(self.ready)):
            self._wake_or_spawn()

    def _wake_or_spawn(self) -> None:
        """A step was made ready: wake an idle worker for it, or start one while the pool
        (with the early steps) is below the bound."""
        while self.idle:
            waiter = self.idle.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        if len(self.workers) + len(self.early) < self.max_concurrency:
            task = self.loop.create_task(self._worker(),
                                         name=f"dagwright-worker-{len(self.workers)}")
            task.add_done_callback(self._worker_ended)
            self.workers.append(task)

    def _check_finished(self) -> None:
        """Nothing ready and nothing running: the DAG is done; idle workers leave."""
        if self.ready or self.busy or self.finished.done():
            return
        self.finished.set_result(None)
        for waiter in self.idle:
            if not waiter.done():
                waiter.set_result(None)

    def _worker_ended(self, task: asyncio.Task[None]) -> None:
        # run_step must not raise: if it did (a bug), the run fails with it
        if not task.cancelled() and task.exception() is not None and not self.finished.done():
            self.finished.set_exception(task.exception())  # type: ignore[arg-type]

    def _early_ended(self, step_id: str, task: asyncio.Task[StepResult]) -> None:
        self.busy -= 1
        del self.early[step_id]
        if self.finished.done():
            return
        if task.cancelled():  # not by this scheduler: the run is being torn down
            self.finished.cancel()
            return
        if task.exception() is not None:
            self.finished.set_exception(task.exception())  # type: ignore[arg-type]
            return
        self._settle(step_id, task.result())
        self._serve_ready()  # its place may go to a worker
        self._check_finished()

    def _skip_downstream(self, step_id: str, status: str) -> None:
        why = _UPSTREAM.get(status, status)
        # in plan order, not set order: a set of strings iterates in an order that changes
        # from process to process, and a replayed workflow must skip (and number the
        # events of) the same steps in the same order
        plan = self.plan
        for node in sorted(plan.descendants(step_id), key=plan.position.__getitem__):
            if node not in self.results:
                self.results[node] = self.skip_step(node, f"upstream step {step_id!r} {why}")


_UPSTREAM = {"unknown": "has an unknown outcome (OUTCOME_UNKNOWN): it may have run, so "
                        "nothing that depends on it is sent"}
