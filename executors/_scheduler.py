"""Ready-set DAG scheduling on asyncio.

A step starts the moment all of its own dependencies have succeeded — not level by
level — subject to a concurrency bound. When a step fails, everything downstream of it
is skipped with the reason, while independent branches run to completion. Cancelling
the caller cancels every in-flight step.

Steps may already be running when the scheduler is called (``started``: steps a streamed
plan started before it was whole, see :mod:`executors._early`); they are awaited like the
scheduler's own tasks and count against the concurrency bound.
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
    graph = plan.graph
    waiting = {node: graph.in_degree(node) for node in plan.order}
    results: dict[str, StepResult] = {n: done[n] for n in plan.order if done and n in done}
    for node, result in list(results.items()):
        if result.status == "succeeded":
            for successor in graph.successors(node):
                waiting[successor] -= 1
        elif result.status != "awaiting_approval":
            _skip_downstream(plan, node, results, skip_step, result.status)
    # a pool of at most max_concurrency workers, each taking the next ready step as soon
    # as its own step ends: no task per step and no hand-off through a scheduler task, so
    # a worker whose call just returned sends the next one in the same loop turn (what a
    # bare client's worker loop does; a task per step cost ~250 µs per HTTP call at
    # concurrency 8). Steps a streamed plan started early keep their own tasks and take
    # a worker's place until they end.
    loop = asyncio.get_running_loop()
    ready: deque[str] = deque(node for node in plan.order
                              if waiting[node] == 0 and node not in results
                              and node not in (started or {}))
    idle: deque[asyncio.Future[None]] = deque()  # workers waiting for a ready step
    finished: asyncio.Future[None] = loop.create_future()
    workers: list[asyncio.Task[None]] = []
    early = {sid: task for sid, task in (started or {}).items() if sid not in results}
    busy = 0  # steps running now (worker-run and early)

    def wake_or_spawn() -> None:
        """A step was made ready: wake an idle worker for it, or start one while the
        pool is below the bound (workers are started on demand, so a plan with little
        parallelism has few of them whatever max_concurrency says)."""
        while idle:
            waiter = idle.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        if len(workers) + len(early) < max_concurrency:
            pool_task = loop.create_task(worker(), name=f"dagwright-worker-{len(workers)}")
            pool_task.add_done_callback(worker_ended)
            workers.append(pool_task)

    def settle(step_id: str, result: StepResult) -> None:
        """Record a finished step and make ready what it unblocks."""
        results[step_id] = result
        if result.status == "succeeded":
            for successor in graph.successors(step_id):
                waiting[successor] -= 1
                if waiting[successor] == 0 and successor not in results:
                    ready.append(successor)
                    wake_or_spawn()
        elif result.status != "awaiting_approval":
            # a paused step's descendants simply wait (no result): they run once a
            # person approves it, or are skipped when it is rejected
            _skip_downstream(plan, step_id, results, skip_step, result.status)

    def check_finished() -> None:
        if not ready and busy == 0 and not finished.done():
            finished.set_result(None)
            for waiter in idle:
                if not waiter.done():
                    waiter.set_result(None)

    async def worker() -> None:
        nonlocal busy
        while True:
            if not ready:
                if finished.done():
                    return
                waiter = loop.create_future()
                idle.append(waiter)
                await waiter
                continue
            step_id = ready.popleft()
            if deadline is not None and loop.time() >= deadline:
                results[step_id] = skip_step(step_id, "the run deadline passed before it started")
                _skip_downstream(plan, step_id, results, skip_step, "did not run")
                check_finished()
                continue
            reason = stopped() if stopped is not None else None
            if reason is not None:
                results[step_id] = skip_step(step_id, f"{reason} before it started")
                _skip_downstream(plan, step_id, results, skip_step, "did not run")
                check_finished()
                continue
            busy += 1
            try:
                result = await run_step(step_id)
            finally:
                busy -= 1
            settle(step_id, result)
            check_finished()

    def worker_ended(task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None and not finished.done():
            finished.set_exception(task.exception())  # type: ignore[arg-type]

    def early_ended(step_id: str, task: asyncio.Task[StepResult]) -> None:
        nonlocal busy
        busy -= 1
        del early[step_id]
        if task.cancelled():  # not by this scheduler: the run is being torn down
            if not finished.done():
                finished.cancel()
            return
        if task.exception() is not None:
            if not finished.done():
                finished.set_exception(task.exception())  # type: ignore[arg-type]
            return
        settle(step_id, task.result())
        for _ in range(len(ready)):  # its place may go to a worker
            wake_or_spawn()
        check_finished()

    for step_id, early_task in early.items():
        busy += 1
        early_task.add_done_callback(partial(early_ended, step_id))
    try:
        for _ in range(len(ready)):
            wake_or_spawn()
        check_finished()
        await finished
    finally:
        pending = [t for t in [*workers, *early.values()] if not t.done()]
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
    return {node: results[node] for node in plan.order if node in results}


def _skip_downstream(
    plan: ValidatedPlan,
    step_id: str,
    results: dict[str, StepResult],
    skip_step: SkipStep,
    status: str,
) -> None:
    why = _UPSTREAM.get(status, status)
    # in plan order, not set order: a set of strings iterates in an order that changes
    # from process to process, and a replayed workflow must skip (and number the events
    # of) the same steps in the same order
    for node in sorted(plan.descendants(step_id), key=plan.position.__getitem__):
        if node not in results:
            results[node] = skip_step(node, f"upstream step {step_id!r} {why}")


_UPSTREAM = {"unknown": "has an unknown outcome (OUTCOME_UNKNOWN): it may have run, so "
                        "nothing that depends on it is sent"}
