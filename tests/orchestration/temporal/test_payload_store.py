"""The claim-check driver on the run stores a deployment uses: a payload written for a run
comes back byte for byte, a repeat is kept once, a reference the reader's store does not
hold is a :class:`PayloadMissing` naming the store, and retention deletes a finished
run's payloads with it."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

pytest.importorskip("temporalio", reason="temporalio is in the temporal extra")

from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
    StorageDriverWorkflowInfo,
)

from orchestration.state import RunState
from orchestration.store import RunStore, open_store
from orchestration.store._recorder import snapshot
from orchestration.temporal._payload_store import PayloadMissing, RunStoreDriver


def payload(text: str) -> Payload:
    return Payload(metadata={"encoding": b"json/plain"}, data=text.encode())


def context(run_id: str) -> StorageDriverStoreContext:
    return StorageDriverStoreContext(
        target=StorageDriverWorkflowInfo(namespace="default", id=run_id))


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgres"])
async def test_payloads_round_trip_per_run_and_go_with_their_run(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest,
) -> None:
    if kind == "postgres":
        server = request.getfixturevalue("postgres_server")
        url = str(server.create_database(f"payloads_{uuid.uuid4().hex[:10]}"))
    else:
        url = "memory://" if kind == "memory" else f"sqlite:///{tmp_path / 'runs.db'}"
    store: RunStore = open_store(url)
    driver = RunStoreDriver(store)
    big = payload("x" * 300_000)
    claims = await driver.store(context("r1"), [big, payload("small"), big])
    assert claims[0] == claims[2] and claims[0].claim_data["run"] == "r1"
    back = await driver.retrieve(StorageDriverRetrieveContext(), claims)
    assert back == [big, payload("small"), big]

    other = RunStoreDriver(open_store("memory://"))  # a client on another store
    with pytest.raises(PayloadMissing, match=r"does not hold it.*same\s+ORCH_STORE_URL"):
        await other.retrieve(StorageDriverRetrieveContext(), claims[:1])

    # retention deletes a finished run's payloads with it
    state = RunState(run_id="r1", query="q", started_at=time.time() - 100)
    state.status, state.finished_at = "succeeded", time.time() - 50
    record = snapshot(state)
    await store.create_run(record, owner="t", lease_s=1)
    await store.write([record])
    assert await store.delete_finished_before(time.time()) == 1
    with pytest.raises(PayloadMissing):
        await driver.retrieve(StorageDriverRetrieveContext(), claims[:1])
    await store.close()
