"""The Temporal backend through the public API: run ids are workflow ids, approvals are
updates, events are queries, runs are recorded in the store, and the workflow is
deterministic (replayed histories issue the same commands; no wall clock, uuid or global
randomness is read inside it).

Every test runs against a real Temporal dev server on 127.0.0.1 with a dagwright worker in
the test process (``temporal_worker``).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from orchestration import (
    Approval,
    ApprovalError,
    DagwrightError,
    Orchestrator,
    OrchestratorConfig,
    RunEvent,
    RunLeased,
    RunNotFound,
    ScriptedLLM,
)
from tests import ROOT
from tests.orchestration.temporal.conftest import RunningWorker
from tests.support import temporal_runs
from tests.support.temporal_runs import PLANS, answer, build_catalog, comparable, engine_config

pytestmark = pytest.mark.temporal

APPROVAL_PLAN: dict[str, Any] = {"steps": [
    {"id": "where", "tool": "geo", "capability": "locate", "params": {"city": "Oslo"}},
    {"id": "send", "tool": "bank", "capability": "transfer",
     "params": {"amount": "250", "to": "ACME"}, "depends_on": ["where"]},
    {"id": "file", "tool": "bank", "capability": "receipt", "params": {"paid": "{{send.sent}}"}},
]}


def client_of(worker: RunningWorker, **overrides: Any) -> Orchestrator:
    config = worker.config.model_copy(update=overrides) if overrides else worker.config
    return Orchestrator(catalog=build_catalog(), llm=ScriptedLLM([]), config=config,
                        registry=CollectorRegistry(), store=worker.store)


def local_orchestrator(**overrides: Any) -> Orchestrator:
    return Orchestrator(catalog=build_catalog(), llm=ScriptedLLM(answer),
                        config=engine_config(**overrides), registry=CollectorRegistry())


async def history(worker: RunningWorker, run_id: str) -> Any:
    from orchestration.temporal import connect

    return await (await connect(worker.config)).get_workflow_handle(run_id).fetch_history()


# --- a run is a workflow -----------------------------------------------------------------------

async def test_a_run_is_a_workflow_whose_id_is_the_run_id_and_each_attempt_an_activity(
    temporal_worker: RunningWorker,
) -> None:
    from temporalio.api.enums.v1 import EventType

    orch = client_of(temporal_worker)
    run_id = f"fan-{uuid.uuid4().hex[:8]}"
    result = await orch.arun(PLANS["fan"][0], plan=PLANS["fan"][1], run_id=run_id)
    assert result.run_id == run_id and result.status == "partial"

    events = (await history(temporal_worker, run_id)).events
    started = next(e for e in events
                   if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED)
    assert started.workflow_execution_started_event_attributes.workflow_type.name == "dagwright.run"
    activities = [e.activity_task_scheduled_event_attributes.activity_type.name for e in events
                  if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]
    attempts = sum(len(s.attempts) for s in result.steps.values())
    assert activities.count("dagwright.call_tool") == attempts == 5  # a, b twice, c, d
    assert activities.count("dagwright.llm_complete") == 1  # the synthesis
    assert activities.count("dagwright.record_run") == 1
    assert EventType.EVENT_TYPE_TIMER_FIRED in {e.event_type for e in events}  # b's backoff


async def test_a_finished_run_id_returns_its_result_without_running_again(
    temporal_worker: RunningWorker,
) -> None:
    orch = client_of(temporal_worker)
    run_id = f"again-{uuid.uuid4().hex[:8]}"
    first = await orch.arun("weather in Tokyo?", plan=PLANS["weather"][1], run_id=run_id)
    calls = dict(temporal_runs.CALLS)
    again = await client_of(temporal_worker).arun("weather in Tokyo?", plan=PLANS["weather"][1],
                                                  run_id=run_id)
    assert comparable(again) == comparable(first) and calls == temporal_runs.CALLS
    with pytest.raises(DagwrightError, match="already exists for another query"):
        await orch.arun("something else", plan=PLANS["weather"][1], run_id=run_id)
    with pytest.raises(RunNotFound, match="no run 'nobody' on Temporal"):
        await orch.aresume("nobody")


async def test_the_sync_api_runs_on_temporal_too(temporal_worker: RunningWorker) -> None:
    """``Orchestrator.run`` makes its own event loop (and so its own Temporal client); the
    worker lives on this test's loop, so the blocking call runs in a thread."""
    config = temporal_worker.config

    def run() -> Any:
        orch = Orchestrator(catalog=build_catalog(), llm=ScriptedLLM([]), config=config,
                            registry=CollectorRegistry())
        return orch.run("weather in Tokyo?", plan=PLANS["weather"][1])

    result = await asyncio.to_thread(run)
    assert result.status == "succeeded" and result.answer == "Here is what I found."
    assert result.steps["wx"].output == {"temp_c": 21.5, "at": [35.68, 139.69]}


