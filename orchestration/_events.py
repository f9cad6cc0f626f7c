"""Where a run's events go: the caller's callback, a stream's queue, and the run store.

One :class:`EventSink` per run numbers the events and hands each, in order, to every
consumer. A consumer that raises never breaks the run: the first failure is logged and
that consumer gets nothing more. An async callback is awaited by a consumer task of its
own, so a slow consumer delays neither the run nor the other consumers.

The sink also keeps the events of its execution, so a reader that arrives while the run
is going (``RunHandle.events()``, the server's event stream) gets every event of this
execution even when the store has not been written yet (writes are batched).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from orchestration.clock import Clock
from orchestration.events import EventType, RunEvent
from orchestration.store._base import SaveEvent

if TYPE_CHECKING:
    from orchestration.state import RunState
    from orchestration.store._recorder import RunRecorder

__all__ = ["EventCallback", "EventSink"]

log = logging.getLogger("dagwright.events")

EventCallback = Callable[[RunEvent], Awaitable[None] | None]


class EventSink:
    """Numbers a run's events and delivers them to its consumers, in order."""

    def __init__(self, run: RunState, recorder: RunRecorder | None = None,
                 clock: Clock | None = None) -> None:
        self.run = run
        self.recorder = recorder
        self.clock = clock or Clock()
        self._callbacks: list[EventCallback] = []
        self._queues: list[asyncio.Queue[RunEvent | None]] = []
        self._tasks: list[asyncio.Future[Any]] = []
        self._broken: set[int] = set()
        self._history: list[SaveEvent] = []
        self._closed = False

    def subscribe(self, callback: EventCallback) -> None:
        """Call ``callback(event)`` for every event from now on (sync, or async: awaited
        in order on a consumer task of its own)."""
        if inspect.iscoroutinefunction(callback):
            queue: asyncio.Queue[RunEvent | None] = asyncio.Queue()
            self._tasks.append(asyncio.get_running_loop().create_task(
                self._consume(callback, queue), name=f"dagwright-events-{self.run.run_id}"))
            self._queues.append(queue)
        else:
            self._callbacks.append(callback)

    def queue(self, *, replay: bool = False) -> asyncio.Queue[RunEvent | None]:
        """A queue that receives every event from now on, and None when the run ends.

        With ``replay`` it first holds the events this execution emitted before (and None
        at once if it has ended)."""
        queue: asyncio.Queue[RunEvent | None] = asyncio.Queue()
        if replay:
            for record in self._history:
                queue.put_nowait(record.to_event())
            if self._closed:
                queue.put_nowait(None)
                return queue
        self._queues.append(queue)
        return queue

    @property
    def watched(self) -> bool:
        """Someone follows the run live (a callback or a queue): worth streaming to."""
        return bool(self._callbacks or self._queues)

    def unsubscribe(self, queue: asyncio.Queue[RunEvent | None]) -> None:
        """Stop feeding ``queue`` (a reader that left)."""
        if queue in self._queues:
            self._queues.remove(queue)

    def emit(self, type: EventType, **data: Any) -> None:
        """Record one event and hand it to every consumer.

        The event is kept as a plain record (:class:`SaveEvent`, what the store writes);
        the :class:`RunEvent` model is built only when someone follows the run live or
        reads its history — on the happy path of an unwatched run, three records per step
        and no model.
        """
        run = self.run
        run.event_seq += 1
        record = SaveEvent(run.run_id, run.event_seq, type, self.clock.time(), data, run.context)
        if self.recorder is not None:
            self.recorder.save_event(record)
        self._history.append(record)
        if not (self._callbacks or self._queues):
            return
        event = record.to_event()
        for index, callback in enumerate(self._callbacks):
            if index in self._broken:
                continue
            try:
                result = callback(event)
                if inspect.isawaitable(result):  # a sync function returning an awaitable
                    self._tasks.append(asyncio.ensure_future(result))
            except Exception:
                self._broken.add(index)
                log.exception("run %s: the on_event callback raised; it gets no more events "
                              "(the run goes on)", run.run_id)
        for queue in self._queues:
            queue.put_nowait(event)

    def answer_delta(self, text: str) -> None:
        """A piece of the answer as the model streams it (``answer_delta``)."""
        self.emit("answer_delta", text=text)

    async def close(self) -> None:
        """The run is over: end the streams and let async callbacks drain."""
        self._closed = True
        for queue in self._queues:
            queue.put_nowait(None)
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _consume(self, callback: Callable[[RunEvent], Awaitable[None]],
                       queue: asyncio.Queue[RunEvent | None]) -> None:
        broken = False
        while (event := await queue.get()) is not None:
            if broken:
                continue  # drain, so the queue does not grow for the rest of the run
            try:
                await callback(event)
            except Exception:
                broken = True
                log.exception("run %s: the on_event callback raised; it gets no more events "
                              "(the run goes on)", self.run.run_id)
