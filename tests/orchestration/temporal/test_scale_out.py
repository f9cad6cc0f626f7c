"""Scale out: two ``dagwright worker`` processes share a batch of runs; one is killed with
SIGKILL while it holds calls in flight, and every run finishes on the other.

The tools are loopback HTTP services that count what they *executed*
(:mod:`tests.support.side_effects`). Every run is quote → pay → receipt; half pay without an
idempotency key, half with one. The payments are held at the tool until the test lets
them go, so at the moment of the kill every quote has finished and every payment is in
flight — some on the worker that dies. Then:

* every run finishes, on the surviving worker (the last workflow task of every run is
  the survivor's);
* no finished step runs again: the quote was executed exactly once per run;
* no call with a side effect is executed twice: a payment without a key whose worker died
  ends ``unknown`` (``OUTCOME_UNKNOWN``) and is not sent again; one with a key is sent
  again with the same key, which the tool answers without executing;
* the runs are recorded in the run store the workers and the client share.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from orchestration import Catalog, Orchestrator, OrchestratorConfig, ScriptedLLM
from tests.support.side_effects import SideEffectTools, pay_plan, side_effect_tools
from tests.support.temporal import TemporalServer
from tests.support.temporal_workers import start_workers

pytestmark = [pytest.mark.temporal, pytest.mark.slow]

RUNS = 8
HEARTBEAT_S = 2.0


async def wait_for(what: str, check: Any, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def holders(client: Any, run_ids: list[str]) -> dict[str, str]:
    """run id → the identity of the worker running its tool call now (pending activity)."""
    found = {}
    for run_id in run_ids:
        description = await client.get_workflow_handle(run_id).describe()
        for pending in description.raw_description.pending_activities:
            if pending.activity_type.name == "dagwright.call_tool" and pending.last_worker_identity:
                found[run_id] = pending.last_worker_identity
    return found


async def last_workflow_task_identity(client: Any, run_id: str) -> str:
    from temporalio.api.enums.v1 import EventType

    events = (await client.get_workflow_handle(run_id).fetch_history()).events
    completed = [e.workflow_task_completed_event_attributes.identity for e in events
                 if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED]
    return completed[-1]


async def test_a_batch_survives_the_sigkill_of_one_of_two_workers(
    temporal_server: TemporalServer, tmp_path: Path,
) -> None:
    pytest.importorskip("temporalio", reason="temporalio is in the temporal extra (pip install -e '.[dev]')")
    from orchestration.temporal import connect

    started = time.monotonic()
    with side_effect_tools() as tools:
        catalog_path = tmp_path / "catalog.json"
        catalog_path.write_text(json.dumps(tools.catalog()))
        store_url = f"sqlite:///{tmp_path}/runs.db"
        queue = f"scale-out-{uuid.uuid4().hex[:8]}"
        worker_env = {
            "ORCH_CATALOG": str(catalog_path), "ORCH_STORE_URL": store_url,
            "ORCH_TEMPORAL_ADDRESS": temporal_server.address,
            "ORCH_TEMPORAL_NAMESPACE": temporal_server.namespace,
            "ORCH_TEMPORAL_TASK_QUEUE": queue,
            # a dead worker's cached runs go to the other worker after 1 s, not 5
            "ORCH_TEMPORAL_STICKY_TIMEOUT_S": "1",
        }
        config = OrchestratorConfig(
            backend="temporal", temporal_address=temporal_server.address,
            temporal_namespace=temporal_server.namespace, temporal_task_queue=queue,
            temporal_heartbeat_timeout_s=HEARTBEAT_S, temporal_workflow_task_timeout_s=2,
            synthesis_enabled=False, store_url=store_url, retry_base_delay_s=0.05)
        with start_workers(["worker-a", "worker-b"], worker_env) as workers:
            workers_up = time.monotonic()
            outcome = await run_batch_and_kill(tools, config, workers)
            finished = time.monotonic()
            client = await connect(config)
            survivor = outcome["survivor"]
            for run_id in outcome["results"]:  # every run ended on the survivor
                assert await last_workflow_task_identity(client, run_id) == survivor.identity
            orch = Orchestrator(catalog=Catalog.from_dict(tools.catalog()), llm=ScriptedLLM([]),
                                config=config, registry=CollectorRegistry())
            stored = {r.run_id: r.status for r in await orch.alist_runs(limit=100)}
    assert_outcome(tools, outcome, stored)
    print(f"\nscale-out: workers up in {workers_up - started:.1f}s, batch of {RUNS} runs with "
          f"a SIGKILL finished in {finished - workers_up:.1f}s "
          f"(heartbeat timeout {HEARTBEAT_S:g}s); {len(outcome['victims'])} run(s) were "
          f"on the killed worker")


async def run_batch_and_kill(tools: SideEffectTools, config: OrchestratorConfig,
                             workers: list[Any]) -> dict[str, Any]:
    from orchestration.temporal import connect

    client = await connect(config)
    orch = Orchestrator(catalog=Catalog.from_dict(tools.catalog()), llm=ScriptedLLM([]),
                        config=config, registry=CollectorRegistry())
    capabilities = {f"scale-{i}-{uuid.uuid4().hex[:6]}": ("pay" if i % 2 else "pay_keyed")
                    for i in range(RUNS)}
    tools.hold.set()  # every payment executes, then keeps its answer back
    batch = asyncio.gather(*(orch.arun("pay for one share and file the receipt",
                                       plan=pay_plan(cap), run_id=run_id)
                             for run_id, cap in capabilities.items()))
    try:
        await wait_for("every payment to reach the tool", lambda: sum(
            1 for path, _, _ in list(tools.requests) if path in ("/pay", "/pay_keyed")) == RUNS)
        held = await holders(client, list(capabilities))
        assert len(held) == RUNS, held
        by_worker = Counter(held.values())
        victim = next(w for w in workers if w.identity == by_worker.most_common(1)[0][0])
        survivor = next(w for w in workers if w is not victim)
        victim.kill()  # SIGKILL while it holds payments in flight
        assert victim.process.returncode == -9
        tools.hold.clear()
        tools.release.set()  # the survivor's payments answer; the victim's go nowhere
        results = await asyncio.wait_for(batch, timeout=90)
    finally:
        tools.release.set()
        if not batch.done():
            batch.cancel()
    return {"results": dict(zip(capabilities, results, strict=True)), "capabilities": capabilities,
            "victims": {rid for rid, who in held.items() if who == victim.identity},
            "survivor": survivor, "victim": victim}


def assert_outcome(tools: SideEffectTools, outcome: dict[str, Any], stored: dict[str, str]) -> None:
    results, capabilities, victims = outcome["results"], outcome["capabilities"], outcome["victims"]
    assert victims, "the killed worker held no payment: nothing was proven"
    keyed = [rid for rid, cap in capabilities.items() if cap == "pay_keyed"]
    plain = [rid for rid, cap in capabilities.items() if cap == "pay"]
    requests = Counter(path for path, _, _ in tools.requests)

    # every run finished; the quotes, finished before the kill, were not requested again
    assert {r.status for r in results.values()} <= {"succeeded", "partial"}
    assert tools.executed["/quote"] == requests["/quote"] == RUNS
    # a payment without a key is sent once, whatever happened to its worker
    assert tools.executed["/pay"] == requests["/pay"] == len(plain)
    for run_id in plain:
        pay, receipt = results[run_id].steps["pay"], results[run_id].steps["receipt"]
        if run_id in victims:
            assert pay.status == "unknown" and pay.error is not None
            assert pay.error.code == "OUTCOME_UNKNOWN"
            assert pay.error.details["request"] == {"amount": 250.0, "to": "broker"}
            # the call left with its worker: a sent call that failed, not one a guard
            # stopped before it left (a new user read 'not_sent' beside 'may have happened')
            assert [(a.outcome, a.error.request_sent if a.error else None)
                    for a in pay.attempts] == [("failed", True)]
            assert receipt.status == "skipped" and results[run_id].status == "partial"
        else:
            assert pay.status == "succeeded" and receipt.status == "succeeded"
    # a payment with a key is executed once; the lost ones were re-sent with the same key
    assert tools.executed["/pay_keyed"] == len(keyed)
    sent = [(key, body) for path, key, body in tools.requests if path == "/pay_keyed"]
    assert len(sent) == len(keyed) + len(victims & set(keyed))
    assert len({key for key, _ in sent}) == len(keyed)  # one key per run, repeats share it
    for run_id in keyed:
        result = results[run_id]
        assert result.status == "succeeded", result.error
        layers = [a.layer for a in result.steps["pay"].attempts]
        codes = [a.error.code if a.error else None for a in result.steps["pay"].attempts]
        if run_id in victims:
            assert layers == ["plan", "resilience"] and codes == ["WORKER_LOST", None]
        else:
            assert layers == ["plan"]
    succeeded = sum(1 for r in results.values() if r.status == "succeeded")
    assert tools.executed["/receipt"] == succeeded
    # the workers recorded every run in the store the client reads
    assert {rid: stored.get(rid) for rid in results} == {rid: r.status for rid, r in results.items()}
