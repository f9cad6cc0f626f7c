"""A run this process is executing: read it as it is, follow its events, wait for its end.

:meth:`Orchestrator.astart` and :meth:`Orchestrator.astart_resume` return a
:class:`RunHandle` as soon as the run is recorded and held by this process, and the run
goes on in the background; :meth:`Orchestrator.active_run` finds the handle of any run
this orchestrator is executing (whoever started it). A service that runs dagwright on
behalf of callers (``dagwright serve``) is built on these: it answers at once, shows a
run while it goes, streams its events, and stops it.

Stopping comes in two kinds that end differently: :meth:`Orchestrator.acancel` ends the
run ``cancelled`` for good; :meth:`RunHandle.interrupt` stops executing it here as a
shutdown would, leaving it ``running`` in the store for a resume to continue.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

from orchestration._cancellation import Cancellation
from orchestration._events import EventSink
from orchestration.events import RunEvent
from orchestration.result import RunResult
from orchestration.state import RunState

__all__ = ["RunHandle"]


class RunHandle:
    """One execution of a run in this process (a resume is a new execution).

    ``run_id`` and ``query`` name the run. A handle made for a run that needed no
    execution (a finished run id, a run that keeps waiting for approval) is done from
    the start, with the stored result.
    """

    def __init__(self, run_id: str, query: str, *, state: RunState | None = None,
                 sink: EventSink | None = None, cancellation: Cancellation | None = None,
                 result: RunResult | None = None) -> None:
        self.run_id = run_id
        self.query = query
        self._state = state
        self._sink = sink
        self._cancellation = cancellation or Cancellation()
        self._done: asyncio.Future[RunResult] = asyncio.get_running_loop().create_future()
        self._done.add_done_callback(_retrieve)
        self._work: asyncio.Task[None] | None = None
        self._owner: asyncio.Task[RunResult] | None = None
        if result is not None:
            self._done.set_result(result)

    @classmethod
    def finished(cls, result: RunResult) -> RunHandle:
        """A handle for a run that did not need executing: done, with ``result``."""
        return cls(result.run_id, result.query, result=result)

    # --- reading ---------------------------------------------------------------------
    def done(self) -> bool:
        """Whether this execution has ended (finished, paused, cancelled, or stopped)."""
        return self._done.done()

    async def result(self) -> RunResult:
        """The result when this execution ends; raises what the run raised (a
        :class:`~orchestration.errors.StoreError`, or ``CancelledError`` when it was
        interrupted). Waiting does not hold the run: cancelling the waiter leaves it be."""
        return await asyncio.shield(self._done)

    def current(self) -> RunResult:
        """The run as it is now: the steps finished so far, fresher than the store
        (whose writes are batched)."""
        if self._done.done() and not self._done.cancelled() and self._done.exception() is None:
            return self._done.result()
        assert self._state is not None
        return self._state.to_result()

    async def events(self) -> AsyncIterator[RunEvent]:
        """Every event of this execution, those already emitted first, then live ones
        until it ends (events of earlier executions are in the store:
        :meth:`Orchestrator.aget_events`)."""
        if self._sink is None:
            return
        queue = self._sink.queue(replay=True)
        try:
            while (event := await queue.get()) is not None:
                yield event
        finally:
            self._sink.unsubscribe(queue)

    def add_done_callback(self, callback: Callable[[RunHandle], None]) -> None:
        """Call ``callback(handle)`` when this execution ends (at once if it has)."""
        self._done.add_done_callback(lambda _: callback(self))

    # --- stopping --------------------------------------------------------------------
    async def interrupt(self) -> None:
        """Stop executing the run here as a process shutdown would: it stays ``running``
        in the store, its in-flight steps unrecorded, and a resume (here or in another
        process) continues it. For a run started with ``astart`` the background task
        ends; the caller of a plain ``arun`` gets ``CancelledError``."""
        target = self._owner if self._owner is not None else self._work
        if target is None or self.done():
            return
        target.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.shield(self._done)

    # --- for the orchestrator --------------------------------------------------------
    def _attach(self, work: asyncio.Task[None]) -> None:
        self._work = work

    def _request_cancel(self, reason: str) -> None:
        """Mark the cancellation deliberate (the run ends ``cancelled``), then cancel."""
        if self._cancellation.reason is None:
            self._cancellation.reason = reason
        if self._work is not None and not self._work.done():
            self._work.cancel()

    def _finish(self, outcome: RunResult | BaseException) -> None:
        if self._done.done():
            return
        if isinstance(outcome, RunResult):
            self._done.set_result(outcome)
        elif isinstance(outcome, asyncio.CancelledError):
            self._done.cancel()
        else:
            self._done.set_exception(outcome)


def _retrieve(future: asyncio.Future[RunResult]) -> None:
    """Mark an execution's exception as seen: the caller of ``arun`` got it already, and a
    background run's failure is logged by the engine, not as 'never retrieved'."""
    if not future.cancelled():
        future.exception()
