"""Deadlines for many tasks with one timer: what ``asyncio.timeout_at`` does, cheaper.

Every step of a run, and every call of an in-process tool, is bounded by a deadline.
``asyncio.timeout_at`` gives each its own timer handle, scheduled on entry and cancelled
on exit — most never fire, yet each costs a timer in the loop's heap, its cancellation,
and the loop's periodic clean-up of cancelled timers. A :class:`Watchdog` keeps the
deadlines of one event loop in a heap of its own and arms a single loop timer for the
earliest one. Entering a :meth:`Watchdog.deadline` scope is a heap push; leaving it marks
the entry done. When the timer fires, every task whose deadline has passed is cancelled,
and its scope turns that cancellation into :class:`TimeoutError` exactly as
``asyncio.timeout`` does (a cancellation from anywhere else still propagates as
cancellation: the task's ``cancelling()`` count tells them apart).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import weakref
from types import TracebackType

__all__ = ["DeadlineScope", "Watchdog", "watchdog"]


class DeadlineScope:
    """One deadline: ``with`` or ``async with`` (see :meth:`Watchdog.deadline`)."""

    __slots__ = ("_cancelling", "_task", "_watchdog", "done", "expired", "when")

    def __init__(self, watchdog: Watchdog, when: float) -> None:
        self._watchdog = watchdog
        self.when = when
        self.done = False
        self.expired = False
        self._task: asyncio.Task[object] | None = None
        self._cancelling = 0

    def __enter__(self) -> DeadlineScope:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a deadline scope must be entered inside a task")
        self._task = task
        self._cancelling = task.cancelling()
        self._watchdog._add(self)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.done = True
        if not self.expired:  # an expired scope has left the heap already
            self._watchdog._finished += 1
            # the scope stays in the heap until its time passes or the heap is compacted:
            # it must not keep its task (and all the task's frames hold) alive till then
            self._task = None
        else:
            assert self._task is not None
            if self._task.uncancel() <= self._cancelling and exc_type is asyncio.CancelledError:
                raise TimeoutError from exc

    async def __aenter__(self) -> DeadlineScope:
        return self.__enter__()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)


class Watchdog:
    """The deadlines of one event loop, with one loop timer for the earliest."""

    _COMPACT_AT = 1024

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        # (when, order of entry, scope): compared as tuples in C, earliest first
        self._heap: list[tuple[float, int, DeadlineScope]] = []
        self._entries = itertools.count()
        self._timer: asyncio.TimerHandle | None = None
        self._armed_for = float("inf")
        self._finished = 0  # scopes left but still in the heap

    def deadline(self, when: float) -> DeadlineScope:
        """A scope that cancels the task that entered it at loop time ``when`` and then
        raises :class:`TimeoutError` where the scope ends (like ``asyncio.timeout_at``)."""
        return DeadlineScope(self, when)

    def _add(self, scope: DeadlineScope) -> None:
        heap = self._heap
        if self._finished > self._COMPACT_AT and self._finished * 2 > len(heap):
            heap[:] = [entry for entry in heap if not entry[2].done]
            heapq.heapify(heap)
            self._finished = 0
        heapq.heappush(heap, (scope.when, next(self._entries), scope))
        if scope.when < self._armed_for:
            self._arm(scope.when)

    def _arm(self, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._armed_for = when
        self._timer = self._loop.call_at(when, self._fire)

    def _fire(self) -> None:
        # the loop runs a timer up to its clock resolution early: what the timer was armed
        # for is due, as asyncio.timeout_at would have it
        due = max(self._armed_for, self._loop.time())
        self._timer = None
        self._armed_for = float("inf")
        heap = self._heap
        while heap and (heap[0][2].done or heap[0][0] <= due):
            scope = heapq.heappop(heap)[2]
            if scope.done:
                self._finished -= 1
            elif scope._task is not None and not scope._task.done():
                scope.expired = True
                scope._task.cancel()
        if heap:
            self._arm(heap[0][0])


_WATCHDOGS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Watchdog] = (
    weakref.WeakKeyDictionary())


_last: tuple[asyncio.AbstractEventLoop | None, Watchdog | None] = (None, None)
"""The loop asked about last and its watchdog: nearly every call asks about the same loop,
so the weak mapping is consulted only when the loop changes."""


def watchdog() -> Watchdog:
    """The watchdog of the running event loop (made on first use)."""
    global _last
    loop = asyncio.get_running_loop()
    last_loop, found = _last
    if last_loop is loop and found is not None:
        return found
    found = _WATCHDOGS.get(loop)
    if found is None:
        found = _WATCHDOGS[loop] = Watchdog(loop)
    _last = (loop, found)
    return found
