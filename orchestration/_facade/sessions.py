"""Sessions on the local backend: a new run numbered in its session, the earlier runs it
may build on (its services' :class:`~orchestration.sessions.SessionHistory`, loaded again
where the run continues), and ``get_session``."""

from __future__ import annotations

from orchestration._facade.parts import FacadeParts
from orchestration._facade.store_access import RunStoreAccess
from orchestration.sessions import Session, SessionHistory, check_session_id, load_history
from orchestration.state import RunState


class LocalSessions:
    def __init__(self, parts: FacadeParts, stores: RunStoreAccess) -> None:
        self._parts = parts
        self._stores = stores

    async def number(self, session_id: str, tenant: str | None) -> int:
        """The number of a new run of the session (creating the session with its first)."""
        check_session_id(session_id)
        await self._stores.open()
        return await self._parts.store.next_session_run(tenant, session_id)

    async def history(self, run: RunState) -> SessionHistory | None:
        """The earlier runs of ``run``'s session it may build on (None: no session)."""
        if run.session is None or run.session_run is None:
            return None
        await self._stores.open()
        return await load_history(self._parts.store, run.tenant, run.session,
                                  run.session_run, self._parts.config.session_history_runs)

    async def get(self, session_id: str, tenant: str | None) -> Session | None:
        """The session and its runs (newest first); None when it has none."""
        check_session_id(session_id)
        await self._stores.open()
        store = self._parts.store
        record = await store.get_session(tenant, session_id)
        if record is None:
            return None
        runs = await store.list_runs(status=None, limit=max(1, record.runs),
                                     tenant=tenant or "", session_id=session_id)
        return Session(id=session_id, tenant=record.tenant,
                       created_at=record.created_at, updated_at=record.updated_at, runs=runs)
