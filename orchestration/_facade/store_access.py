"""The facade's run store: connected once however many runs start at the same time,
its retention started with it, and what the facade writes outside an execution (a
decision, an expiry, a cancellation of a stopped run)."""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import TypeVar

from orchestration._facade.parts import FacadeParts
from orchestration.errors import RunNotFound, StoreError
from orchestration.state import RunState
from orchestration.store import StoredRun
from orchestration.store._recorder import RunChanged, RunRecorder

log = logging.getLogger("dagwright.run")
T = TypeVar("T")

_READS = 3
"""How many times a run is read again when another process changed it before this one
could take it over (:meth:`RunStoreAccess.as_read`)."""


class RunStoreAccess:
    """``parts.store``, opened on first use and closed with the event loop's resources."""

    def __init__(self, parts: FacadeParts) -> None:
        self._parts = parts
        self._opened = False
        self._opening: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, asyncio.Lock] = weakref.WeakKeyDictionary()
        self._retention: asyncio.Task[None] | None = None

    async def open(self) -> None:
        """Connect the run store once (creating its tables), and start its retention.
        Concurrent first runs wait for the one that opens it."""
        if self._opened:
            return
        loop = asyncio.get_running_loop()
        lock = self._opening.get(loop)
        if lock is None:
            lock = self._opening[loop] = asyncio.Lock()
        async with lock:
            if self._opened:
                return
            await self._parts.store.open()
            self._opened = True
        days = self._parts.config.store_retention_days
        if days is not None:
            self._retention = asyncio.get_running_loop().create_task(
                self._apply_retention(time.time() - days * 86400))

    async def _apply_retention(self, cutoff: float) -> None:
        """Delete runs that finished before ``cutoff``, off the runs' path."""
        try:
            deleted = await self._parts.store.delete_finished_before(cutoff)
        except StoreError as exc:
            log.warning("run store retention failed: %s", exc)
        else:
            if deleted:
                log.info("run store retention deleted %d finished run(s)", deleted)

    async def close(self) -> None:
        """Close the store's connection for the current loop, once the retention that
        runs on it has ended (or had five seconds)."""
        if self._retention is not None and not self._retention.done():
            await asyncio.wait([self._retention], timeout=5)
        await self._parts.store.close()

    def recorder(self, run_id: str) -> RunRecorder:
        """A recorder of ``run_id`` into the store, with the configured lease."""
        return RunRecorder(self._parts.store, run_id, lease_s=self._parts.config.store_lease_s)

    async def save(self, run: RunState) -> None:
        """Write a run changed outside an execution (a decision, an expiry) to the store."""
        recorder = self.recorder(run.run_id)
        for step in run.steps.values():
            recorder.save_step(step)
        await recorder.finish(run)

    def not_found(self, run_id: str) -> RunNotFound:
        """The refusal to resume or decide a run the store does not have, in words that
        say what it may mean for the calls the run made."""
        return RunNotFound(
            f"no run {run_id!r} in the run store {self._parts.store.url}, so it cannot be resumed. "
            "If it was started against this store, the store lost it (a database removed, "
            "replaced or restored from an older copy): the calls it made may have happened, "
            "so check with the tools before starting it again. 'dagwright runs list' shows "
            "the runs the store holds.")

    async def as_read(self, run_id: str,
                      act: Callable[[StoredRun | None], Awaitable[T]]) -> T:
        """``act`` on the run as the store has it (None: it has no such run), read again
        when it changed before ``act`` could take it over (:class:`RunChanged`: another
        process resumed, decided or finished it meanwhile). Acting on the older reading
        would repeat what that process did — its payment among it."""
        changed: RunChanged | None = None
        for _ in range(_READS):
            try:
                return await act(await self._parts.store.load(run_id))
            except RunChanged as exc:
                changed = exc
        assert changed is not None
        raise changed  # (a RunLeased) another process keeps changing it
