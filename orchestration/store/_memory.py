"""``memory://``: a run store in this process's memory, for tests and benchmarks.

Nothing survives the process. Runs can still be looked up and resumed within it, which is
what tests of resume logic that need no real database use.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from orchestration.events import RunEvent
from orchestration.result import Attempt, StepResult
from orchestration.state import RunState
from orchestration.store._base import (
    CallFinished,
    CallMarker,
    CallStarted,
    RunSummary,
    SaveAttempt,
    SaveEvent,
    SaveRun,
    SaveStep,
    StoredRun,
    Write,
)

__all__ = ["MemoryStore"]

_FINISHED = frozenset({"succeeded", "partial", "failed", "cancelled"})


@dataclass
class _Run:
    record: SaveRun
    steps: dict[str, StepResult] = field(default_factory=dict)
    attempts: dict[tuple[str, int], tuple[Attempt, Any]] = field(default_factory=dict)
    calls: dict[tuple[str, int], CallMarker] = field(default_factory=dict)
    events: list[SaveEvent] = field(default_factory=list)
    lease_owner: str | None = None
    lease_until: float | None = None


class MemoryStore:
    """Runs in a dict; writes are applied as they come (there is nothing to batch for)."""

    url = "memory://"

    def __init__(self) -> None:
        self._runs: dict[str, _Run] = {}

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def create_run(self, write: SaveRun, *, owner: str, lease_until: float) -> bool:
        if write.run_id in self._runs:
            return False
        self._runs[write.run_id] = _Run(write, lease_owner=owner, lease_until=lease_until)
        return True

    async def write(self, batch: list[Write]) -> None:
        for op in batch:
            run = self._runs.get(op.run_id)
            if run is None:
                continue
            if isinstance(op, SaveRun):
                run.record = op
            elif isinstance(op, SaveStep):
                run.steps[op.result.id] = op.result
                for key in [k for k in run.attempts if k[0] == op.result.id]:
                    del run.attempts[key]
            elif isinstance(op, SaveAttempt):
                run.attempts[(op.step_id, op.attempt.number)] = (op.attempt, op.output)
            elif isinstance(op, CallStarted):
                run.calls[(op.marker.step_id, op.marker.attempt)] = op.marker
            elif isinstance(op, SaveEvent):
                run.events.append(op)
            elif isinstance(op, CallFinished):
                marker = run.calls.get((op.step_id, op.attempt))
                if marker is not None:
                    run.calls[(op.step_id, op.attempt)] = replace(marker, finished=True)

    async def load(self, run_id: str) -> StoredRun | None:
        run = self._runs.get(run_id)
        if run is None:
            return None
        state = RunState.from_stored(json.loads(run.record.state_json), dict(run.steps))
        attempts: dict[str, list[Attempt]] = {}
        outputs: dict[tuple[str, int], Any] = {}
        for (step_id, number), (attempt, output) in sorted(run.attempts.items()):
            attempts.setdefault(step_id, []).append(attempt)
            if attempt.outcome == "succeeded":
                outputs[(step_id, number)] = output
        open_calls = [m for m in run.calls.values()
                      if not m.finished and m.step_id not in run.steps]
        return StoredRun(state, attempts, outputs, open_calls, run.lease_owner, run.lease_until)

    async def load_events(self, run_id: str, *, after: int = 0) -> list[RunEvent]:
        run = self._runs.get(run_id)
        return [] if run is None else [e.to_event() for e in run.events if e.seq > after]

    async def acquire(self, run_id: str, *, owner: str, now: float, until: float,
                      steal_from: str | None = None) -> bool:
        run = self._runs.get(run_id)
        if run is None:
            return False
        free = (run.lease_owner in (None, owner, steal_from)
                or run.lease_until is None or run.lease_until < now)
        if free:
            run.lease_owner, run.lease_until = owner, until
        return free

    async def release(self, run_id: str, *, owner: str) -> None:
        run = self._runs.get(run_id)
        if run is not None and run.lease_owner == owner:
            run.lease_owner, run.lease_until = None, None

    async def list_runs(self, *, status: str | None, limit: int) -> list[RunSummary]:
        records = [r.record for r in self._runs.values()
                   if status is None or r.record.status == status]
        records.sort(key=lambda r: r.started_at, reverse=True)
        return [RunSummary(run_id=r.run_id, query=r.query, status=r.status,
                           started_at=r.started_at, finished_at=r.finished_at,
                           steps=dict(r.steps), error=r.error) for r in records[:limit]]

    async def delete_finished_before(self, cutoff: float) -> int:
        old = [rid for rid, r in self._runs.items() if r.record.status in _FINISHED
               and r.record.finished_at is not None and r.record.finished_at < cutoff]
        for rid in old:
            del self._runs[rid]
        return len(old)