# --- approvals arrive as updates ------------------------------------------------------------------

async def test_a_paused_run_waits_in_its_workflow_and_a_decision_from_another_client_continues_it(
    temporal_worker: RunningWorker,
) -> None:
    run_id = f"pay-{uuid.uuid4().hex[:8]}"
    paused = await client_of(temporal_worker).arun("pay ACME", plan=APPROVAL_PLAN, run_id=run_id)
    assert paused.status == "awaiting_approval"
    [pending] = paused.pending_approvals
    assert (pending.step_id, pending.params) == ("send", {"amount": 250.0, "to": "ACME"})
    assert paused.steps["where"].status == "succeeded" and "file" not in paused.steps
    assert temporal_runs.CALLS["bank.transfer"] == 0

    other = client_of(temporal_worker)  # another client (another process, hours later...)
    seen = await other.aget_run(run_id)
    assert seen is not None and seen.status == "awaiting_approval"
    stored = await other.store.load(run_id)  # the worker recorded the pause in the store
    assert stored is not None and stored.state.status == "awaiting_approval"
    with pytest.raises(ApprovalError, match="do not fit"):
        await other.aresume(run_id, approvals={"send": Approval(approved=True,
                                                                 params={"amount": "lots"})})
    with pytest.raises(ApprovalError, match="'wx' is not waiting for approval"):
        await other.aresume(run_id, approvals={"wx": Approval(approved=True)})
    still = await other.aget_run(run_id)
    assert still is not None and [p.step_id for p in still.pending_approvals] == ["send"]
    # the store holds the paused run for Temporal: the local backend cannot run it too
    local_client = Orchestrator(catalog=build_catalog(), llm=ScriptedLLM([]),
                                config=engine_config(), registry=CollectorRegistry(),
                                store=temporal_worker.store)
    with pytest.raises(RunLeased, match="temporal:test-worker"):
        await local_client.aresume(run_id, approvals={"send": Approval(approved=True)})

    before = await other.aget_events(run_id)
    assert before[-1].type == "run_finished" and before[-1].data["status"] == "awaiting_approval"
    events: list[RunEvent] = []
    done = await other.aresume(run_id, approvals={
        "send": Approval(approved=True, params={"amount": 200, "to": "ACME"}, note="capped")},
        on_event=events.append)
    assert done.status == "succeeded", done.error
    assert done.steps["send"].attempts[-1].layer == "approval"
    assert done.steps["file"].output == {"filed": 200.0}
    assert temporal_runs.CALLS["bank.transfer"] == 1
    assert [e.type for e in events][-1] == "run_finished"
    assert events[0].seq == before[-1].seq + 1  # the run goes on numbering

    # the same story on the local backend ends in the same result
    temporal_runs.reset()
    local = local_orchestrator()
    await local.arun("pay ACME", plan=APPROVAL_PLAN, run_id=run_id)
    expected = await local.aresume(run_id, approvals={
        "send": Approval(approved=True, params={"amount": 200, "to": "ACME"}, note="capped")})
    assert comparable(done) == comparable(expected)
    with pytest.raises(ApprovalError, match="not waiting for approval"):
        await other.aresume(run_id, approvals={"send": Approval(approved=True)})


async def test_a_rejection_fails_the_step_and_skips_what_depends_on_it(
    temporal_worker: RunningWorker,
) -> None:
    orch = client_of(temporal_worker)
    run_id = f"reject-{uuid.uuid4().hex[:8]}"
    await orch.arun("pay ACME", plan=APPROVAL_PLAN, run_id=run_id)
    result = await orch.aresume(run_id, approvals={
        "send": Approval(approved=False, note="wrong account")})
    send = result.steps["send"]
    assert send.status == "failed" and send.error is not None
    assert (send.error.code, "wrong account" in send.error.message) == ("REJECTED", True)
    assert result.steps["file"].status == "skipped" and result.status == "partial"
    assert temporal_runs.CALLS["bank.transfer"] == 0


