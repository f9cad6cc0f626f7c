"""Time as a dependency: the engine sleeps and reads time only through a :class:`Clock`.

Tests and benchmarks inject :class:`ManualClock` so backoff and ``Retry-After`` waits are
asserted exactly without waiting for them; the Temporal backend injects a clock whose
wall time is the workflow's (a replayed workflow must see the times it saw first).
"""

from __future__ import annotations

import asyncio
import time
from contextlib import AbstractAsyncContextManager

from orchestration._deadlines import watchdog

__all__ = ["Clock", "ManualClock"]


class Clock:
    """Real time: ``time.monotonic``, ``time.time`` and ``asyncio.sleep``."""

    def now(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        """Wall-clock time (Unix seconds): what timestamps in a run's records say."""
        return time.time()

    async def sleep(self, seconds: float) -> None:
        if seconds > 0:
            await asyncio.sleep(seconds)

    def deadline(self, when: float) -> AbstractAsyncContextManager[object]:
        """``async with`` scope that raises :class:`TimeoutError` at event-loop time
        ``when``, as ``asyncio.timeout_at`` does; one timer per event loop serves every
        scope (see :mod:`orchestration._deadlines`)."""
        return watchdog().deadline(when)


class ManualClock(Clock):
    """A clock whose sleeps return at once and advance virtual time; records every sleep."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self.sleeps: list[float] = []

    def now(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self._now += max(0.0, seconds)
        await asyncio.sleep(0)

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` of virtual time pass without a sleep (what waits for time —
        a circuit breaker's cool-down — sees it passed)."""
        self._now += max(0.0, seconds)
