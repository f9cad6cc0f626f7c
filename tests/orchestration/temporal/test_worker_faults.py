"""Fencing on workers: a worker paused (SIGSTOP) past the heartbeat timeout just before it
sends a payment does not send it when it wakes — the run has already gone on without it.

Two ``dagwright worker`` processes (:mod:`tests.support.paused_send_worker`: a call with a
side effect announces itself in the worker's log and waits a moment before it leaves),
a real dev server, a loopback bank that counts every request. The worker holding the
payment is paused there for twice the heartbeat timeout: the server times the activity
out, the other worker runs the workflow on, and the run ends with the payment
``OUTCOME_UNKNOWN`` (it may not be re-sent: the bank takes no key). Then the paused worker
wakes; its attempt proves it is still the live one right before the first byte (a
heartbeat the server must acknowledge), the server no longer knows it, and nothing is
sent: the bank never sees the payment — before the fence, it was paid 10 ms after the
worker woke, after the operator had been told "unknown".
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from orchestration import Catalog, Orchestrator, OrchestratorConfig, ScriptedLLM
from tests.support.paused_send_worker import ABOUT_TO_SEND
from tests.support.side_effects import pay_plan, side_effect_tools
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


async def test_a_worker_paused_before_it_sends_a_payment_does_not_send_it_late(
    temporal_server: TemporalServer, tmp_path: Path,
) -> None:
    pytest.importorskip("temporalio", reason="temporalio is in the temporal extra")
    started = time.monotonic()
    with side_effect_tools() as tools:
        catalog_path = tmp_path / "catalog.json"
        catalog_path.write_text(json.dumps(tools.catalog()))
        store_url = f"sqlite:///{tmp_path}/runs.db"
        queue = f"paused-{uuid.uuid4().hex[:8]}"
        worker_env = {
            "ORCH_CATALOG": str(catalog_path), "ORCH_STORE_URL": store_url,
            "ORCH_TEMPORAL_ADDRESS": temporal_server.address,
            "ORCH_TEMPORAL_NAMESPACE": temporal_server.namespace,
            "ORCH_TEMPORAL_TASK_QUEUE": queue, "ORCH_TEMPORAL_STICKY_TIMEOUT_S": "1",
        }
        config = OrchestratorConfig(
            backend="temporal", temporal_address=temporal_server.address,
            temporal_namespace=temporal_server.namespace, temporal_task_queue=queue,
            temporal_heartbeat_timeout_s=HEARTBEAT_S, temporal_workflow_task_timeout_s=2,
            synthesis_enabled=False, store_url=store_url)
        with start_workers(["worker-a", "worker-b"], worker_env,
                           module="tests.support.paused_send_worker") as workers:
            orch = Orchestrator(catalog=Catalog.from_dict(tools.catalog()), llm=ScriptedLLM([]),
                                config=config, registry=CollectorRegistry())
            run = asyncio.ensure_future(orch.arun("pay for one share", plan=pay_plan("pay"),
                                                  run_id=f"paused-{uuid.uuid4().hex[:8]}"))
            try:
                holder = []
                await wait_for("a worker about to send the payment", lambda: holder.extend(
                    w for w in workers if ABOUT_TO_SEND in w.log()) or holder)
                [paused] = holder
                paused.pause()
                paused_at = time.monotonic()
                result = await asyncio.wait_for(run, 60)
                ended_after = time.monotonic() - paused_at
                # the run went on without the paused worker, and told the truth it knew
                assert tools.requests == [("/quote", None, {"symbol": "TSLA"})]
                pay = result.steps["pay"]
                assert pay.status == "unknown" and pay.error is not None
                assert pay.error.code == "OUTCOME_UNKNOWN"
                assert result.steps["receipt"].status == "skipped"
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
            log = paused.log()
    # the bank never saw the payment: not before the run said "unknown", not after
    assert tools.executed["/pay"] == 0 and [r for r in tools.requests if r[0] == "/pay"] == []
    assert "ATTEMPT_FENCED" not in str(result.to_dict())  # the run had ended without it
    assert "not sent" in log and "no longer holds this attempt" in log, log
    print(f"\npaused worker: run ended {ended_after:.1f}s after the pause (heartbeat "
          f"{HEARTBEAT_S:g}s); 0 payments sent; test took {time.monotonic() - started:.1f}s")


async def test_a_server_outage_longer_than_the_heartbeat_timeout_is_ridden_through_and_pays_once(
    tmp_path: Path,
) -> None:
    """The dev server (state in a file) is killed while a payment is in flight, stays down
    for twice the heartbeat timeout while the bank answers, and comes back on its database:
    the caller's ``arun`` rides through the outage (no bare ``RPCError``), the run ends,
    and the payment was executed exactly once."""
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
            run = asyncio.ensure_future(orch.arun("pay for one share", plan=pay_plan("pay"),
                                                  run_id=f"outage-{uuid.uuid4().hex[:8]}"))
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
            finally:
                tools.release_first("/pay")
                if not run.done():
                    run.cancel()
    pay = result.steps["pay"]
    assert tools.executed["/pay"] == 1 and [r[0] for r in tools.requests].count("/pay") == 1
    assert result.status in ("succeeded", "partial")
    if pay.status == "succeeded":
        assert result.steps["receipt"].status == "succeeded"
    else:  # the answer came while the server was down: honest, and not sent again
        assert pay.status == "unknown" and pay.error is not None
        assert pay.error.code == "OUTCOME_UNKNOWN"
    print(f"\nserver outage of {outage:.1f}s (heartbeat {HEARTBEAT_S:g}s): pay {pay.status}, "
          f"executed once; test took {time.monotonic() - started:.1f}s")


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
