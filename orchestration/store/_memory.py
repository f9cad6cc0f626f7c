"""``memory://``: a run store in this process's memory, for tests and benchmarks.

Nothing survives the process. Runs can still be looked up and resumed within it, which is
what tests of resume logic that need no real database use.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from orchestration.errors import LeaseLost, StoreError
from orchestration.events import RunEvent
from orchestration.result import Attempt, StepResult
from orchestration.state import RunState
from orchestration.store._base import (
    CachedPlan,
    CallFinished,
    CallMarker,
    CallStarted,
    Lease,
    ReleaseRun,
    RunSummary,
    SaveAttempt,
    SaveEvent,
    SaveRun,
    SaveStep,
    SessionRecord,
    StoredRun,
    Write,
)
from orchestration.store._requests import HeldRun, RequestKind, RunRequest

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
    lease_until: float | None = None  # time.monotonic(): this process is the only writer
    generation: int = 0


class MemoryStore:
    """Runs in a dict; writes are applied as they come (there is nothing to batch for)."""

    url = "memory://"

    def __init__(self) -> None:
        self._runs: dict[str, _Run] = {}
        self._payloads: dict[tuple[str, str], bytes] = {}
        self._sessions: dict[tuple[str, str], SessionRecord] = {}
        self._plans: dict[str, CachedPlan] = {}
        self._requests: dict[tuple[str, str, str], RunRequest] = {}

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def create_run(self, write: SaveRun, *, owner: str, lease_s: float) -> Lease | None:
        if write.run_id in self._runs:
            return None
        self._runs[write.run_id] = _Run(write, lease_owner=owner,
                                        lease_until=time.monotonic() + lease_s, generation=1)
        return Lease(write.run_id, owner, 1)

    async def write(self, batch: list[Write], *, lease: Lease | None = None,
                    lease_s: float = 0.0, durable: bool = False) -> None:
        if lease is not None:
            held = self._runs.get(lease.run_id)
            if held is None or (held.lease_owner, held.generation) != (lease.owner,
                                                                      lease.generation):
                raise LeaseLost(f"run {lease.run_id!r}: this process no longer holds the run "
                                f"(lease generation {lease.generation} was taken over)")
            held.lease_until = time.monotonic() + lease_s
        for op in batch:
            run = self._runs.get(op.run_id)
            if run is None:
                continue
            if isinstance(op, SaveRun):
                # what the run was created with (context, session) never changes
                run.record = replace(op, context=run.record.context,
                                     session_id=run.record.session_id,
                                     session_run=run.record.session_run)
            elif isinstance(op, SaveStep):
                run.steps[op.result.id] = op.result
                for key in [k for k in run.attempts if k[0] == op.result.id]:
                    del run.attempts[key]
            elif isinstance(op, SaveAttempt):
                run.attempts[(op.step_id, op.attempt.number)] = (op.attempt, op.output)
            elif isinstance(op, CallStarted):
                key = (op.marker.step_id, op.marker.attempt)
                earlier = run.calls.get(key)
                if earlier is not None and not earlier.finished and not op.repeat:
                    raise StoreError(f"run {op.run_id!r}: a call marker is open already for "
                                     f"step {key[0]!r} attempt {key[1]}: not sent again")
                run.calls[key] = op.marker
            elif isinstance(op, SaveEvent):
                run.events.append(op)
            elif isinstance(op, CallFinished):
                marker = run.calls.get((op.step_id, op.attempt))
                if marker is not None:
                    run.calls[(op.step_id, op.attempt)] = replace(marker, finished=True)
            elif isinstance(op, ReleaseRun) and run.lease_owner == op.owner:
                run.lease_owner, run.lease_until = None, None

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
        open_calls = [m for m in run.calls.values() if not m.finished and (
            m.step_id not in run.steps or run.steps[m.step_id].status == "awaiting_approval")]
        remaining = None if run.lease_until is None else run.lease_until - time.monotonic()
        return StoredRun(state, attempts, outputs, open_calls, run.lease_owner, remaining,
                         run.generation, run.lease_until)

    async def load_events(self, run_id: str, *, after: int = 0) -> list[RunEvent]:
        run = self._runs.get(run_id)
        if run is None:
            return []
        context = run.record.context
        return [replace(e, context=context).to_event() for e in run.events if e.seq > after]

    async def acquire(self, run_id: str, *, owner: str, lease_s: float,
                      steal_from: str | None = None,
                      read: StoredRun | None = None) -> Lease | None:
        run = self._runs.get(run_id)
        if run is None:
            return None
        if read is not None and read.lease_as_read() != (run.lease_owner, run.generation,
                                                         run.lease_until):
            return None
        now = time.monotonic()
        if not (run.lease_owner in (None, owner, steal_from)
                or run.lease_until is None or run.lease_until < now):
            return None
        run.lease_owner, run.lease_until = owner, now + lease_s
        run.generation += 1
        return Lease(run_id, owner, run.generation)

    async def release(self, run_id: str, *, owner: str) -> None:
        run = self._runs.get(run_id)
        if run is not None and run.lease_owner == owner:
            run.lease_owner, run.lease_until = None, None

    async def list_runs(self, *, status: str | None, limit: int, tenant: str | None = None,
                        user: str | None = None,
                        session_id: str | None = None) -> list[RunSummary]:
        records = [r.record for r in self._runs.values()
                   if (status is None or r.record.status == status)
                   and (tenant is None or (r.record.tenant or "") == tenant)
                   and (user is None or r.record.user == user)
                   and (session_id is None or r.record.session_id == session_id)]
        if session_id is not None:
            records.sort(key=lambda r: r.session_run or 0, reverse=True)
        else:
            records.sort(key=lambda r: r.started_at, reverse=True)
        return [RunSummary(run_id=r.run_id, query=r.query, status=r.status,
                           started_at=r.started_at, finished_at=r.finished_at,
                           steps=dict(r.steps), error=r.error, context=r.context,
                           session=r.session_id, session_run=r.session_run)
                for r in records[:limit]]

    async def next_session_run(self, tenant: str | None, session_id: str) -> int:
        key = (tenant or "", session_id)
        now = time.time()
        found = self._sessions.get(key)
        runs = (found.runs if found is not None else 0) + 1
        self._sessions[key] = SessionRecord(
            session_id=session_id, tenant=tenant or None, runs=runs,
            created_at=found.created_at if found is not None else now, updated_at=now)
        return runs

    async def get_session(self, tenant: str | None, session_id: str) -> SessionRecord | None:
        return self._sessions.get((tenant or "", session_id))

    async def delete_finished_before(self, cutoff: float) -> int:
        old = [rid for rid, r in self._runs.items() if r.record.status in _FINISHED
               and r.record.finished_at is not None and r.record.finished_at < cutoff]
        for rid in old:
            del self._runs[rid]
        gone = set(old)
        self._payloads = {k: v for k, v in self._payloads.items() if k[0] not in gone}
        self._requests = {k: v for k, v in self._requests.items() if k[0] not in gone}
        return len(old)

    async def put_request(self, request: RunRequest) -> None:
        self._requests[(request.run_id, request.kind, request.key)] = replace(
            request, created_at=request.created_at or time.time())

    async def list_requests(self, *, kind: RequestKind | None = None,
                            run_id: str | None = None) -> list[RunRequest]:
        return sorted((r for r in self._requests.values()
                       if (kind is None or r.kind == kind)
                       and (run_id is None or r.run_id == run_id)), key=lambda r: r.created_at)

    async def drop_requests(self, run_id: str, kind: RequestKind,
                            keys: Sequence[str] | None = None) -> None:
        for key in [k for k in self._requests
                    if k[0] == run_id and k[1] == kind and (keys is None or k[2] in keys)]:
            del self._requests[key]

    async def list_unheld(self, *, host: str, limit: int) -> list[HeldRun]:
        now = time.monotonic()
        found = []
        for run_id, run in self._runs.items():
            if run.record.status != "running":
                continue
            free = run.lease_owner is None or run.lease_until is None or run.lease_until < now
            if free or (run.lease_owner or "").startswith(host + ":"):
                found.append((run.record.started_at, HeldRun(run_id, run.lease_owner, free)))
        return [held for _, held in sorted(found, key=lambda f: f[0])[:limit]]

    async def put_payloads(self, run_id: str, payloads: dict[str, bytes]) -> None:
        for key, data in payloads.items():
            self._payloads.setdefault((run_id, key), data)

    async def get_payloads(self, run_id: str, keys: list[str]) -> dict[str, bytes]:
        return {key: self._payloads[(run_id, key)] for key in keys
                if (run_id, key) in self._payloads}

    async def get_cached_plan(self, key: str, *, now: float) -> CachedPlan | None:
        entry = self._plans.get(key)
        return entry if entry is not None and entry.expires_at > now else None

    async def put_cached_plan(self, entry: CachedPlan, *, now: float) -> None:
        self._plans = {k: e for k, e in self._plans.items() if e.expires_at > now}
        self._plans[entry.key] = entry

    async def clear_cached_plans(self) -> int:
        count = len(self._plans)
        self._plans.clear()
        return count
