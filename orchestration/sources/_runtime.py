"""The catalog's background event loop: where source sessions, pools and refresh timers live.

An MCP session (anyio task groups, a child process or a streaming HTTP exchange) belongs
to the event loop, and to the task, that opened it. dagwright is called from many loops:
each sync ``Orchestrator.run()`` is an ``asyncio.run`` of its own, a service may run
several threads with a loop each. Rather than reopening sessions per caller loop (an MCP
server spawned again for every ``run()``), every source does its I/O on one loop that
the catalog owns, in a daemon thread; callers hand coroutines over with
``run_coroutine_threadsafe`` and await the result from their own loop. A session is then
opened once, used from any loop or thread, and closed by ``Catalog.aclose()``/``close()``.

The thread starts on first use and again after a close, so a closed catalog still works
(its sources reopen on demand).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, TypeVar

from orchestration.sources import Source, SourceListing

T = TypeVar("T")
log = logging.getLogger("dagwright.sources")

CLOSE_TIMEOUT_S = 5.0
"""How long closing one source may take before it is abandoned (closing never hangs)."""


class SourceClosed(Exception):
    """The source runtime was closed while a call was waiting for it."""


class SourceRuntime:
    """One background event loop in a daemon thread, started on demand."""

    def __init__(self, name: str = "dagwright-sources") -> None:
        self._name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._refreshers: dict[str, concurrent.futures.Future[None]] = {}

    # --- the loop ---------------------------------------------------------------------
    def loop(self) -> asyncio.AbstractEventLoop:
        """The running background loop (started now if it is not running)."""
        with self._lock:
            if self._loop is None or self._thread is None or not self._thread.is_alive():
                loop = asyncio.new_event_loop()
                started = threading.Event()

                def main() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(started.set)
                    loop.run_forever()

                thread = threading.Thread(target=main, name=self._name, daemon=True)
                thread.start()
                started.wait()
                self._loop, self._thread = loop, thread
            return self._loop

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def in_runtime(self) -> bool:
        """True when called from the background loop's own thread."""
        return self._thread is not None and threading.current_thread() is self._thread

    def run_sync(self, coro: Coroutine[Any, Any, T], timeout_s: float) -> T:
        """Run ``coro`` on the background loop and wait for it (blocks the calling thread).

        Used while a catalog is being built, which is synchronous; raises ``TimeoutError``
        after ``timeout_s`` (the coroutine is cancelled).
        """
        if self.in_runtime():
            coro.close()
            raise RuntimeError("run_sync() called from the source runtime's own thread")
        future = asyncio.run_coroutine_threadsafe(coro, self.loop())
        try:
            return future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"no answer within {timeout_s:g}s") from None
        except concurrent.futures.CancelledError:
            raise SourceClosed("the source runtime was closed during the call") from None

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` on the background loop from any loop.

        Cancelling the caller cancels ``coro``. If the runtime is closed underneath the
        call, :class:`SourceClosed` is raised rather than a ``CancelledError`` that the
        caller would take for its own cancellation.
        """
        loop = self.loop()
        if asyncio.get_running_loop() is loop:
            return await coro
        future = asyncio.run_coroutine_threadsafe(coro, loop)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if future.cancelled() and (task is None or task.cancelling() == 0):
                raise SourceClosed("the source runtime was closed during the call") from None
            raise

    # --- refreshing -------------------------------------------------------------------
    def start_refresh(self, source: Source, apply: Callable[[str, SourceListing], bool]) -> None:
        """List ``source`` again every ``source.refresh_s`` and hand the listing to ``apply``.

        ``apply`` returns False when its catalog is gone, which ends the timer. A failed
        listing keeps the previous capabilities and is logged.
        """
        if not source.refresh_s or source.label in self._refreshers:
            return
        interval = float(source.refresh_s)

        async def refresh_forever() -> None:
            while True:
                await asyncio.sleep(interval)
                try:
                    listing = await source.load()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    log.warning("refreshing %s failed, keeping its previous capabilities: %s",
                                source.label, exc)
                    continue
                if not apply(source.label, listing):
                    return

        self._refreshers[source.label] = asyncio.run_coroutine_threadsafe(
            refresh_forever(), self.loop())

    def refreshing(self, label: str) -> bool:
        future = self._refreshers.get(label)
        return future is not None and not future.done()

    # --- closing ----------------------------------------------------------------------
    async def _close_all(self, sources: Iterable[Source], timeout_s: float) -> None:
        for future in self._refreshers.values():
            future.cancel()
        self._refreshers.clear()
        for source in sources:
            task = asyncio.ensure_future(source.aclose())
            done, _ = await asyncio.wait({task}, timeout=timeout_s)
            if not done:
                task.cancel()
                log.warning("closing %s took longer than %gs; abandoned", source.label, timeout_s)
            elif task.exception() is not None:
                log.warning("closing %s failed: %s", source.label, task.exception())
        current = asyncio.current_task()
        leftovers = [t for t in asyncio.all_tasks() if t is not current]
        for task in leftovers:
            task.cancel()
        if leftovers:
            await asyncio.wait(leftovers, timeout=1.0)

    def _stop_thread(self, timeout_s: float) -> None:
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout_s)
        if not thread.is_alive():
            loop.close()

    def close(self, sources: Iterable[Source], timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        """Close ``sources`` on the background loop, then stop it. Bounded in time."""
        if not self.running:
            return
        sources = list(sources)
        future = asyncio.run_coroutine_threadsafe(self._close_all(sources, timeout_s), self.loop())
        try:
            future.result(timeout_s * (len(sources) + 1) + 2)
        except (concurrent.futures.TimeoutError, concurrent.futures.CancelledError):
            log.warning("closing the catalog's sources did not finish in time; stopping anyway")
        self._stop_thread(2.0)

    async def aclose(self, sources: Iterable[Source], timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        """:meth:`close` for async code: the waiting happens in a worker thread."""
        if self.running:
            await asyncio.to_thread(self.close, list(sources), timeout_s)
