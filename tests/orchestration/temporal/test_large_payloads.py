"""Large data on Temporal: outputs that add up past Temporal's 2 MB payload limit, and a
single tool reply between 2 MB and ``ORCH_MAX_RESPONSE_BYTES``, give the same result as
on the local backend — the values travel by reference to the run store (claim-check,
:mod:`orchestration.temporal._payload_store`), and what stays in the history is small.

A real dev server on 127.0.0.1 and a worker in the test process (``temporal_worker``).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from orchestration import DagwrightError, Orchestrator, ScriptedLLM
from tests.orchestration.temporal.conftest import RunningWorker
from tests.support import temporal_runs
from tests.support.temporal_runs import answer, build_catalog, bulk_plan, comparable, engine_config

pytestmark = pytest.mark.temporal

TEMPORAL_PAYLOAD_LIMIT = 2 * 1024 * 1024

def client_of(worker: RunningWorker) -> Orchestrator:
    return Orchestrator(catalog=build_catalog(), llm=ScriptedLLM([]), config=worker.config,
                        registry=CollectorRegistry(), store=worker.store)

async def run_both(worker: RunningWorker, plan: dict[str, Any]) -> tuple[Any, Any, int]:
    """The plan locally and on Temporal (bounded in time); the largest payload in the
    Temporal history."""
    from orchestration.temporal import connect

    run_id = f"bulk-{uuid.uuid4().hex[:8]}"
    temporal_runs.reset()
    local = await Orchestrator(catalog=build_catalog(), llm=ScriptedLLM(answer),
                               config=engine_config(), registry=CollectorRegistry()
                               ).arun("collect the parts", plan=plan, run_id=run_id)
    local_calls = dict(temporal_runs.CALLS)
    temporal_runs.reset()
    remote = await asyncio.wait_for(
        client_of(worker).arun("collect the parts", plan=plan, run_id=run_id), 60)
    assert dict(temporal_runs.CALLS) == local_calls  # every step ran once on each backend
    history = await (await connect(worker.config)).get_workflow_handle(run_id).fetch_history()
    largest = max(len(e.SerializeToString()) for e in history.events)
    return local, remote, largest

async def test_outputs_adding_up_past_the_payload_limit_finish_as_locally(
    temporal_worker: RunningWorker,
) -> None:
    plan = bulk_plan(steps=12, kb=200)  # 2.4 MB of outputs: the run state alone is past 2 MB
    local, remote, largest = await run_both(temporal_worker, plan)
    assert local.status == remote.status == "succeeded"
    assert comparable(remote) == comparable(local)
    assert len(remote.steps["part11"].output["text"]) == 200 * 1024
    assert largest < 64 * 1024  # references, not values, in the history
    again = await client_of(temporal_worker).aget_run(remote.run_id)  # a query: by reference too
    assert again is not None and comparable(again) == comparable(local)

async def test_a_five_megabyte_reply_succeeds_as_locally(temporal_worker: RunningWorker) -> None:
    plan = bulk_plan(steps=1, kb=5 * 1024)
    local, remote, largest = await run_both(temporal_worker, plan)
    assert local.status == remote.status == "succeeded"
    assert len(remote.steps["part0"].output["text"]) == 5 * 1024 * 1024 > TEMPORAL_PAYLOAD_LIMIT
    assert comparable(remote) == comparable(local)
    assert largest < 64 * 1024

async def start_a_stuck_run(worker: RunningWorker) -> tuple[str, Orchestrator]:
    """A run no worker can build the engine of (every workflow task fails), and a client
    whose runs have a 2 s deadline."""
    from datetime import timedelta

    from orchestration.temporal import WORKFLOW, connect
    from orchestration.temporal._payloads import config_to_payload

    config = worker.config
    broken = config_to_payload(config)
    broken["run_timeout_s"] = -1  # no worker can build this run's engine: every task fails
    run_id = f"stuck-{uuid.uuid4().hex[:8]}"
    await (await connect(config)).start_workflow(
        WORKFLOW, {"query": "a run that cannot start", "plan": None, "config": broken},
        id=run_id, task_queue=config.temporal_task_queue, task_timeout=timedelta(seconds=1))
    orch = Orchestrator(catalog=build_catalog(), llm=ScriptedLLM([]), registry=CollectorRegistry(),
                        config=config.model_copy(update={"run_timeout_s": 2.0,
                                                         "temporal_workflow_task_timeout_s": 1.0}),
                        store=worker.store)
    return run_id, orch


async def test_a_run_whose_workflow_task_keeps_failing_ends_failed_by_its_deadline(
    temporal_worker: RunningWorker,
) -> None:
    """A workflow task that cannot make progress is retried by Temporal forever; a client
    following the run ends it ``failed`` once the run's deadline has passed, saying what
    the worker reported, and ``get_run`` answers (typed while nothing is recorded, then
    from the store)."""
    from orchestration import BackendUnavailable

    run_id, orch = await start_a_stuck_run(temporal_worker)
    await asyncio.sleep(1)

    with pytest.raises(BackendUnavailable, match=f"dagwright runs show {run_id}"):
        await orch.aget_run(run_id)
    started = asyncio.get_running_loop().time()
    events: list[Any] = []  # following with on_event: its queries wait on such a workflow
    result = await asyncio.wait_for(orch.aresume(run_id, on_event=events.append), 60)
    took = asyncio.get_running_loop().time() - started
    assert result.status == "failed" and result.error is not None
    assert result.error.startswith("WORKFLOW_STUCK") and "ORCH_RUN_TIMEOUT_S=2" in result.error
    # what the worker reported, not "see the logs"
    assert "run_timeout_s=-1 (argument of OrchestratorConfig) is not valid" in result.error
    assert result.query == "a run that cannot start"
    stored = await orch.aget_run(run_id)  # the workflow cannot be queried: the store answers
    assert stored is not None and stored.status == "failed" and stored.error == result.error
    again = await orch.aresume(run_id)
    assert again.status == "failed"
    assert took < 30


async def test_a_stuck_run_nobody_follows_is_ended_by_whoever_reads_it(
    temporal_worker: RunningWorker,
) -> None:
    """With no client following it, a stuck run past its deadline is ended by the next
    ``get_run`` (``dagwright runs show``); ``run`` with its id then returns that result at
    once, instead of a query that waits on the failing task."""
    from orchestration import BackendUnavailable

    run_id, orch = await start_a_stuck_run(temporal_worker)
    loop = asyncio.get_running_loop()
    started, typed, result = loop.time(), 0, None
    while result is None and loop.time() - started < 60:
        try:
            result = await orch.aget_run(run_id)
        except BackendUnavailable:  # not past its deadline yet: it cannot be queried
            typed += 1
            await asyncio.sleep(0.5)
    assert result is not None and result.status == "failed" and result.error is not None
    assert result.error.startswith("WORKFLOW_STUCK") and "run_timeout_s=-1" in result.error
    assert typed >= 1  # it was not ended before its deadline
    again_at = loop.time()
    again = await asyncio.wait_for(orch.arun("a run that cannot start", run_id=run_id), 10)
    assert again.status == "failed" and again.error == result.error
    assert loop.time() - again_at < 5
    with pytest.raises(DagwrightError, match="already exists for another query"):
        await orch.arun("another query", run_id=run_id)
