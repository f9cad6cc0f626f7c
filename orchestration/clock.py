"""Time as a dependency: the engine sleeps and reads time only through a :class:`Clock`.

Tests and benchmarks inject :class:`ManualClock` so backoff and ``Retry-After`` waits are
asserted exactly without waiting for them; the Temporal backend injects a clock whose
wall time is the workflow's (a replayed workflow must see the times it saw first).
"""

from __future__ import annotations

import asyncio
import time

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
