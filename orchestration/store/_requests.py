"""What one process asks of a run another process executes, kept in the run store.

Several processes may share one store (``dagwright serve --workers N``, replicas behind a
load balancer). A run executes in exactly one of them — the holder of its lease — but a
request about it may reach any of them: a cancel, or a person's decision on a step that
waits for approval. The process that gets it writes a :class:`RunRequest`; the run's
holder acts on it (it watches for requests for the runs it executes), or, when nobody
holds the run, whoever takes the run next does.

* ``cancel`` — end the run ``cancelled``. Its holder stops it within a poll of the store
  (a PostgreSQL notification at once); a run whose holder died is cancelled by the
  process that takes it over, instead of being resumed.
* ``decision`` — a person's decision on one step (``key`` is the step id) that the
  process that took it had no free slot to act on: the run resumes wherever a slot
  frees first. ``payload`` holds the decision and the ``requested_at`` of the approval
  it answers, so a decision is never applied to a later request for the same step.

A request is one row per (run, kind, key); a new one replaces the old. Requests of a
run go with the run (retention).
"""

from __future__ import annotations

import json
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["HeldRun", "RequestKind", "RunRequest", "SQLRequests"]

RequestKind = Literal["cancel", "decision"]


@dataclass(frozen=True, slots=True)
class RunRequest:
    """Something asked of a run by a process that does not execute it."""

    run_id: str
    kind: RequestKind
    key: str = ""
    """The step id of a decision; empty for a cancel."""
    payload: dict[str, Any] | None = None
    created_at: float = 0.0


@dataclass(frozen=True, slots=True)
class HeldRun:
    """A ``running`` run as the store sees its lease: ``free`` when nobody holds it (its
    lease expired by the store's clock, was released, or was taken under another clock);
    otherwise ``owner`` holds it (which may be a process of this machine that died)."""

    run_id: str
    owner: str | None
    free: bool


_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS dagwright_requests (
        run_id TEXT NOT NULL, kind TEXT NOT NULL, key TEXT NOT NULL, payload TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL, PRIMARY KEY (run_id, kind, key))""",
)
"""The table, added by one migration of the layout (see ``_sql._MIGRATIONS``)."""

Statement = tuple[str, Sequence[Any]]


class SQLRequests(ABC):
    """Requests and lease listings on the SQL stores (``?`` placeholders, both dialects)."""

    @abstractmethod
    async def _transaction(
        self, statements: list[Statement]
    ) -> tuple[list[int], list[tuple[Any, ...]]]: ...

    @abstractmethod
    async def _fetch(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]: ...

    def _announce(self, channel: str, key: str) -> list[Statement]:
        """Statements that tell listening processes ``key`` changed on ``channel`` in the
        same transaction (PostgreSQL's NOTIFY); none where nobody can listen."""
        return []

    async def put_request(self, request: RunRequest) -> None:
        """Record ``request`` (replacing one of the same run, kind and key)."""
        await self._transaction([(
            "INSERT INTO dagwright_requests (run_id, kind, key, payload, created_at) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT (run_id, kind, key) DO UPDATE SET "
            "payload = excluded.payload, created_at = excluded.created_at",
            (request.run_id, request.kind, request.key, json.dumps(request.payload),
             request.created_at or time.time())),
            *self._announce("dagwright_requests", request.run_id)])

    async def list_requests(self, *, kind: RequestKind | None = None,
                            run_id: str | None = None) -> list[RunRequest]:
        """Requests waiting, oldest first (of one kind, of one run)."""
        where: list[str] = []
        params: list[str] = []
        if kind is not None:
            where.append("kind = ?")
            params.append(kind)
        if run_id is not None:
            where.append("run_id = ?")
            params.append(run_id)
        clause = f"WHERE {' AND '.join(where)} " if where else ""
        rows = await self._fetch(
            "SELECT run_id, kind, key, payload, created_at FROM dagwright_requests "
            f"{clause}ORDER BY created_at", params)
        return [RunRequest(r[0], r[1], r[2], json.loads(r[3]), r[4]) for r in rows]

    async def drop_requests(self, run_id: str, kind: RequestKind,
                            keys: Sequence[str] | None = None) -> None:
        """Forget requests of ``run_id`` of ``kind`` (only those of ``keys`` when given)."""
        if keys is None:
            await self._transaction([(
                "DELETE FROM dagwright_requests WHERE run_id = ? AND kind = ?", (run_id, kind))])
        elif keys:
            marks = ", ".join("?" for _ in keys)
            await self._transaction([(
                f"DELETE FROM dagwright_requests WHERE run_id = ? AND kind = ? AND key IN ({marks})",
                (run_id, kind, *keys))])

    async def list_unheld(self, *, host: str, limit: int) -> list[HeldRun]:
        """``running`` runs nobody may be executing: their lease is free, expired by the
        store's clock or taken under another clock; and the runs held by processes of
        ``host`` (the caller tells the dead from the alive). Oldest first."""
        rows = await self._fetch(
            "SELECT run_id, lease_owner, (lease_owner IS NULL OR lease_expires_at IS NULL "
            "OR lease_expires_at < dagwright_now() OR lease_clock IS NULL "
            "OR lease_clock <> dagwright_clock()) FROM dagwright_runs WHERE status = 'running' "
            "AND (lease_owner IS NULL OR lease_expires_at IS NULL "
            "OR lease_expires_at < dagwright_now() OR lease_clock IS NULL "
            "OR lease_clock <> dagwright_clock() OR lease_owner LIKE ?) "
            "ORDER BY started_at LIMIT ?", (host + ":%", limit))
        return [HeldRun(r[0], r[1], bool(r[2])) for r in rows]