async def test_a_pending_approval_expires_on_a_durable_timer(temporal_worker: RunningWorker) -> None:
    orch = client_of(temporal_worker, approval_timeout_s=1.0)
    run_id = f"expire-{uuid.uuid4().hex[:8]}"
    paused = await orch.arun("pay ACME", plan=APPROVAL_PLAN, run_id=run_id)
    assert paused.status == "awaiting_approval"
    finished = await orch.aresume(run_id)  # nothing decided: the run keeps waiting...
    assert finished.status == "awaiting_approval"
    deadline = time.monotonic() + 15
    while finished.status == "awaiting_approval" and time.monotonic() < deadline:
        await asyncio.sleep(0.2)  # ...until its timer fires, with no client involved
        finished = await orch.aget_run(run_id) or finished
    send = finished.steps["send"]
    assert send.error is not None and send.error.code == "APPROVAL_EXPIRED"
    assert finished.steps["file"].status == "skipped" and finished.status == "partial"


async def test_a_plan_approval_holds_every_step(temporal_worker: RunningWorker) -> None:
    orch = client_of(temporal_worker, approve_plans=True)
    run_id = f"plan-ok-{uuid.uuid4().hex[:8]}"
    paused = await orch.arun(PLANS["weather"][0], plan=PLANS["weather"][1], run_id=run_id)
    assert paused.status == "awaiting_approval" and paused.steps == {}
    assert [p.step_id for p in paused.pending_approvals] == ["@plan"]
    assert sum(temporal_runs.CALLS.values()) == 0
    done = await orch.aresume(run_id, approvals={"@plan": Approval(approved=True)})
    assert done.status == "succeeded" and temporal_runs.CALLS["weather.now"] == 1


# --- events and the store ---------------------------------------------------------------------

async def test_events_stream_live_and_stay_queryable_and_runs_are_in_the_store(
    temporal_worker: RunningWorker,
) -> None:
    orch = client_of(temporal_worker)
    run_id = f"stream-{uuid.uuid4().hex[:8]}"
    streamed = [e async for e in orch.astream(PLANS["fan"][0], plan=PLANS["fan"][1], run_id=run_id)]
    assert streamed[-1].type == "run_finished"
    assert [e.seq for e in streamed] == list(range(1, len(streamed) + 1))
    assert await orch.aget_events(run_id, after=0) == streamed  # the workflow's query
    assert await temporal_worker.store.load_events(run_id) == streamed  # the store's copy
    runs = await orch.alist_runs()
    assert [r.status for r in runs if r.run_id == run_id] == ["partial"]


# --- determinism -------------------------------------------------------------------------------

