"""The call ledger on the run stores a deployment uses: whoever claims an attempt first —
the worker about to send, or the run that gave up on it — holds it; an answer recorded
is what the run reads back when it settles the call; two processes on one SQLite file
see each other's claims."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

pytest.importorskip("temporalio", reason="temporalio is in the temporal extra")

from orchestration.store import RunStore, open_store
from orchestration.temporal._call_ledger import CallLedger, CallSlot, Settled


def store_url(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if kind == "postgres":
        server = request.getfixturevalue("postgres_server")
        return str(server.create_database(f"ledger_{uuid.uuid4().hex[:10]}"))
    return "memory://" if kind == "memory" else f"sqlite:///{tmp_path / 'runs.db'}"


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgres"])
async def test_the_first_claim_holds_and_a_recorded_answer_is_read_back(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest,
) -> None:
    store: RunStore = open_store(store_url(kind, tmp_path, request))
    await store.open()
    ledger = CallLedger(store)
    sent = CallSlot("r1", "wf-run-1", "7")
    answer = {"data": {"paid": 250.0}, "error": None, "latency_s": 0.1}

    # a worker claims the attempt, sends, and keeps the answer
    assert await ledger.claim(sent, "worker-a") is None
    assert await ledger.claim(sent, "worker-a") is None  # its own claim again: still its
    await ledger.record(sent, answer)
    # the run gave up on the activity meanwhile: the answer is there, and who sent it
    assert await ledger.settle(sent) == Settled(answer, "worker-a")
    assert await ledger.claim(sent, "worker-b") == "sent by worker-a"  # never twice

    # an attempt the run settles before any worker claimed it is fenced: a late claim
    # is refused, and says why
    late = CallSlot("r1", "wf-run-1", "8")
    assert await ledger.settle(late) == Settled(None, None)
    assert await ledger.claim(late, "worker-a") == "fenced by the run"
    assert await ledger.settle(late) == Settled(None, None)

    # another Temporal run of the same id, or another run: other slots
    assert await ledger.claim(CallSlot("r1", "wf-run-2", "7"), "worker-b") is None
    assert await ledger.claim(CallSlot("r2", "wf-run-1", "7"), "worker-b") is None
    await store.close()


async def test_two_stores_on_one_sqlite_file_share_the_fence(tmp_path: Path) -> None:
    """Two workers on one machine (one SQLite file): the run's fence, written through one,
    stops the claim made through the other."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    run_side, worker_side = open_store(url), open_store(url)
    await run_side.open()
    await worker_side.open()
    slot = CallSlot("r1", "wf", "3")
    assert await CallLedger(run_side).settle(slot) == Settled(None, None)
    assert await CallLedger(worker_side).claim(slot, "worker-a") == "fenced by the run"
    await run_side.close()
    await worker_side.close()
