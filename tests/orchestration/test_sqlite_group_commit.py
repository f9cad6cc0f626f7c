"""The SQLite store's writes, committed together from one writer thread
(orchestration/store/_sqlite_writer.py): each write keeps its own outcome."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from orchestration.errors import LeaseLost, StoreError
from orchestration.state import RunState
from orchestration.store import open_store
from orchestration.store._base import CallMarker, CallStarted, Lease, SaveEvent
from orchestration.store._recorder import snapshot


async def test_writes_of_many_runs_commit_and_a_lost_lease_fails_alone(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/runs.db")
    await store.open()
    try:
        leases = []
        for number in range(40):
            lease = await store.create_run(snapshot(RunState(run_id=f"r{number}", query="q")),
                                           owner="me", lease_s=30)
            assert lease is not None
            leases.append(lease)
        stale = Lease("r0", "me", generation=7)  # a holder that lost the run
        marker = CallMarker("pay", 1, "plan", {"amount": 1}, None, 0.0)
        outcomes = await asyncio.gather(
            *(store.write([SaveEvent(lease.run_id, 1, "plan_ready", 0.0, {"n": n})],
                          lease=lease, lease_s=30) for n, lease in enumerate(leases)),
            store.write([SaveEvent("r0", 2, "plan_ready", 0.0, {"stale": True})],
                        lease=stale, lease_s=30),
            # a second marker for the same call in flight: refused, alone
            store.write([CallStarted("r1", marker)], lease=leases[1], lease_s=30,
                        durable=True),
            store.write([CallStarted("r1", marker)], lease=leases[1], lease_s=30,
                        durable=True),
            return_exceptions=True)
        assert outcomes[:40] == [None] * 40
        assert isinstance(outcomes[40], LeaseLost)
        marks = outcomes[41:]
        assert sorted(type(o).__name__ for o in marks) == ["NoneType", "StoreError"]
        assert any(isinstance(o, StoreError) and "marker is open" in str(o) for o in marks)
        for number in range(40):
            events = await store.load_events(f"r{number}")
            assert [e.data for e in events] == [{"n": number}]  # the stale write left nothing
        stored = await store.load("r1")
        assert stored is not None and [m.step_id for m in stored.open_calls] == ["pay"]
    finally:
        await store.close()


async def test_a_store_whose_file_was_removed_fails_every_write(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/runs.db")
    await store.open()
    try:
        lease = await store.create_run(snapshot(RunState(run_id="r", query="q")), owner="me",
                                       lease_s=30)
        (tmp_path / "runs.db").unlink()
        with pytest.raises(StoreError, match="is gone"):
            await store.write([SaveEvent("r", 1, "plan_ready", 0.0, {})], lease=lease,
                              lease_s=30)
    finally:
        await store.close()


def test_writes_from_one_loop_go_through_while_another_closes_the_store(tmp_path: Path) -> None:
    # the sync API closes the store at the end of each call's event loop, while runs of
    # another thread keep writing: no write is lost or left waiting
    import threading

    store = open_store(f"sqlite:///{tmp_path}/runs.db")

    async def setup() -> Lease:
        await store.open()
        lease = await store.create_run(snapshot(RunState(run_id="r", query="q")), owner="me",
                                       lease_s=300)
        assert lease is not None
        return lease

    lease = asyncio.run(setup())

    async def writes() -> None:
        for seq in range(1, 201):
            await asyncio.wait_for(store.write(
                [SaveEvent("r", seq, "plan_ready", 0.0, {})], lease=lease, lease_s=300), 10)

    async def closes() -> None:
        for _ in range(200):
            await store.close()
            await asyncio.sleep(0)

    closer = threading.Thread(target=lambda: asyncio.run(closes()))
    closer.start()
    asyncio.run(writes())
    closer.join(30)
    assert not closer.is_alive()

    async def check() -> None:
        assert [e.seq for e in await store.load_events("r")] == list(range(1, 201))
        await store.close()

    asyncio.run(check())
