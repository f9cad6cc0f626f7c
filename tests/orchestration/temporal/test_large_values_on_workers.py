"""Large values on Temporal as an operator runs it: ``dagwright worker`` processes, a real
dev server, a loopback HTTP tool counting every request (:mod:`tests.support.bulk_http`).

* A run whose outputs add up far past Temporal's 2 MB payload limit — twelve 200 KiB
  outputs, a 5 MiB reply to a side effect, a reply just under ``ORCH_MAX_RESPONSE_BYTES``
  and one just over it — gives the same ``RunResult`` as on the local backend, every
  request made once on each backend, and the history holds references only.
* A client whose run store is not the workers' gets a clear error naming the setting
  both sides must share (``ORCH_STORE_URL``), not a hang: reading a large result at once;
  a run started with a large parameter (which no worker can read) ended by its deadline
  as ``WORKFLOW_STUCK``, with the worker's reason.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from orchestration import Catalog, Orchestrator, OrchestratorConfig, ScriptedLLM
from tests.support.bulk_http import BulkTool, bulk_tool
from tests.support.temporal import TemporalServer
from tests.support.temporal_runs import comparable
from tests.support.temporal_workers import start_workers

pytestmark = [pytest.mark.temporal, pytest.mark.slow]

TEMPORAL_PAYLOAD_LIMIT = 2 * 1024 * 1024
MAX_RESPONSE_BYTES = 10_000_000  # ORCH_MAX_RESPONSE_BYTES, the default


def big_plan() -> dict[str, Any]:
    steps: list[dict[str, Any]] = [
        {"id": f"part{n}", "tool": "bulk", "capability": "chunk", "params": {"n": n, "kb": 200}}
        for n in range(12)]
    steps += [
        {"id": "report", "tool": "bulk", "capability": "export", "params": {"kb": 5 * 1024}},
        # 9,830,400 bytes of text (about 9.9 MB as JSON): the reply just fits ORCH_MAX_RESPONSE_BYTES
        {"id": "nearly", "tool": "bulk", "capability": "chunk", "params": {"n": 98, "kb": 9600}},
        # 10,035,200 bytes: refused while it streams, on both backends alike
        {"id": "over", "tool": "bulk", "capability": "chunk", "params": {"n": 99, "kb": 9800}},
    ]
    return {"steps": steps}


@contextmanager
def deployment(server: TemporalServer, tool: BulkTool, tmp_path: Path, *,
               worker_store: str) -> Iterator[OrchestratorConfig]:
    """One ``dagwright worker`` process on a queue of its own; the client's config."""
    catalog_path = tmp_path / "catalog.json"
    catalog_path.write_text(json.dumps(tool.catalog()))
    queue = f"large-{uuid.uuid4().hex[:8]}"
    env = {"ORCH_CATALOG": str(catalog_path), "ORCH_STORE_URL": worker_store,
           "ORCH_TEMPORAL_ADDRESS": server.address, "ORCH_TEMPORAL_NAMESPACE": server.namespace,
           "ORCH_TEMPORAL_TASK_QUEUE": queue, "ORCH_SYNTHESIS_ENABLED": "false"}
    with start_workers(["worker-a"], env):
        yield OrchestratorConfig(
            backend="temporal", temporal_address=server.address,
            temporal_namespace=server.namespace, temporal_task_queue=queue,
            synthesis_enabled=False, store_url=worker_store)


def client(tool: BulkTool, config: OrchestratorConfig) -> Orchestrator:
    return Orchestrator(catalog=Catalog.from_dict(tool.catalog()), llm=ScriptedLLM([]),
                        config=config, registry=CollectorRegistry())


