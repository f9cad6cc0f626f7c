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
    done_queue: asyncio.Queue[tuple[str, asyncio.Task[StepResult]]] = asyncio.Queue()
    running: dict[str, asyncio.Task[StepResult]] = {}
    loop = asyncio.get_running_loop()

    def watch(step_id: str, task: asyncio.Task[StepResult]) -> None:
        running[step_id] = task

        def on_done(finished: asyncio.Task[StepResult], sid: str = step_id) -> None:
            done_queue.put_nowait((sid, finished))

        task.add_done_callback(on_done)

    def launch(step_id: str) -> None:
        watch(step_id, loop.create_task(run_step(step_id), name=f"dagwright-step-{step_id}"))

    for step_id, task in (started or {}).items():
        if step_id not in results:
            watch(step_id, task)
    ready: deque[str] = deque(node for node in plan.order
                              if waiting[node] == 0 and node not in results
                              and node not in running)

    try:
        while ready or running:
            while ready and len(running) < max_concurrency:
                step_id = ready.popleft()
                if deadline is not None and loop.time() >= deadline:
                    results[step_id] = skip_step(step_id, "the run deadline passed before it started")
                    _skip_downstream(plan, step_id, results, skip_step, "did not run")
                    continue
                reason = stopped() if stopped is not None else None
                if reason is not None:
                    results[step_id] = skip_step(step_id, f"{reason} before it started")
                    _skip_downstream(plan, step_id, results, skip_step, "did not run")
                    continue
                launch(step_id)
            if not running:
                continue
            step_id, task = await done_queue.get()
            del running[step_id]
            result = task.result()
            results[step_id] = result
            if result.status == "succeeded":
                for successor in graph.successors(step_id):
                    waiting[successor] -= 1
                    if waiting[successor] == 0 and successor not in results:
                        ready.append(successor)
            elif result.status != "awaiting_approval":
                # a paused step's descendants simply wait (no result): they run once a
                # person approves it, or are skipped when it is rejected
                _skip_downstream(plan, step_id, results, skip_step, result.status)
    finally:
        for task in running.values():
            task.cancel()
        if running:
            await asyncio.gather(*running.values(), return_exceptions=True)
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