async def test_recorded_histories_replay_to_the_same_commands_in_a_fresh_process(
    temporal_worker: RunningWorker, tmp_path: Path,
) -> None:
    from temporalio.worker import Replayer

    from orchestration.temporal._workflow import RunWorkflow

    orch = client_of(temporal_worker)
    ids = []
    for name in ("fan", "resolved", "planned", "corrected"):
        run_id = f"replay-{name}-{uuid.uuid4().hex[:6]}"
        await orch.arun(PLANS[name][0], plan=PLANS[name][1], run_id=run_id)
        ids.append(run_id)
    approval_id = f"replay-approval-{uuid.uuid4().hex[:6]}"
    await orch.arun("pay ACME", plan=APPROVAL_PLAN, run_id=approval_id)
    await orch.aresume(approval_id, approvals={"send": Approval(approved=True)})
    ids.append(approval_id)

    replayer = Replayer(workflows=[RunWorkflow])  # in this process (context registered)
    paths = []
    for run_id in ids:
        recorded = await history(temporal_worker, run_id)
        await replayer.replay_workflow(recorded)
        path = tmp_path / f"{run_id}.json"
        path.write_text(recorded.to_json())
        paths.append(str(path))
    # and in a fresh interpreter with another hash seed: set iteration order changes
    proc = subprocess.run(
        [sys.executable, "-m", "tests.support.temporal_replay",
         temporal_worker.config.temporal_task_queue, *paths],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": "12345"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("replayed ") == len(ids)


@pytest.fixture
def forbidden_in_workflows(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Record every read of the wall clock, a timer, a uuid or the global random generator
    made by dagwright code while a workflow runs (they would differ on replay)."""
    import uuid as uuid_module

    from temporalio import workflow

    seen: list[str] = []

    def guard(name: str, real: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if workflow.in_workflow():
                caller = sys._getframe(1)
                module = caller.f_globals.get("__name__", "")
                if module.split(".")[0] in ("orchestration", "executors", "planners"):
                    seen.append(f"{name} from {module}:{caller.f_lineno}")
            return real(*args, **kwargs)
        return wrapper

    for module, name in ((time, "time"), (time, "perf_counter"), (time, "monotonic"),
                         (uuid_module, "uuid4"), (random, "random")):
        monkeypatch.setattr(module, name, guard(f"{module.__name__}.{name}", getattr(module, name)))
    yield seen


async def test_the_engine_reads_no_wall_clock_uuid_or_global_randomness_inside_a_workflow(
    temporal_worker: RunningWorker, forbidden_in_workflows: list[str],
) -> None:
    orch = client_of(temporal_worker)
    results = await asyncio.gather(*(orch.arun(q, plan=p) for q, p in PLANS.values()))
    run_id = f"guard-{uuid.uuid4().hex[:6]}"
    await orch.arun("pay ACME", plan=APPROVAL_PLAN, run_id=run_id)
    await orch.aresume(run_id, approvals={"send": Approval(approved=True)})
    assert {r.status for r in results} == {"succeeded", "failed", "partial"}
    assert forbidden_in_workflows == []


# --- the classification of lost calls ---------------------------------------------------------

@pytest.mark.parametrize(("kind", "expected"), [
    ({"method": "GET"}, ("WORKER_LOST", True)),
    ({"method": "POST", "idempotency_key_header": "Idempotency-Key"}, ("WORKER_LOST", True)),
    ({"method": "POST"}, ("OUTCOME_UNKNOWN", False)),
])
def test_a_call_whose_worker_was_lost_is_repeated_only_when_that_is_safe(
    kind: dict[str, Any], expected: tuple[str, bool],
) -> None:
    pytest.importorskip("temporalio", reason="temporalio is in the temporal extra")
    from temporalio.exceptions import ActivityError, TimeoutError, TimeoutType

    from orchestration import Capability
    from orchestration.temporal._workflow_services import CallLabel, lost_call_error

    capability = Capability(tool="bank", name="pay", url="http://127.0.0.1:9/pay",
                            input_schema={"type": "object"}, **kind)
    exc = ActivityError("activity timed out", scheduled_event_id=5, started_event_id=6,
                        identity="w1", activity_type="dagwright.call_tool", activity_id="1",
                        retry_state=None)
    exc.__cause__ = TimeoutError("heartbeat", type=TimeoutType.HEARTBEAT, last_heartbeat_details=[])
    error = lost_call_error(capability, {"amount": 5}, exc, CallLabel("r", "pay", 1, "plan"))
    assert (error.code, error.retryable) == expected
    assert error.request_sent and error.details["request"] == {"amount": 5}
    assert "no heartbeat" in error.message


# --- settings --------------------------------------------------------------------------------------

def test_the_run_carries_its_settings_without_secrets_or_the_store_url() -> None:
    pytest.importorskip("temporalio", reason="temporalio is in the temporal extra")
    from orchestration.temporal._payloads import config_from_payload, config_to_payload

    config = OrchestratorConfig(llm_api_key="sk-secret-1", store_url="postgresql://u:pw@db/x",
                                max_concurrency=3, retry_backoff="linear")
    payload = config_to_payload(config)
    assert "sk-secret-1" not in json.dumps(payload) and "pw@" not in json.dumps(payload)
    again = config_from_payload(payload)
    assert (again.max_concurrency, again.retry_backoff, again.llm_api_key) == (3, "linear", None)


# --- saved workflows ---------------------------------------------------------------------------

async def test_a_saved_workflow_runs_on_the_workers_with_its_inputs_and_answer(
    temporal_worker: RunningWorker, tmp_path: Path,
) -> None:
    """The client reads, checks and binds the workflow; the workers run its plan with the
    run's answer settings: no LLM call anywhere, the outputs and template answer made
    inside the workflow."""
    path = tmp_path / "city-weather.json"
    path.write_text(json.dumps({
        "name": "city-weather", "query": "weather in {{inputs.city}}",
        "inputs": {"city": {"type": "string"}},
        "steps": [{"id": "where", "tool": "geo", "capability": "locate",
                   "params": {"city": "{{inputs.city}}"}},
                  {"id": "now", "tool": "weather", "capability": "now",
                   "params": {"lat": "{{where.lat}}", "lon": "{{where.lon}}"}}],
        "outputs": {"temp": "{{now.temp_c}}"},
        "answer": {"strategy": "template", "template": "{{ inputs.city }}: {{ outputs.temp }} °C"},
    }))
    orch = client_of(temporal_worker)
    result = await orch.arun_workflow(path, {"city": "Oslo"}, run_id=f"wf-{uuid.uuid4().hex[:8]}")
    assert result.status == "succeeded", result.error
    assert result.query == "weather in Oslo" and result.plan_source == "workflow"
    assert result.workflow is not None and result.workflow.outputs == {"temp": 21.5}
    assert (result.answer, result.answer_strategy) == ("Oslo: 21.5 °C", "template")
    assert temporal_worker.llm.requests == [] and result.usage.llm_calls == 0
