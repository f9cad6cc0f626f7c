"""Reading runs: a run, the recent runs, a run's events — answered from memory for a
run this process executes (fresher: store writes are batched), from its workflow on
the Temporal backend, else from the run store. Overdue approvals expire as a run is read."""

from __future__ import annotations

from orchestration._facade.local_runs import LocalRuns
from orchestration._facade.parts import FacadeParts
from orchestration._facade.temporal import TemporalBackend
from orchestration.events import RunEvent
from orchestration.result import RunResult
from orchestration.store import RunSummary


class RunHistory:
    def __init__(self, parts: FacadeParts, local: LocalRuns, temporal: TemporalBackend) -> None:
        self._parts = parts
        self._local = local
        self._temporal = temporal

    async def get_run(self, run_id: str) -> RunResult | None:
        handle = self._local.active.get(run_id)
        if handle is not None:
            return handle.current()
        if self._temporal.enabled:
            live = await self._temporal.runs().get_run(run_id)
            if live is not None:
                return live
        await self._local.stores.open()
        stored = await self._parts.store.load(run_id)
        if stored is None:
            return None
        if self._parts.engine.expire(stored.state):
            if stored.state.status == "awaiting_approval" and not stored.state.pending_approvals:
                stored.state.status = "running"  # nothing waits any more: resume finishes it
            await self._local.stores.save(stored.state)
        return stored.state.to_result()

    async def list_runs(self, status: str | None, limit: int, *, tenant: str | None = None,
                        user: str | None = None,
                        session_id: str | None = None) -> list[RunSummary]:
        await self._local.stores.open()
        store = self._parts.store
        if session_id is not None and tenant is None:
            tenant = ""  # a session is kept within its tenant: none is a tenant too
        if self._parts.config.approval_timeout_s is not None:
            for waiting in await store.list_runs(status="awaiting_approval", limit=limit,
                                                 tenant=tenant, user=user,
                                                 session_id=session_id):
                await self.get_run(waiting.run_id)  # expires what is overdue
        return await store.list_runs(status=status, limit=limit, tenant=tenant, user=user,
                                     session_id=session_id)

    async def events(self, run_id: str, after: int) -> list[RunEvent]:
        if self._temporal.enabled:
            live = await self._temporal.runs().get_events(run_id, after=after)
            if live is not None:
                return live
        await self._local.stores.open()
        return await self._parts.store.load_events(run_id, after=after)
