"""Waiting for the run store to change: how a process follows what other processes write.

A process that does not execute a run still has to notice when the run moves on — to
stream its events, to see it end after a cancel — and a process that executes runs has
to notice requests about them (:mod:`orchestration.store._requests`). The store says
so in the way it can:

* **PostgreSQL**: the writes that matter send ``NOTIFY`` in their transaction (channel
  ``dagwright_runs`` when a run's record or events change, ``dagwright_requests`` when a
  request is made; the payload is the run id), and one connection per process and event
  loop ``LISTEN``\\ s and wakes whoever waits. A wait also ends at its timeout, so a
  notification lost while the connection was re-established costs at most one timeout;
* **SQLite** (one machine) and **memory**: nothing to listen to, so a wait is a bounded
  poll: it returns after ``poll_s`` at most and the caller reads the store again.

``wait`` returns True when a notification came, False at the timeout; either way the
caller reads what it needs from the store (a notification only says "look now").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from typing import Any

__all__ = ["CHANNEL_REQUESTS", "CHANNEL_RUNS", "StoreFeed", "feed_of"]

log = logging.getLogger("dagwright.store")

CHANNEL_RUNS = "dagwright_runs"
CHANNEL_REQUESTS = "dagwright_requests"
RECONNECT_S = 1.0
"""How long the listener waits before connecting again after its connection failed."""


class StoreFeed:
    """Waits for changes of one store on one event loop (see the module)."""

    listens = False
    """Whether changes are announced (else every wait lasts its timeout)."""

    async def wait(self, channel: str, key: str | None, timeout: float) -> bool:
        """Until ``key`` (a run id; None: any) changes on ``channel``, or ``timeout``."""
        await asyncio.sleep(timeout)
        return False

    async def close(self) -> None:
        return None


class _Listener(StoreFeed):
    """PostgreSQL: one ``LISTEN`` connection, started on the first wait."""

    listens = True

    def __init__(self, store: Any) -> None:
        self._store = weakref.ref(store)  # the feed is kept by the store, not the reverse
        self._waiters: dict[tuple[str, str | None], set[asyncio.Future[None]]] = {}
        self._task: asyncio.Task[None] | None = None
        self._conn: Any = None

    async def wait(self, channel: str, key: str | None, timeout: float) -> bool:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self._listen(), name="dagwright-store-listener")
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters = self._waiters.setdefault((channel, key), set())
        waiters.add(waiter)
        try:
            await asyncio.wait_for(waiter, timeout)
            return True
        except TimeoutError:
            return False
        finally:
            waiters.discard(waiter)
            if not waiters:
                self._waiters.pop((channel, key), None)

    async def _listen(self) -> None:
        """Receive notifications and wake the waiters; reconnect after a failure."""
        while self._waiters:
            store = self._store()
            if store is None:
                return
            try:
                self._conn = await store.connect_listener()
                for channel in (CHANNEL_RUNS, CHANNEL_REQUESTS):
                    await self._conn.execute(f"LISTEN {channel}")
                async for notice in self._conn.notifies():
                    self._wake(notice.channel, notice.payload)
                    if not self._waiters:
                        break
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a lost connection: waits end at their timeouts
                log.warning("run store %s: listening for changes failed (%s); waits poll "
                            "until it is back", getattr(store, "url", "?"), exc)
                await asyncio.sleep(RECONNECT_S)
            finally:
                conn, self._conn = self._conn, None
                if conn is not None:
                    with contextlib.suppress(Exception):
                        await conn.close()

    def _wake(self, channel: str, key: str) -> None:
        for wanted in ((channel, key), (channel, None)):
            for waiter in self._waiters.get(wanted, ()):
                if not waiter.done():
                    waiter.set_result(None)

    async def close(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


_FEEDS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop,
                                   weakref.WeakKeyDictionary[Any, StoreFeed]] = (
    weakref.WeakKeyDictionary())


def feed_of(store: Any) -> StoreFeed:
    """The feed of ``store`` on the running event loop (made on first use)."""
    loop = asyncio.get_running_loop()
    feeds = _FEEDS.get(loop)
    if feeds is None:
        feeds = _FEEDS[loop] = weakref.WeakKeyDictionary()
    feed = feeds.get(store)
    if feed is None:
        listens = callable(getattr(store, "connect_listener", None))
        feed = feeds[store] = _Listener(store) if listens else StoreFeed()
    return feed
