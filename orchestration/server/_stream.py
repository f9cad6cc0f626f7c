"""A run's events as server-sent events: the stored ones first, then live ones.

Each event goes out with ``id:`` = its ``seq``, ``event:`` = its type and ``data:`` = the
event as JSON, so a browser's ``EventSource`` that loses the connection reconnects with
``Last-Event-ID`` and misses nothing.

Where the live events come from:

* the run executes **in this process** — its :class:`~orchestration.RunHandle` replays
  the execution's events and follows it (the store may lag: writes are batched);
* it waits for a person, or **executes elsewhere** (another server on the same store) —
  the store is tailed: read again whenever this server starts or ends an execution of
  the run, when the store announces a change of it (PostgreSQL's LISTEN/NOTIFY), and at
  least every quarter of a second on a store that cannot announce (SQLite).

The stream ends once the run has a final status (succeeded, partial, failed, cancelled)
and every event is out; a run that waits for approval keeps its stream open, so a viewer
sees the run go on after someone approves.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from sse_starlette import JSONServerSentEvent, ServerSentEvent

from orchestration.events import RunEvent
from orchestration.handle import RunHandle
from orchestration.server._runs import RunManager

__all__ = ["FINAL_STATUSES", "RECONNECT_MS", "run_event_stream"]

FINAL_STATUSES = frozenset({"succeeded", "partial", "failed", "cancelled"})
RECONNECT_MS = 2000
"""How long a browser waits before reconnecting a dropped stream."""


def _sse(event: RunEvent) -> ServerSentEvent:
    return JSONServerSentEvent(event.model_dump(mode="json"), event=event.type, id=str(event.seq))


async def _ended(handle: RunHandle) -> None:
    """Wait for an execution's end, whatever it was (its result is not ours to raise)."""
    ended = asyncio.Event()
    handle.add_done_callback(lambda _: ended.set())
    await ended.wait()


async def run_event_stream(manager: RunManager, run_id: str, *,
                           after: int) -> AsyncIterator[ServerSentEvent]:
    """Events of ``run_id`` with ``seq > after``, until the run ends (see the module)."""
    orchestrator = manager.orchestrator
    last = after
    yield ServerSentEvent(comment="dagwright run events", retry=RECONNECT_MS)
    while not manager.closing:
        wake = manager.watch(run_id)
        try:
            handle = orchestrator.active_run(run_id)
            for event in await orchestrator.aget_events(run_id, after=last):
                yield _sse(event)
                last = event.seq
            if handle is not None:
                async for event in handle.events():
                    if event.seq > last:
                        yield _sse(event)
                        last = event.seq
                await _ended(handle)  # its last writes reach the store
                continue
            run = await orchestrator.aget_run(run_id)
            if run is None or run.status in FINAL_STATUSES:
                for event in await orchestrator.aget_events(run_id, after=last):
                    yield _sse(event)
                return
            # waiting for a person, or executing in another process
            await manager.changed(run_id, wake)
        finally:
            manager.unwatch(run_id, wake)
