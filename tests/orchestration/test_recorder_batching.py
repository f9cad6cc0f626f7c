"""The run recorder batches its buffered writes: a burst of writes makes one flush."""

from __future__ import annotations

import asyncio

from orchestration.state import RunState
from orchestration.store import open_store
from orchestration.store._base import SaveEvent
from orchestration.store._recorder import FLUSH_MAX, RunRecorder


def test_a_burst_of_writes_past_a_full_buffer_schedules_one_flush_not_one_per_write() -> None:
    async def main() -> tuple[int, int, int]:
        store = open_store("memory://")
        run = RunState(run_id="burst", query="q")
        recorder = RunRecorder(store, run.run_id, lease_s=30)
        await recorder.begin(run)
        before = len(asyncio.all_tasks())
        for number in range(FLUSH_MAX * 4):  # as many steps finishing in one loop turn
            run.event_seq += 1
            recorder.save_event(SaveEvent(run.run_id, run.event_seq, "step_started", 0.0,
                                          {"n": number}))
        scheduled = len(asyncio.all_tasks()) - before
        await asyncio.sleep(0)  # the immediate flush runs
        await asyncio.sleep(0)
        stored = len(await store.load_events(run.run_id))
        await recorder.finish(run)
        return scheduled, stored, len(await store.load_events(run.run_id))

    scheduled, flushed_at_once, total = asyncio.run(main())
    assert scheduled <= 2  # the delayed flush and one immediate one
    assert flushed_at_once == FLUSH_MAX * 4  # the full buffer went out in one batch
    assert total == FLUSH_MAX * 4


def test_writes_made_while_a_run_finishes_go_with_its_last_flush_not_after_its_release() -> None:
    """A write buffered as the run ends (its last state, among others) must not schedule a
    delayed flush: made after the lease is let go, that flush would find the run no
    longer held and fail as a lost lease. (What holds it now is the cancelled flush task
    that finish() leaves in place — easy to lose in a change of how flushes wait.)"""
    async def main() -> RunRecorder:
        store = open_store("memory://")
        run = RunState(run_id="ending", query="q")
        recorder = RunRecorder(store, run.run_id, lease_s=30)
        await recorder.begin(run)
        run.event_seq += 1
        recorder.save_event(SaveEvent(run.run_id, run.event_seq, "step_started", 0.0, {}))
        await recorder.finish(run)
        await asyncio.sleep(0.2)  # past any delayed flush
        return recorder

    recorder = asyncio.run(main())
    assert recorder.failure is None
