"""Workers under faults, each counting requests at a loopback bank
(:mod:`tests.support.side_effects`), with a real dev server and ``dagwright worker``
processes.

Fencing: a worker paused (SIGSTOP) past the heartbeat timeout just before it sends a
payment does not send it when it wakes — the run has already gone on without it. Two
workers (:mod:`tests.support.paused_send_worker`: a call with a side effect announces
where it is in the worker's log and waits a moment there); the one holding the payment is
paused there for twice the heartbeat timeout: the server times the activity out, the
other worker runs the workflow on, and the run ends with the payment ``OUTCOME_UNKNOWN``
(it may not be re-sent: the bank takes no key). Then the paused worker wakes, and the
fence stops the call:

* paused before the fence: its heartbeat (which the server must acknowledge) finds that
  Temporal no longer holds the attempt — before that fence, the payment left 10 ms after
  the worker woke, after the operator had been told "unknown";
* paused after the heartbeat was acknowledged, before the call is claimed in the run
  store: the run fenced the call there when it gave up on it, and the claim finds the
  fence — before that fence, the payment left as the worker woke.

Late answers: the server is down past the heartbeat timeout while the bank answers; the
run takes the answer its worker kept in the run store. A caller whose server is down gets
a typed error saying how to look.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from orchestration import Catalog, Orchestrator, OrchestratorConfig, RunResult, ScriptedLLM
from tests.support.paused_send_worker import ABOUT_TO_SEND, PAUSE_AT, PROVED_LIVE
from tests.support.side_effects import SideEffectTools, pay_plan, side_effect_tools
from tests.support.temporal import TemporalServer
from tests.support.temporal_workers import start_workers

pytestmark = [pytest.mark.temporal, pytest.mark.slow]

HEARTBEAT_S = 1.5


async def wait_for(what: str, check: object, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def pay_with_a_paused_worker(server: TemporalServer, tools: SideEffectTools,
                                   tmp_path: Path, pause_at: str,
                                   announced: str) -> tuple[RunResult, str, float]:
    """Pay on two workers; pause the one holding the payment where it announces
    ``announced``, for twice the heartbeat timeout; wake it once the run has ended and
    it has refused the late send. The run's result, the woken worker's log, and how long
    after the pause the run ended."""
    catalog_path = tmp_path / "catalog.json"
    catalog_path.write_text(json.dumps(tools.catalog()))
    store_url = f"sqlite:///{tmp_path}/runs.db"
    queue = f"paused-{uuid.uuid4().hex[:8]}"
    worker_env = {
        "ORCH_CATALOG": str(catalog_path), "ORCH_STORE_URL": store_url,
        "ORCH_TEMPORAL_ADDRESS": server.address,
        "ORCH_TEMPORAL_NAMESPACE": server.namespace,
        "ORCH_TEMPORAL_TASK_QUEUE": queue, "ORCH_TEMPORAL_STICKY_TIMEOUT_S": "1",
        PAUSE_AT: pause_at,
    }
    config = OrchestratorConfig(
        backend="temporal", temporal_address=server.address,
        temporal_namespace=server.namespace, temporal_task_queue=queue,
        temporal_heartbeat_timeout_s=HEARTBEAT_S, temporal_workflow_task_timeout_s=2,
        synthesis_enabled=False, store_url=store_url)
    with start_workers(["worker-a", "worker-b"], worker_env,
                       module="tests.support.paused_send_worker") as workers:
        orch = Orchestrator(catalog=Catalog.from_dict(tools.catalog()), llm=ScriptedLLM([]),
                            config=config, registry=CollectorRegistry())
        run = asyncio.ensure_future(orch.arun("pay for one share", plan=pay_plan("pay"),
                                              run_id=f"paused-{uuid.uuid4().hex[:8]}"))
        try:
            await wait_for(f"a worker to announce {announced!r}",
                           lambda: any(announced in w.log() for w in workers))
            [paused] = [w for w in workers if announced in w.log()]
            paused.pause()
            paused_at = time.monotonic()
            result = await asyncio.wait_for(run, 60)
            ended_after = time.monotonic() - paused_at
            # the run went on without the paused worker, and told the truth it knew
            assert tools.requests == [("/quote", None, {"symbol": "TSLA"})]
            await asyncio.sleep(max(0.0, 2 * HEARTBEAT_S - (time.monotonic() - paused_at)))
            paused.go_on()
            await wait_for("the woken worker to refuse the late send",
                           lambda: "not sent" in paused.log(), 15)
            await asyncio.sleep(0.5)  # a late send would have reached the bank by now
        finally:
            for worker in workers:
                worker.go_on()
            if not run.done():
                run.cancel()
        return result, paused.log(), ended_after


@pytest.mark.parametrize(("pause_at", "announced", "refused", "run_store"), [
    # paused before its heartbeat proof: the server no longer holds the attempt
    ("before-proof", ABOUT_TO_SEND, "no longer holds this attempt", None),
    # paused after the proof, before its claim: the run fenced the call in the store first
    ("after-proof", PROVED_LIVE, "the run fenced this attempt in the run store",
     "no worker had claimed the call"),
], ids=["before-its-heartbeat-proof", "after-its-heartbeat-proof"])
async def test_a_worker_paused_before_it_sends_a_payment_does_not_send_it_late(
    temporal_server: TemporalServer, tmp_path: Path, pause_at: str, announced: str,
    refused: str, run_store: str | None,
) -> None:
    pytest.importorskip("temporalio", reason="temporalio is in the temporal extra")
    started = time.monotonic()
    with side_effect_tools() as tools:
        result, log, ended_after = await pay_with_a_paused_worker(
            temporal_server, tools, tmp_path, pause_at, announced)
    pay = result.steps["pay"]
    assert pay.status == "unknown" and pay.error is not None
    assert pay.error.code == "OUTCOME_UNKNOWN"
    assert result.steps["receipt"].status == "skipped"
    # the bank never saw the payment: not before the run said "unknown", not after
    assert tools.executed["/pay"] == 0 and [r for r in tools.requests if r[0] == "/pay"] == []
    assert "ATTEMPT_FENCED" not in str(result.to_dict())  # the run had ended without it
    assert "not sent" in log and refused in log, log
    if run_store is not None:  # the run says what the store knew
        assert run_store in pay.error.details["run_store"]
    print(f"\nworker paused {pause_at}: run ended {ended_after:.1f}s after the pause "
          f"(heartbeat {HEARTBEAT_S:g}s); 0 payments sent; "
          f"test took {time.monotonic() - started:.1f}s")


async def test_a_server_outage_longer_than_the_heartbeat_timeout_is_ridden_through_and_pays_once(
    tmp_path: Path,
) -> None:
    """The dev server (state in a file) is killed while a payment is in flight, stays down
    for twice the heartbeat timeout while the bank answers, and comes back on its database:
    the caller's ``arun`` rides through the outage (no bare ``RPCError``), the run ends,
    and the payment was executed exactly once.

    The bank's answer reached the worker while the server was down: Temporal, back, times
    the activity out and drops the answer ("Activity not found on completion"). The worker
    had kept it in the run store, and the run reads it there (``dagwright.reconcile_call``):
    the payment succeeded, and the receipt is filed — before, the run said
    ``OUTCOME_UNKNOWN`` for a payment the bank had made."""
    pytest.importorskip("temporalio", reason="temporalio is in the temporal extra")
    from contextlib import ExitStack

    from tests.support.net import free_port
    from tests.support.temporal import start_temporal_dev_server

    started = time.monotonic()
    db, port = tmp_path / "temporal.db", free_port()
    with side_effect_tools() as tools, ExitStack() as servers:
        server = servers.enter_context(start_temporal_dev_server(db_filename=db, port=port))
        catalog_path = tmp_path / "catalog.json"
        catalog_path.write_text(json.dumps(tools.catalog()))
        store_url = f"sqlite:///{tmp_path}/runs.db"
        queue = f"outage-{uuid.uuid4().hex[:8]}"
        worker_env = {
            "ORCH_CATALOG": str(catalog_path), "ORCH_STORE_URL": store_url,
            "ORCH_TEMPORAL_ADDRESS": server.address, "ORCH_TEMPORAL_NAMESPACE": server.namespace,
            "ORCH_TEMPORAL_TASK_QUEUE": queue, "ORCH_TEMPORAL_STICKY_TIMEOUT_S": "1",
        }
        config = OrchestratorConfig(
            backend="temporal", temporal_address=server.address,
            temporal_namespace=server.namespace, temporal_task_queue=queue,
            temporal_heartbeat_timeout_s=HEARTBEAT_S, temporal_workflow_task_timeout_s=2,
            synthesis_enabled=False, store_url=store_url, run_timeout_s=90)
        arrived = tools.hold_first("/pay")
        with start_workers(["worker-a"], worker_env):
            orch = Orchestrator(catalog=Catalog.from_dict(tools.catalog()), llm=ScriptedLLM([]),
                                config=config, registry=CollectorRegistry())
            run_id = f"outage-{uuid.uuid4().hex[:8]}"
            run = asyncio.ensure_future(orch.arun("pay for one share", plan=pay_plan("pay"),
                                                  run_id=run_id))
            try:
                await wait_for("the payment to reach the bank", arrived.is_set)
                servers.close()  # the server goes down with the payment in flight
                down_at = time.monotonic()
                await asyncio.sleep(HEARTBEAT_S)
                tools.release_first("/pay")  # the bank answers while the server is down
                await asyncio.sleep(HEARTBEAT_S)
                servers.enter_context(start_temporal_dev_server(db_filename=db, port=port))
                outage = time.monotonic() - down_at
                result = await asyncio.wait_for(run, 90)
                activities = await activity_types(config, run_id)
            finally:
                tools.release_first("/pay")
                if not run.done():
                    run.cancel()
    pay = result.steps["pay"]
    assert tools.executed["/pay"] == 1 and [r[0] for r in tools.requests].count("/pay") == 1
    # the payment's answer was the bank's, though Temporal had dropped it: not unknown
    assert pay.status == "succeeded" and pay.output == {"paid": 250.0, "number": 1}, pay
    assert result.status == "succeeded" and result.steps["receipt"].status == "succeeded"
    assert [r[0] for r in tools.requests] == ["/quote", "/pay", "/receipt"]
    # and it came through the run store: Temporal timed the activity out meanwhile
    assert activities.count("dagwright.reconcile_call") == 1, activities
    print(f"\nserver outage of {outage:.1f}s (heartbeat {HEARTBEAT_S:g}s): pay {pay.status} "
          f"(its answer read from the run store), executed once; "
          f"test took {time.monotonic() - started:.1f}s")


async def activity_types(config: OrchestratorConfig, run_id: str) -> list[str]:
    """The activities the run scheduled, in order."""
    from orchestration.temporal import connect

    history = await (await connect(config)).get_workflow_handle(run_id).fetch_history()
    return [e.activity_task_scheduled_event_attributes.activity_type.name
            for e in history.events if e.HasField("activity_task_scheduled_event_attributes")]


async def test_a_caller_whose_server_is_down_gets_a_typed_error_saying_how_to_look() -> None:
    pytest.importorskip("temporalio", reason="temporalio is in the temporal extra")
    from orchestration import BackendUnavailable
    from tests.support.net import free_port

    config = OrchestratorConfig(backend="temporal", store_url="memory://",
                                temporal_address=f"127.0.0.1:{free_port()}")  # nobody there
    orch = Orchestrator(catalog=Catalog(), llm=ScriptedLLM([]), config=config,
                        registry=CollectorRegistry())
    for call in (orch.aresume("r-1"), orch.aget_run("r-1"), orch.arun("q", run_id="r-1")):
        with pytest.raises(BackendUnavailable) as caught:
            await asyncio.wait_for(call, 30)
        assert caught.value.run_id == "r-1" and caught.value.may_be_running
        assert "may still be going on" in str(caught.value)
        assert "`dagwright runs show r-1`" in str(caught.value)
        assert "`dagwright resume r-1`" in str(caught.value)
