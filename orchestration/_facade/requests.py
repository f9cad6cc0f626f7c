"""Requests from other processes about the runs this one executes.

Several processes may share a run store (``dagwright serve --workers N``, replicas of a
service). A cancel asked of one of them for a run another one executes is written to
the store as a request (:mod:`orchestration.store._requests`); the process that executes
the run must notice it and stop the run. :class:`RequestWatch` does that: while this
orchestrator executes runs on an event loop, one task per loop looks for cancel requests
— woken by the store's notifications on PostgreSQL, at least every
:data:`CANCEL_POLL_S` on SQLite — and cancels the runs they name exactly as a local
:meth:`~orchestration.Orchestrator.acancel` does. It stops when no run executes, so an
idle orchestrator reads nothing; an in-memory store, which no other process can share,
is never watched.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from orchestration.errors import StoreError
from orchestration.handle import RunHandle
from orchestration.store import MemoryStore, RunStore
from orchestration.store._feed import CHANNEL_REQUESTS, feed_of

__all__ = ["CANCEL_POLL_S", "RequestWatch"]

log = logging.getLogger("dagwright.run")

CANCEL_POLL_S = 0.5
"""How often a process executing runs on a store without notifications (SQLite) looks
for cancel requests: a cancel made in another process stops the run within about this."""


class RequestWatch:
    """Acts on cancel requests for the runs in ``active`` (see the module)."""

    def __init__(self, store: Callable[[], RunStore], active: dict[str, RunHandle]) -> None:
        self._store = store
        self._active = active
        self._tasks: dict[asyncio.AbstractEventLoop, asyncio.Task[None]] = {}
        self._acted: set[str] = set()

    def ensure(self) -> None:
        """A run started executing on this loop: make sure someone watches."""
        if isinstance(self._store(), MemoryStore):
            return
        loop = asyncio.get_running_loop()
        task = self._tasks.get(loop)
        if task is None or task.done():
            self._tasks[loop] = loop.create_task(self._watch(loop), name="dagwright-requests")

    async def _watch(self, loop: asyncio.AbstractEventLoop) -> None:
        store = self._store()
        feed = feed_of(store)
        try:
            while self._here(loop):
                await feed.wait(CHANNEL_REQUESTS, None, CANCEL_POLL_S)
                try:
                    requests = await store.list_requests(kind="cancel")
                except StoreError as exc:
                    log.warning("could not read cancel requests: %s", exc)
                    continue
                for request in requests:
                    handle = self._active.get(request.run_id)
                    if handle is None or handle.done() or handle._done.get_loop() is not loop:
                        continue
                    reason = str((request.payload or {}).get("reason") or "cancelled on request")
                    log.info("run %s: cancelled by a request from another process",
                             request.run_id)
                    handle._request_cancel(reason)
                    if request.run_id not in self._acted:
                        self._acted.add(request.run_id)
                        handle.add_done_callback(self._done)
        finally:
            if self._tasks.get(loop) is asyncio.current_task():
                del self._tasks[loop]

    def _here(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Whether a run executes on ``loop`` (only its runs are this task's to stop)."""
        return any(not h.done() and h._done.get_loop() is loop for h in self._active.values())

    def _done(self, handle: RunHandle) -> None:
        """The run a request cancelled has ended: the request is answered."""
        self._acted.discard(handle.run_id)
        with contextlib.suppress(RuntimeError):  # the loop is closing
            task = asyncio.get_running_loop().create_task(self._drop(handle.run_id))
            task.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def _drop(self, run_id: str) -> None:
        with contextlib.suppress(StoreError):
            await self._store().drop_requests(run_id, "cancel")