async def test_outputs_far_past_the_payload_limit_finish_on_workers_as_locally(
    temporal_server: TemporalServer, tmp_path: Path,
) -> None:
    pytest.importorskip("temporalio", reason="temporalio is in the temporal extra")
    from orchestration.temporal import connect

    plan, run_id = big_plan(), f"large-{uuid.uuid4().hex[:8]}"
    with bulk_tool() as tool:
        local = await client(tool, OrchestratorConfig(synthesis_enabled=False,
                                                      store_url="memory://")
                             ).arun("collect the parts", plan=plan, run_id=run_id)
        local_requests = sorted(tool.requests)
        tool.requests.clear()
        with deployment(temporal_server, tool, tmp_path,
                        worker_store=f"sqlite:///{tmp_path}/runs.db") as config:
            remote = await asyncio.wait_for(
                client(tool, config).arun("collect the parts", plan=plan, run_id=run_id), 120)
            history = await (await connect(config)).get_workflow_handle(run_id).fetch_history()
            stored = await client(tool, config).aget_run(run_id)
    # every request once on each backend (the side effect too), and the same result
    assert sorted(tool.requests) == local_requests
    assert tool.count("/export") == 1 and tool.count("/chunk") == 14
    assert local.status == remote.status == "partial"
    assert comparable(remote) == comparable(local)
    assert len(remote.steps["report"].output["report"]) == 5 * 1024 * 1024
    assert len(remote.steps["nearly"].output["text"]) == 9600 * 1024
    over = remote.steps["over"].error
    assert over is not None and over.code == "RESPONSE_TOO_LARGE"
    outputs = sum(len(json.dumps(s.output)) for s in remote.steps.values() if s.output)
    assert outputs > 8 * TEMPORAL_PAYLOAD_LIMIT
    # the history holds references: no event near the limit, all of it small
    sizes = [len(e.SerializeToString()) for e in history.events]
    assert max(sizes) < 16 * 1024 and sum(sizes) < 256 * 1024, (max(sizes), sum(sizes))
    assert stored is not None and comparable(stored) == comparable(local)
    print(f"\n{outputs / 1e6:.1f} MB of outputs: history {len(sizes)} events, "
          f"{sum(sizes) / 1024:.0f} KiB, largest event {max(sizes)} bytes")


async def test_a_client_that_does_not_share_the_workers_run_store_gets_a_clear_error(
    temporal_server: TemporalServer, tmp_path: Path,
) -> None:
    pytest.importorskip("temporalio", reason="temporalio is in the temporal extra")
    from orchestration import DagwrightError

    plan = {"steps": [{"id": "report", "tool": "bulk", "capability": "export",
                       "params": {"kb": 5 * 1024}}]}
    # a parameter past the offload threshold: the client keeps it in its own store
    padded = {"steps": [{"id": "part", "tool": "bulk", "capability": "chunk",
                         "params": {"n": 1, "kb": 1, "note": "x" * 200_000}}]}
    with bulk_tool() as tool, deployment(temporal_server, tool, tmp_path,
                                         worker_store=f"sqlite:///{tmp_path}/workers.db") as config:
        elsewhere = config.model_copy(update={"store_url": f"sqlite:///{tmp_path}/client.db",
                                              "run_timeout_s": 3.0,
                                              "temporal_workflow_task_timeout_s": 1.0})
        with pytest.raises(DagwrightError) as caught:
            await asyncio.wait_for(client(tool, elsewhere).arun(
                "export the report", plan=plan, run_id=f"apart-{uuid.uuid4().hex[:8]}"), 60)
        stuck = await asyncio.wait_for(client(tool, elsewhere).arun(
            "read a part", plan=padded, run_id=f"apart-{uuid.uuid4().hex[:8]}"), 60)
    message = str(caught.value)
    print(f"\n{type(caught.value).__name__}: {message}\n{stuck.error}")
    assert "ORCH_STORE_URL" in message and "client.db" in message
    assert "may have finished" in message and "dagwright runs show apart-" in message
    assert tool.count("/export") == 1
    assert stuck.status == "failed" and stuck.error is not None
    assert stuck.error.startswith("WORKFLOW_STUCK") and "workers.db does not hold it" in stuck.error
    assert "ORCH_STORE_URL" in stuck.error and tool.count("/chunk") == 0
