"""A dagwright worker in the test process, on a real Temporal dev server (127.0.0.1).

Each test gets a task queue of its own, so runs of different tests never meet; the
worker runs the Python tools of :mod:`tests.support.temporal_runs` and its scripted LLM.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from prometheus_client import CollectorRegistry

from orchestration import OrchestratorConfig, ScriptedLLM
from orchestration.store import MemoryStore
from tests.support import temporal_runs
from tests.support.temporal import TemporalServer


@dataclass
class RunningWorker:
    config: OrchestratorConfig
    """What a client of this worker runs with (backend temporal, its task queue)."""
    store: MemoryStore
    """The store the worker records runs in (share it with a client to read them)."""
    llm: ScriptedLLM


@pytest.fixture
async def temporal_worker(temporal_server: TemporalServer) -> AsyncIterator[RunningWorker]:
    pytest.importorskip("temporalio", reason="temporalio is in the temporal extra "
                        "(pip install -e '.[dev]')")
    from orchestration.temporal import DagwrightWorker, connect

    temporal_runs.reset()
    config = temporal_runs.engine_config(
        backend="temporal", temporal_address=temporal_server.address,
        temporal_namespace=temporal_server.namespace,
        temporal_task_queue=f"dagwright-test-{uuid.uuid4().hex[:10]}",
        temporal_event_poll_s=0.05)
    store, llm = MemoryStore(), ScriptedLLM(temporal_runs.answer)
    client = await connect(config)
    async with DagwrightWorker(client, temporal_runs.build_catalog(), config=config, llm=llm,
                               store=store, identity="test-worker",
                               registry=CollectorRegistry()):
        yield RunningWorker(config, store, llm)
