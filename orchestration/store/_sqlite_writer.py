"""One writer thread per SQLite store, committing the writes of every run together.

A process running many runs at once makes many small writes: each run records itself,
flushes its buffered steps and events, renews its lease, releases it. Made one by one —
a thread hop and a transaction each — they cost more CPU on the event loop than the
runs' own work, and the transactions queue behind SQLite's one writer anyway. Here they
are queued to one thread that takes **everything waiting** and applies it in **one
transaction** (a group commit): under load one commit carries the writes of dozens of
runs, and the thread hands the results back to each event loop in one call.

Each write keeps its own outcome: it runs inside a ``SAVEPOINT`` of the shared
transaction, so a write whose lease fence fails (:class:`~orchestration.errors.LeaseLost`)
or that breaks a rule (a second marker for a call in flight) is rolled back alone while
the others commit. A failure of the transaction itself (a full disk, a file replaced)
fails every write in it, as a failed commit of one write did before. A batch holding a
``durable`` write (a side effect's marker) commits with ``synchronous=FULL``, so that
marker is on disk before the call it guards can leave; the others in the batch simply
get the same care.

The thread spends most of its time inside SQLite, which releases the GIL, so on a
machine with a second core the store's work runs beside the event loop rather than in
its way. Reads do not queue here: WAL mode lets them run on their own connection while
a write is in progress.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from orchestration.errors import StoreError

__all__ = ["SqliteWriter"]

T = TypeVar("T")

MAX_BATCH = 1024
"""Writes in one transaction at most (a batch this large is committed, and the rest
waits for the next)."""


@dataclass(slots=True)
class _Write(Generic[T]):
    work: Callable[[sqlite3.Connection], T]
    durable: bool
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[T]
    outcome: Any = None
    failed: BaseException | None = field(default=None)


_STOP = object()


class SqliteWriter:
    """Applies writes to one SQLite file from a thread of its own (see the module).

    ``connect`` opens a connection (called in the thread, again after a failure);
    ``check`` raises :class:`StoreError` when the file is no longer the one first opened
    (run before every batch); ``url`` names the store in messages.
    """

    def __init__(self, connect: Callable[[], sqlite3.Connection], check: Callable[[], None],
                 url: str) -> None:
        self._connect = connect
        self._check = check
        self._url = url
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._running = False  # a thread serves the queue (changed under _start_lock)
        self._stop_asked = False  # a stop is in the queue (one at most)
        self._start_lock = threading.Lock()

    async def submit(self, work: Callable[[sqlite3.Connection], T], *,
                     durable: bool = False) -> T:
        """Run ``work(connection)`` in the next batch's transaction; its result, or what
        it raised (an ``sqlite3.Error`` as :class:`StoreError`)."""
        loop = asyncio.get_running_loop()
        write: _Write[T] = _Write(work, durable, loop, loop.create_future())
        write.future.add_done_callback(_retrieve)
        with self._start_lock:  # the thread decides to stop under this lock too
            self._queue.put(write)
            if not self._running:
                self._running = True
                self._thread = threading.Thread(target=self._serve, daemon=True,
                                                name="dagwright-sqlite-writer")
                self._thread.start()
        # the write may be committed even if the caller stops waiting for it (it is in
        # a transaction already), exactly as a write made in a thread of the loop's pool
        return await asyncio.shield(write.future)

    async def close(self) -> None:
        """Apply what is queued, stop the thread, close its connection. (A write
        submitted meanwhile, from another event loop, is applied first, or starts the
        thread again.)"""
        with self._start_lock:
            thread = self._thread if self._running else None
            if thread is not None and not self._stop_asked:
                self._stop_asked = True
                self._queue.put(_STOP)
        if thread is not None:
            await asyncio.to_thread(thread.join)

    # --- the thread ----------------------------------------------------------------
    def _serve(self) -> None:
        conn: sqlite3.Connection | None = None  # this thread's own
        try:
            while True:
                first = self._queue.get()
                if first is _STOP:
                    with self._start_lock:
                        if self._queue.empty():
                            self._running = self._stop_asked = False
                            return
                        self._queue.put(_STOP)  # writes came after it: they go first
                    continue
                batch: list[_Write[Any]] = [first]
                while len(batch) < MAX_BATCH:
                    try:
                        item = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if item is _STOP:
                        self._queue.put(_STOP)  # after this batch
                        break
                    batch.append(item)
                conn = self._apply(batch, conn)
                _deliver(batch)
        finally:
            if conn is not None:
                with contextlib.suppress(sqlite3.Error):
                    conn.close()

    def _apply(self, batch: list[_Write[Any]],
               conn: sqlite3.Connection | None) -> sqlite3.Connection | None:
        """One transaction for ``batch``, each write in a savepoint of its own; the
        connection to use next (None after a failure: the next batch reconnects)."""
        durable = any(w.durable for w in batch)
        try:
            if conn is None:
                conn = self._connect()
            else:
                self._check()
            if durable:  # fsync the WAL at this commit, not only at checkpoints
                conn.execute("PRAGMA synchronous=FULL")
            conn.execute("BEGIN IMMEDIATE")
            for write in batch:
                conn.execute("SAVEPOINT dagwright_write")
                try:
                    write.outcome = write.work(conn)
                except (StoreError, sqlite3.Error) as exc:
                    conn.execute("ROLLBACK TO dagwright_write")
                    write.failed = self._error(exc)
                conn.execute("RELEASE dagwright_write")
            conn.execute("COMMIT")
        except (StoreError, sqlite3.Error) as exc:
            if conn is not None and conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            error = self._error(exc)
            for write in batch:
                if write.failed is None:
                    write.failed, write.outcome = error, None
            if not isinstance(exc, StoreError) and conn is not None:
                # a connection that failed is not trusted again: the next batch reconnects
                with contextlib.suppress(sqlite3.Error):
                    conn.close()
                return None
        finally:
            if durable and conn is not None:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("PRAGMA synchronous=NORMAL")
        return conn


    def _error(self, exc: BaseException) -> StoreError:
        if isinstance(exc, StoreError):
            return exc
        error = StoreError(f"run store {self._url}: write failed: {exc}")
        error.__cause__ = exc
        return error


def _deliver(batch: list[_Write[Any]]) -> None:
    """Hand each write's outcome to its event loop: one call per loop per batch."""
    by_loop: dict[asyncio.AbstractEventLoop, list[_Write[Any]]] = {}
    for write in batch:
        by_loop.setdefault(write.loop, []).append(write)
    for loop, writes in by_loop.items():
        with contextlib.suppress(RuntimeError):  # a loop that closed meanwhile
            loop.call_soon_threadsafe(_resolve, writes)


def _resolve(writes: list[_Write[Any]]) -> None:
    for write in writes:
        if write.future.done():
            continue
        if write.failed is not None:
            write.future.set_exception(write.failed)
        else:
            write.future.set_result(write.outcome)


def _retrieve(future: asyncio.Future[Any]) -> None:
    """Mark a write's failure as seen: its caller may have stopped waiting (it was
    cancelled), and the failure is the store's to report through the run, not the
    event loop's."""
    if not future.cancelled():
        future.exception()
