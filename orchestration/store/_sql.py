"""The SQL run stores: ``sqlite:///PATH`` (embedded, the default) and ``postgresql://``.

Both keep the same tables (prefixed ``dagwright_``) and differ only in how they connect
and run a statement: SQLite through the standard library in a worker thread (WAL mode, so
several processes on one machine can share the file), PostgreSQL through psycopg 3's
async connections (one per event loop). The layout is created on first use and migrated
when it is older than this code (:data:`SCHEMA_VERSION`); a database that holds other
tables and not ours, or a file that is not a database, is reported and never touched.

Lease time is the store's: SQL reads it through ``dagwright_now()`` (PostgreSQL's
``clock_timestamp()``; for SQLite a function of the connection that reads this machine's
boot-time clock, which every process on the machine shares and no wall-clock step moves)
and ``dagwright_clock()`` names that clock, so a lease taken before a reboot is not
compared with a clock that started again at zero.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import math
import os
import sqlite3
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from pydantic_core import to_json

from orchestration._extras import needs_extra
from orchestration.errors import LeaseLost, RunLeased, StoreError
from orchestration.events import RunEvent
from orchestration.redaction import DEFAULT_REDACTOR, SENSITIVE_NAME
from orchestration.result import Attempt, StepResult
from orchestration.state import RunState
from orchestration.store._base import (
    SCHEMA_VERSION,
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
from orchestration.store._requests import _SCHEMA as REQUESTS_SCHEMA
from orchestration.store._requests import SQLRequests
from orchestration.store._sqlite_writer import SqliteWriter

__all__ = ["PostgresStore", "SqliteStore", "masked_url"]

Statement = tuple[str, Sequence[Any]]

_TABLES = ("dagwright_meta", "dagwright_runs", "dagwright_steps", "dagwright_attempts",
           "dagwright_calls", "dagwright_events", "dagwright_payloads", "dagwright_sessions",
           "dagwright_plan_cache", "dagwright_requests")

# Version 1 of the layout. A later version adds a migration step to _MIGRATIONS.
_SCHEMA_V1 = (
    "CREATE TABLE IF NOT EXISTS dagwright_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE IF NOT EXISTS dagwright_runs (
        run_id TEXT PRIMARY KEY, query TEXT NOT NULL, status TEXT NOT NULL,
        started_at DOUBLE PRECISION NOT NULL, finished_at DOUBLE PRECISION,
        updated_at DOUBLE PRECISION NOT NULL, state TEXT NOT NULL, steps TEXT NOT NULL,
        error TEXT, lease_owner TEXT, lease_expires_at DOUBLE PRECISION)""",
    "CREATE INDEX IF NOT EXISTS dagwright_runs_started ON dagwright_runs (started_at)",
    "CREATE INDEX IF NOT EXISTS dagwright_runs_status ON dagwright_runs (status, started_at)",
    """CREATE TABLE IF NOT EXISTS dagwright_steps (
        run_id TEXT NOT NULL, step_id TEXT NOT NULL, status TEXT NOT NULL,
        result TEXT NOT NULL, PRIMARY KEY (run_id, step_id))""",
    """CREATE TABLE IF NOT EXISTS dagwright_attempts (
        run_id TEXT NOT NULL, step_id TEXT NOT NULL, number INTEGER NOT NULL,
        data TEXT NOT NULL, output TEXT, PRIMARY KEY (run_id, step_id, number))""",
    """CREATE TABLE IF NOT EXISTS dagwright_calls (
        run_id TEXT NOT NULL, step_id TEXT NOT NULL, attempt INTEGER NOT NULL,
        layer TEXT NOT NULL, params TEXT NOT NULL, idempotency_key TEXT,
        started_at DOUBLE PRECISION NOT NULL, finished_at DOUBLE PRECISION,
        PRIMARY KEY (run_id, step_id, attempt))""",
)
_MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (  # version 2: run events, stored so a late reader can replay them
        """CREATE TABLE IF NOT EXISTS dagwright_events (
            run_id TEXT NOT NULL, seq INTEGER NOT NULL, type TEXT NOT NULL,
            at DOUBLE PRECISION NOT NULL, data TEXT NOT NULL, PRIMARY KEY (run_id, seq))""",
    ),
    2: (  # version 3: fenced leases on the store's clock (a lease taken by an older
        # version, on a wall clock, has no clock name and so counts as expired)
        "ALTER TABLE dagwright_runs ADD COLUMN lease_generation INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE dagwright_runs ADD COLUMN lease_clock TEXT",
    ),
    3: (  # version 4: large values of Temporal runs, referred to from their histories
        # (base64 text: one column type on SQLite and PostgreSQL)
        """CREATE TABLE IF NOT EXISTS dagwright_payloads (
            run_id TEXT NOT NULL, key TEXT NOT NULL, data TEXT NOT NULL,
            PRIMARY KEY (run_id, key))""",
    ),
    4: (  # version 5: runs in context (tenant, user, the whole context as JSON) and in
        # sessions; a session numbers its runs within its tenant ('' for none)
        "ALTER TABLE dagwright_runs ADD COLUMN tenant TEXT",
        "ALTER TABLE dagwright_runs ADD COLUMN user_id TEXT",
        "ALTER TABLE dagwright_runs ADD COLUMN context TEXT",
        "ALTER TABLE dagwright_runs ADD COLUMN session_id TEXT",
        "ALTER TABLE dagwright_runs ADD COLUMN session_run INTEGER",
        "CREATE INDEX IF NOT EXISTS dagwright_runs_tenant ON dagwright_runs "
        "(tenant, user_id, started_at)",
        "CREATE INDEX IF NOT EXISTS dagwright_runs_session ON dagwright_runs "
        "(tenant, session_id, session_run)",
        """CREATE TABLE IF NOT EXISTS dagwright_sessions (
            tenant TEXT NOT NULL, session_id TEXT NOT NULL, runs INTEGER NOT NULL,
            created_at DOUBLE PRECISION NOT NULL, updated_at DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (tenant, session_id))""",
    ),
    5: (  # version 6: validated plans kept for reuse (ORCH_PLAN_CACHE), by key, with a TTL
        """CREATE TABLE IF NOT EXISTS dagwright_plan_cache (
            key TEXT PRIMARY KEY, plan TEXT NOT NULL, query TEXT NOT NULL,
            catalog TEXT NOT NULL, model TEXT NOT NULL, prompt_version TEXT NOT NULL,
            tenant TEXT, created_at DOUBLE PRECISION NOT NULL,
            expires_at DOUBLE PRECISION NOT NULL)""",
        "CREATE INDEX IF NOT EXISTS dagwright_plan_cache_expires "
        "ON dagwright_plan_cache (expires_at)",
    ),
    6: REQUESTS_SCHEMA,  # version 7: requests to runs another process executes (a
    # cancel, a decision): orchestration/store/_requests.py
}
"""Statements that bring a layout of version ``n`` to ``n + 1`` (a new store is created at
version 1 and brought up the same way, so every migration runs in every test)."""

_FINISHED = ("succeeded", "partial", "failed", "cancelled")


_SECRET_PARAMETERS = frozenset({"password", "sslpassword", "passfile", "sslkey", "sslcert",
                                "sslrootcert", "sslcrl", "token", "key", "secret"})
"""Query parameters of a store URL that carry a secret (or the path of one): libpq takes
``password`` and ``sslpassword`` there as well as in the userinfo."""


def masked_url(url: str) -> str:
    """``url`` with its password replaced — in the userinfo and in the query — for
    messages, logs and every answer of ``dagwright serve``."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return DEFAULT_REDACTOR.redact(url)
    if password is None and not parts.query:
        return url  # (urlunsplit would also drop the empty authority of sqlite:///PATH)
    if password is not None:
        parts = parts._replace(netloc=parts.netloc.replace(f":{password}@", ":****@", 1))
    if parts.query:
        query = "&".join(
            f"{name}=****" if name.lower() in _SECRET_PARAMETERS or SENSITIVE_NAME.search(name)
            else f"{name}={value}" if sep else name
            for name, sep, value in (pair.partition("=") for pair in parts.query.split("&")))
        parts = parts._replace(query=query)
    return urlunsplit(parts)


def _encode_event_data(data: dict[str, Any]) -> str:
    """An event's data as JSON text (a value JSON has no form for, as its text).

    pydantic-core's encoder: a run writes three events per step, and for these small
    dicts it takes a fifth of the time of the standard library's (which enters Python
    code on every call before reaching its C encoder)."""
    return to_json(data, fallback=str).decode()


_MARK_UPSERT = ("INSERT INTO dagwright_calls (run_id, step_id, attempt, layer, params, "
                "idempotency_key, started_at) VALUES (?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (run_id, step_id, attempt) DO UPDATE SET layer = excluded.layer, "
                "params = excluded.params, idempotency_key = excluded.idempotency_key, "
                "started_at = excluded.started_at, finished_at = NULL")
_MARK_REPEAT = _MARK_UPSERT
"""The marker of a call sent again with its key by the run's new holder: it refreshes
the open marker of the same call."""
_MARK = _MARK_UPSERT + " WHERE dagwright_calls.finished_at IS NOT NULL"
"""A call's marker. It may take the place of a *finished* marker of the same attempt
number (a step paused for approval numbers its attempts anew), never of an open one: a
second writer's marker for a call in flight changes no row, and the write fails
(:data:`_EVERY_ROW_COUNTS`) instead of "succeeding" and sending."""
_EVERY_ROW_COUNTS = frozenset({_MARK})


def _check_counted(url: str, sql: str, expected: int, changed: int) -> None:
    if sql in _EVERY_ROW_COUNTS and changed != expected:
        raise StoreError(f"run store {url}: a call marker is open already for the same step "
                         "and attempt: another process is sending it. Not sent again.")


_INSERT_EVENT = ("INSERT INTO dagwright_events (run_id, seq, type, at, data) "
                 "VALUES (?, ?, ?, ?, ?) ON CONFLICT (run_id, seq) DO NOTHING")


def _write_groups(batch: list[Write]) -> list[tuple[str, list[Sequence[Any]]]]:
    """The SQL of a batch of writes (``?`` placeholders), in order, consecutive runs of the
    same statement grouped so that each group goes to the database in one
    ``executemany`` (one round trip per group with psycopg's pipeline mode)."""
    groups: list[tuple[str, list[Sequence[Any]]]] = []
    # events only ever insert rows of their own table: they go in one group after the
    # rest (same transaction), instead of splitting every step's writes into groups of
    # one — a round trip each on PostgreSQL (+200 µs/step for a 1,000-step run); three
    # of a step's four writes are events, so their rows are made here directly
    events = [op for op in batch if isinstance(op, SaveEvent)]
    others = [op for op in batch if not isinstance(op, SaveEvent)] if events else batch
    for sql, params in _write_statements(others):
        if groups and groups[-1][0] == sql:
            groups[-1][1].append(params)
        else:
            groups.append((sql, [params]))
    if events:
        groups.append((_INSERT_EVENT, [(e.run_id, e.seq, e.type, e.at, _encode_event_data(e.data))
                                       for e in events]))
    return groups


def _write_statements(batch: Iterable[Write]) -> list[Statement]:
    """The SQL of a batch of writes other than events (``?`` placeholders), in order."""
    out: list[Statement] = []
    now = time.time()
    for op in batch:
        if isinstance(op, SaveRun):
            out.append((
                "UPDATE dagwright_runs SET status = ?, finished_at = ?, updated_at = ?, "
                "state = ?, steps = ?, error = ? WHERE run_id = ?",
                (op.status, op.finished_at, now, op.state_json, json.dumps(op.steps), op.error,
                 op.run_id)))
        elif isinstance(op, SaveStep):
            result = op.result
            out.append((
                "INSERT INTO dagwright_steps (run_id, step_id, status, result) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (run_id, step_id) DO UPDATE SET status = excluded.status, "
                "result = excluded.result",
                (op.run_id, result.id, result.status, result.model_dump_json())))
            if op.clears_attempts:
                out.append(("DELETE FROM dagwright_attempts WHERE run_id = ? AND step_id = ?",
                            (op.run_id, result.id)))
        elif isinstance(op, SaveAttempt):
            output = None if op.attempt.outcome != "succeeded" else json.dumps(op.output)
            out.append((
                "INSERT INTO dagwright_attempts (run_id, step_id, number, data, output) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (run_id, step_id, number) DO UPDATE SET "
                "data = excluded.data, output = excluded.output",
                (op.run_id, op.step_id, op.attempt.number, op.attempt.model_dump_json(), output)))
        elif isinstance(op, CallStarted):
            m = op.marker
            out.append((
                _MARK_REPEAT if op.repeat else _MARK,
                (op.run_id, m.step_id, m.attempt, m.layer, json.dumps(m.params),
                 m.idempotency_key, m.started_at)))
        elif isinstance(op, CallFinished):
            out.append((
                "UPDATE dagwright_calls SET finished_at = ? "
                "WHERE run_id = ? AND step_id = ? AND attempt = ?",
                (now, op.run_id, op.step_id, op.attempt)))
        elif isinstance(op, ReleaseRun):
            out.append((_RELEASE, (op.run_id, op.owner)))
    return out


_RELEASE = ("UPDATE dagwright_runs SET lease_owner = NULL, lease_expires_at = NULL "
            "WHERE run_id = ? AND lease_owner = ?")
"""A holder letting go of its run (a no-op once another process holds it)."""


_VERSION_QUERY = "SELECT value FROM dagwright_meta WHERE key = 'schema_version'"


def _layout_version(url: str, rows: list[tuple[Any, ...]]) -> int:
    """The layout version the ``dagwright_meta`` record holds (``rows`` of
    :data:`_VERSION_QUERY`)."""
    try:
        return int(rows[0][0])
    except (IndexError, ValueError) as exc:
        raise StoreError(f"run store {url}: its schema version record is missing or "
                         "unreadable; the database is damaged.") from exc


def _layout_changes(url: str, tables: set[str], version: int | None) -> list[list[Statement]]:
    """The transactions that bring a database holding ``tables`` at layout ``version``
    (None: no ``dagwright_meta``) to :data:`SCHEMA_VERSION` — none when it is current.

    Decided from what the database holds, so the decision and the changes must be made
    by one opener at a time (each backend's ``open`` says how): two openers of a new
    store would both create it, and both add the same columns."""
    if version is None:
        if any(t.startswith("dagwright_") for t in tables):
            raise StoreError(f"run store {url}: it has dagwright tables but no "
                             "dagwright_meta version record; it was not made by dagwright "
                             "or is damaged. Point ORCH_STORE_URL elsewhere.")
        changes: list[list[Statement]] = [[*((s, ()) for s in _SCHEMA_V1), (
            "INSERT INTO dagwright_meta (key, value) VALUES ('schema_version', '1')", ())]]
        version = 1
    else:
        changes = []
    if version > SCHEMA_VERSION:
        raise StoreError(f"run store {url} was written by a newer dagwright (layout "
                         f"version {version}, this one knows {SCHEMA_VERSION}); upgrade "
                         "dagwright or use another store.")
    for current in range(version, SCHEMA_VERSION):
        changes.append([*((s, ()) for s in _MIGRATIONS[current]), (
            "UPDATE dagwright_meta SET value = ? WHERE key = 'schema_version'",
            (str(current + 1),))])
    return changes


_RENEW = ("UPDATE dagwright_runs SET lease_expires_at = dagwright_now() + ? "
          "WHERE run_id = ? AND lease_owner = ? AND lease_generation = ?")
"""A holder's lease renewal, and the fence of every write it makes: it changes the run's
row only while that generation still holds it."""


def _lease_lost(url: str, guard: Statement) -> LeaseLost:
    run_id, generation = guard[1][1], guard[1][3]
    return LeaseLost(
        f"run {run_id!r}: this process no longer holds the run (lease generation "
        f"{generation} in {url} was taken over after it expired by the store's clock: a "
        "long pause, a frozen machine, or a store it could not reach). Nothing more was "
        "sent by this process; the run belongs to the process that took it over.")


def _boot_clock() -> float:
    """This machine's seconds since boot (suspend included where the OS counts it): the
    lease clock of a SQLite store, shared by every process on the machine and never
    stepped like the wall clock."""
    boottime = getattr(time, "CLOCK_BOOTTIME", None)
    return time.clock_gettime(boottime) if boottime is not None else time.monotonic()


def _boot_id() -> str:
    """Which boot of this machine ``_boot_clock`` counts from."""
    with contextlib.suppress(OSError):
        return "boot:" + Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    return f"boot:{time.time() - _boot_clock():.0f}"  # no boot id: when the clock started


_BOOT_ID = _boot_id()


class _SQLStore(SQLRequests, ABC):
    """Everything but connecting and executing, shared by SQLite and PostgreSQL."""

    url: str

    # --- what a backend provides ------------------------------------------------------
    @abstractmethod
    async def _transaction(
        self, statements: list[Statement], *, hold_s: float | None = None
    ) -> tuple[list[int], list[tuple[Any, ...]]]:
        """Run ``statements`` in one transaction; the row count of each, and the rows the
        last one returned (when it is a query). ``hold_s`` bounds how long the
        transaction may wait on this process between statements (a lease's length: see
        :meth:`PostgresStore._bound_hold`)."""

    @abstractmethod
    async def _write_many(self, groups: list[tuple[str, list[Sequence[Any]]]], *,
                          guard: Statement | None = None, durable: bool = False) -> None:
        """Run each statement with each of its parameter rows, all in one transaction;
        first ``guard`` (a lease renewal), which must change one row or nothing is
        written (:class:`LeaseLost`), and which bounds the transaction like ``hold_s``
        does :meth:`_transaction`'s, by the lease it renews."""

    @abstractmethod
    async def _fetch(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]: ...

    # --- the interface --------------------------------------------------------------
    async def create_run(self, write: SaveRun, *, owner: str, lease_s: float) -> Lease | None:
        (count,), _ = await self._transaction([(
            "INSERT INTO dagwright_runs (run_id, query, status, started_at, finished_at, "
            "updated_at, state, steps, error, lease_owner, lease_expires_at, "
            "lease_generation, lease_clock, tenant, user_id, context, session_id, "
            "session_run) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
            "dagwright_now() + ?, 1, dagwright_clock(), ?, ?, ?, ?, ?) "
            "ON CONFLICT (run_id) DO NOTHING",
            (write.run_id, write.query, write.status, write.started_at, write.finished_at,
             time.time(), write.state_json, json.dumps(write.steps), write.error, owner,
             lease_s, write.tenant or "", write.user,
             json.dumps(write.context) if write.context else None, write.session_id,
             write.session_run))])
        return Lease(write.run_id, owner, 1) if count == 1 else None

    async def write(self, batch: list[Write], *, lease: Lease | None = None,
                    lease_s: float = 0.0, durable: bool = False) -> None:
        if batch or lease is not None:
            guard = None if lease is None else (_RENEW, (lease_s, lease.run_id, lease.owner,
                                                         lease.generation))
            groups = _write_groups(batch)
            changed = {op.run_id for op in batch if isinstance(op, SaveEvent | SaveRun)}
            for run_id in sorted(changed):
                groups.extend((sql, [params])
                              for sql, params in self._announce("dagwright_runs", run_id))
            await self._write_many(groups, guard=guard, durable=durable)

    async def load(self, run_id: str) -> StoredRun | None:
        rows = await self._fetch(
            "SELECT state, lease_owner, lease_expires_at - dagwright_now(), "
            "lease_clock = dagwright_clock(), lease_generation, lease_expires_at "
            "FROM dagwright_runs WHERE run_id = ?", (run_id,))
        if not rows:
            return None
        state_json, owner, remaining, same_clock, generation, expires_at = rows[0]
        steps = {sid: StepResult.model_validate_json(result) for sid, result in await self._fetch(
            "SELECT step_id, result FROM dagwright_steps WHERE run_id = ?", (run_id,))}
        state = RunState.from_stored(json.loads(state_json), steps)
        attempts: dict[str, list[Attempt]] = {}
        outputs: dict[tuple[str, int], Any] = {}
        for step_id, number, data, output in await self._fetch(
                "SELECT step_id, number, data, output FROM dagwright_attempts "
                "WHERE run_id = ? ORDER BY step_id, number", (run_id,)):
            attempts.setdefault(step_id, []).append(Attempt.model_validate_json(data))
            if output is not None:
                outputs[(step_id, number)] = json.loads(output)
        calls = [
            CallMarker(step_id, attempt, layer, json.loads(params), key, started)
            for step_id, attempt, layer, params, key, started in await self._fetch(
                "SELECT step_id, attempt, layer, params, idempotency_key, started_at "
                "FROM dagwright_calls WHERE run_id = ? AND finished_at IS NULL "
                "ORDER BY started_at", (run_id,))
            if step_id not in steps or steps[step_id].status == "awaiting_approval"
        ]
        held = None if remaining is None or not same_clock else float(remaining)
        return StoredRun(state, attempts, outputs, calls, owner, held, int(generation),
                         None if expires_at is None else float(expires_at))

    async def load_events(self, run_id: str, *, after: int = 0) -> list[RunEvent]:
        rows = await self._fetch(
            "SELECT seq, type, at, data FROM dagwright_events WHERE run_id = ? AND seq > ? "
            "ORDER BY seq", (run_id, after))
        if not rows:
            return []
        found = await self._fetch("SELECT context FROM dagwright_runs WHERE run_id = ?",
                                  (run_id,))
        context = json.loads(found[0][0]) if found and found[0][0] else None
        return [RunEvent(run_id=run_id, seq=seq, type=kind, at=at, data=json.loads(data),
                         context=context)
                for seq, kind, at, data in rows]

    async def acquire(self, run_id: str, *, owner: str, lease_s: float,
                      steal_from: str | None = None,
                      read: StoredRun | None = None) -> Lease | None:
        as_read, as_read_params = ("", ()) if read is None else (
            " AND lease_owner IS ? AND lease_generation = ? AND lease_expires_at IS ?",
            read.lease_as_read())
        (count, _), rows = await self._transaction([
            ("UPDATE dagwright_runs SET lease_owner = ?, lease_generation = lease_generation + 1, "
             "lease_expires_at = dagwright_now() + ?, lease_clock = dagwright_clock() "
             "WHERE run_id = ? AND (lease_owner IS NULL OR lease_owner = ? "
             "OR lease_expires_at IS NULL OR lease_expires_at < dagwright_now() "
             "OR lease_clock IS NULL OR lease_clock <> dagwright_clock())" + as_read,
             (owner, lease_s, run_id, steal_from or owner, *as_read_params)),
            ("SELECT lease_generation FROM dagwright_runs WHERE run_id = ? AND lease_owner = ?",
             (run_id, owner)),
        ], hold_s=lease_s)
        return Lease(run_id, owner, int(rows[0][0])) if count == 1 and rows else None

    async def release(self, run_id: str, *, owner: str) -> None:
        await self._transaction([(_RELEASE, (run_id, owner))])

    async def list_runs(self, *, status: str | None, limit: int, tenant: str | None = None,
                        user: str | None = None,
                        session_id: str | None = None) -> list[RunSummary]:
        filters = [(column, value) for column, value in (
            ("status", status), ("tenant", tenant), ("user_id", user),
            ("session_id", session_id)) if value is not None]
        where = ("WHERE " + " AND ".join(f"{column} = ?" for column, _ in filters) + " "
                 if filters else "")
        order = "session_run DESC" if session_id is not None else "started_at DESC"
        rows = await self._fetch(
            "SELECT run_id, query, status, started_at, finished_at, steps, error, context, "
            f"session_id, session_run FROM dagwright_runs {where}ORDER BY {order} LIMIT ?",
            (*(value for _, value in filters), limit))
        return [RunSummary(run_id=r[0], query=r[1], status=r[2], started_at=r[3],
                           finished_at=r[4], steps=json.loads(r[5]), error=r[6],
                           context=json.loads(r[7]) if r[7] else None, session=r[8],
                           session_run=r[9]) for r in rows]

    async def next_session_run(self, tenant: str | None, session_id: str) -> int:
        now = time.time()
        _, rows = await self._transaction([
            ("INSERT INTO dagwright_sessions (tenant, session_id, runs, created_at, updated_at) "
             "VALUES (?, ?, 0, ?, ?) ON CONFLICT (tenant, session_id) DO NOTHING",
             (tenant or "", session_id, now, now)),
            ("UPDATE dagwright_sessions SET runs = runs + 1, updated_at = ? "
             "WHERE tenant = ? AND session_id = ? RETURNING runs",
             (now, tenant or "", session_id)),
        ])
        return int(rows[0][0])

    async def get_session(self, tenant: str | None, session_id: str) -> SessionRecord | None:
        rows = await self._fetch(
            "SELECT runs, created_at, updated_at FROM dagwright_sessions "
            "WHERE tenant = ? AND session_id = ?", (tenant or "", session_id))
        if not rows:
            return None
        runs, created, updated = rows[0]
        return SessionRecord(session_id=session_id, tenant=tenant or None, runs=int(runs),
                             created_at=created, updated_at=updated)

    async def delete_finished_before(self, cutoff: float) -> int:
        marks = ", ".join("?" for _ in _FINISHED)
        old = f"SELECT run_id FROM dagwright_runs WHERE status IN ({marks}) AND finished_at < ?"
        params = (*_FINISHED, cutoff)
        counts, _ = await self._transaction([
            *((f"DELETE FROM {table} WHERE run_id IN ({old})", params)
              for table in ("dagwright_steps", "dagwright_attempts", "dagwright_calls",
                            "dagwright_events", "dagwright_payloads", "dagwright_requests")),
            (f"DELETE FROM dagwright_runs WHERE run_id IN ({old})", params),
            # a session none of whose runs is left, idle since the cutoff
            ("DELETE FROM dagwright_sessions WHERE updated_at < ? AND NOT EXISTS (SELECT 1 "
             "FROM dagwright_runs r WHERE r.session_id = dagwright_sessions.session_id AND "
             "r.tenant = dagwright_sessions.tenant)", (cutoff,)),
        ])
        return counts[-2]

    async def put_payloads(self, run_id: str, payloads: dict[str, bytes]) -> None:
        if payloads:
            rows: list[Sequence[Any]] = [(run_id, key, base64.b64encode(data).decode("ascii"))
                                         for key, data in payloads.items()]
            await self._write_many([(
                "INSERT INTO dagwright_payloads (run_id, key, data) VALUES (?, ?, ?) "
                "ON CONFLICT (run_id, key) DO NOTHING", rows)], durable=True)

    async def get_payloads(self, run_id: str, keys: list[str]) -> dict[str, bytes]:
        if not keys:
            return {}
        marks = ", ".join("?" for _ in keys)
        rows = await self._fetch(f"SELECT key, data FROM dagwright_payloads WHERE run_id = ? "
                                 f"AND key IN ({marks})", (run_id, *keys))
        return {key: base64.b64decode(data) for key, data in rows}

    # --- the plan cache ---------------------------------------------------------------
    async def get_cached_plan(self, key: str, *, now: float) -> CachedPlan | None:
        rows = await self._fetch(
            "SELECT plan, query, catalog, model, prompt_version, tenant, created_at, "
            "expires_at FROM dagwright_plan_cache WHERE key = ? AND expires_at > ?", (key, now))
        if not rows:
            return None
        plan, query, catalog, model, prompt, tenant, created, expires = rows[0]
        return CachedPlan(key, plan, query, catalog, model, prompt, tenant, created, expires)

    async def put_cached_plan(self, entry: CachedPlan, *, now: float) -> None:
        await self._transaction([
            ("DELETE FROM dagwright_plan_cache WHERE expires_at <= ?", (now,)),
            ("INSERT INTO dagwright_plan_cache (key, plan, query, catalog, model, "
             "prompt_version, tenant, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
             "ON CONFLICT (key) DO UPDATE SET plan = excluded.plan, "
             "created_at = excluded.created_at, expires_at = excluded.expires_at",
             (entry.key, entry.plan_json, entry.query, entry.catalog, entry.model,
              entry.prompt_version, entry.tenant, entry.created_at, entry.expires_at)),
        ])

    async def clear_cached_plans(self) -> int:
        counts, _ = await self._transaction([("DELETE FROM dagwright_plan_cache", ())])
        return counts[0]


class SqliteStore(_SQLStore):
    """A run store in one SQLite file (WAL mode: several processes on one machine).

    The file is created on first open only. Once open, every statement first checks that
    the path still names the same file: a database removed or replaced while in use
    (SQLite would go on writing into the unlinked file, and every write would "succeed")
    is a :class:`StoreError`, so a run never goes on without a record.
    """

    def __init__(self, url: str, path: Path) -> None:
        self.url = url
        self.path = path
        self._conn: sqlite3.Connection | None = None  # for reads
        self._identity: tuple[int, int] | None = None  # (device, inode) of the open file
        self._lock = threading.Lock()  # one statement at a time on the read connection
        # writes go to one thread of their own, committed together (group commit)
        self._writer = SqliteWriter(self._writer_connection, self._check_same_file, url)

    async def open(self) -> None:
        """Open the file and create or migrate its layout, one opener at a time."""
        await asyncio.to_thread(self._open_reader)
        await self._writer.submit(self._lay_out)

    def _open_reader(self) -> None:
        with self._lock:
            self._open(create=True)

    def _lay_out(self, conn: sqlite3.Connection) -> None:
        """Read and change the layout in one transaction of the writer (``BEGIN
        IMMEDIATE``): other processes wait on SQLite's write lock and this process's
        stores on the writer's queue, so a new store is created once and a migration
        applied once (``serve --workers`` opens one file from every worker at once)."""
        try:
            tables = {r[0] for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
            version = (_layout_version(self.url, conn.execute(_VERSION_QUERY).fetchall())
                       if "dagwright_meta" in tables else None)
            for transaction in _layout_changes(self.url, tables, version):
                _statements(transaction, conn)
        except sqlite3.Error as exc:
            raise StoreError(f"run store {self.url}: cannot create or migrate its tables "
                             f"in {self.path}: {exc}") from exc

    def _open(self, create: bool = False) -> None:
        if self._conn is not None:
            return
        if self._identity is not None or not create:
            self._check_same_file()  # a reconnect must find the file it had
        if create:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(f"run store {self.url}: cannot open {self.path}: {exc}. Check "
                                 "the directory exists and is writable, or set "
                                 "ORCH_STORE_URL.") from exc
        conn = self._new_connection()
        try:
            stat = os.stat(self.path)
        except OSError as exc:
            conn.close()
            raise StoreError(f"run store {self.url}: cannot open {self.path}: {exc}") from exc
        if self._identity is None:
            self._identity = (stat.st_dev, stat.st_ino)
        self._conn = conn

    def _new_connection(self) -> sqlite3.Connection:
        """A connection to the file, set up as every one of ours is (WAL, the lease
        clock's functions)."""
        try:
            conn = sqlite3.connect(self.path, timeout=10.0, isolation_level=None,
                                   check_same_thread=False)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"run store {self.url}: cannot open {self.path}: {exc}. Check the "
                             "directory exists and is writable, or set ORCH_STORE_URL.") from exc
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.create_function("dagwright_now", 0, _boot_clock)
            conn.create_function("dagwright_clock", 0, lambda: _BOOT_ID, deterministic=True)
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise StoreError(f"run store {self.url}: {self.path} is not a SQLite database "
                             f"({exc}); it was left untouched. Move it away or set "
                             "ORCH_STORE_URL to another file.") from exc
        return conn

    def _writer_connection(self) -> sqlite3.Connection:
        """The writer thread's connection: to the file first opened, never another."""
        self._check_same_file()
        return self._new_connection()

    def _check_same_file(self) -> None:
        """Raise :class:`StoreError` unless the path still names the file first opened."""
        try:
            stat = os.stat(self.path)
        except OSError as exc:
            raise StoreError(
                f"run store {self.url}: the database file {self.path} is gone ({exc.strerror}): "
                "it was removed while in use, and what this process recorded since is lost. "
                "Runs that were executing stop here; restore the file, or point "
                "ORCH_STORE_URL at a store you keep, before resuming them.") from exc
        if self._identity is not None and (stat.st_dev, stat.st_ino) != self._identity:
            raise StoreError(
                f"run store {self.url}: the database file {self.path} was replaced by another "
                "file while in use; runs that were executing stop here rather than write "
                "into a store that no longer has their record.")

    async def close(self) -> None:
        """Stop the writer (what is queued is applied first), then close the read
        connection once no statement uses it. A thread's synchronous ``run()`` closes the
        store when it ends while other threads may be reading: closing it under their
        feet crashed the process (SQLite's C library does not survive it); the next
        statement reopens (the writer its own connection, reads this one)."""
        await self._writer.close()
        await asyncio.to_thread(self._close_reader)

    def _close_reader(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
            if conn is not None:
                conn.close()

    @contextlib.contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            if self._conn is None:
                self._open()
            else:
                self._check_same_file()
            assert self._conn is not None
            yield self._conn

    def _run_fetch(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        with self._connection() as conn:
            try:
                return conn.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                raise StoreError(f"run store {self.url}: read failed: {exc}") from exc

    async def _transaction(
        self, statements: list[Statement], *, hold_s: float | None = None
    ) -> tuple[list[int], list[tuple[Any, ...]]]:
        # (hold_s: a SQLite transaction runs whole in one batch of the writer thread; a
        # process frozen inside it keeps the file locked, and other processes' writes
        # fail after SQLite's busy timeout instead of waiting for ever)
        return await self._writer.submit(partial(_statements, statements))

    async def _write_many(self, groups: list[tuple[str, list[Sequence[Any]]]], *,
                          guard: Statement | None = None, durable: bool = False) -> None:
        await self._writer.submit(partial(_groups, self.url, groups, guard), durable=durable)

    async def _fetch(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return await asyncio.to_thread(self._run_fetch, sql, params)


def _statements(statements: list[Statement], conn: sqlite3.Connection
                ) -> tuple[list[int], list[tuple[Any, ...]]]:
    """Run ``statements`` (inside the writer's transaction): the row count of each, and
    the rows the last one returned."""
    counts: list[int] = []
    rows: list[tuple[Any, ...]] = []
    for sql, params in statements:
        cursor = conn.execute(sql, params)
        counts.append(cursor.rowcount)
        rows = cursor.fetchall() if cursor.description else []
    return counts, rows


def _groups(url: str, groups: list[tuple[str, list[Sequence[Any]]]], guard: Statement | None,
            conn: sqlite3.Connection) -> None:
    """A batch of writes (inside the writer's transaction), first its lease fence."""
    if guard is not None and conn.execute(*guard).rowcount != 1:
        raise _lease_lost(url, guard)
    for sql, rows in groups:
        changed = conn.executemany(sql, rows).rowcount
        _check_counted(url, sql, len(rows), changed)


_PG_CLOCK = "EXTRACT(EPOCH FROM clock_timestamp())::double precision"


class PostgresStore(_SQLStore):
    """A run store in PostgreSQL (psycopg 3; one async connection per event loop).

    Lease time is the server's ``clock_timestamp()``. Concurrent first uses on one event
    loop share one connection, made once under a lock, and the layout is created or
    migrated once (under an advisory lock, for other processes). Every failure of the
    driver or the server reaches the caller as :class:`StoreError`.
    """

    def __init__(self, url: str) -> None:
        self.url = masked_url(url)
        self._dsn = url
        self._conns: dict[int, Any] = {}
        self._locks: dict[int, asyncio.Lock] = {}  # one statement at a time, per connection
        self._connecting: dict[int, asyncio.Lock] = {}
        self._opening: dict[int, asyncio.Lock] = {}
        self._layout_ready = False

    async def _connection(self) -> tuple[Any, asyncio.Lock]:
        loop_id = id(asyncio.get_running_loop())
        conn = self._conns.get(loop_id)
        if conn is not None and not conn.closed:
            return conn, self._locks[loop_id]
        async with self._connecting.setdefault(loop_id, asyncio.Lock()):
            conn = self._conns.get(loop_id)
            if conn is None or conn.closed:
                try:
                    import psycopg
                except ImportError as exc:
                    raise StoreError(needs_extra("ORCH_STORE_URL names PostgreSQL, which",
                                                 "postgres", "psycopg")) from exc
                try:
                    conn = await psycopg.AsyncConnection.connect(
                        self._dsn, connect_timeout=10, autocommit=True)
                except psycopg.Error as exc:
                    raise StoreError(f"run store {self.url}: cannot connect: "
                                     f"{_first_line(exc)}. Check the server is up "
                                     "and ORCH_STORE_URL is right.") from exc
                self._conns[loop_id] = conn
                self._locks.setdefault(loop_id, asyncio.Lock())
        return conn, self._locks[loop_id]

    async def close(self) -> None:
        conn = self._conns.pop(id(asyncio.get_running_loop()), None)
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()

    def _announce(self, channel: str, key: str) -> list[Statement]:
        # delivered to listeners when the transaction commits (and only then)
        return [("SELECT pg_notify(?, ?)", (channel, key))]

    async def connect_listener(self) -> Any:
        """A connection of its own for ``LISTEN`` (orchestration/store/_feed.py)."""
        import psycopg

        try:
            return await psycopg.AsyncConnection.connect(self._dsn, connect_timeout=10,
                                                         autocommit=True)
        except psycopg.Error as exc:
            raise StoreError(f"run store {self.url}: cannot connect: {_first_line(exc)}") from exc

    @staticmethod
    def _pg(sql: str) -> str:
        return (sql.replace(" IS ?", " IS NOT DISTINCT FROM ?").replace("?", "%s")
                .replace("dagwright_now()", _PG_CLOCK)
                .replace("dagwright_clock()", "'postgres'"))

    @contextlib.asynccontextmanager
    async def _session(self, what: str) -> AsyncIterator[Any]:
        """The connection, alone, with any driver failure turned into :class:`StoreError`."""
        import psycopg

        conn, lock = await self._connection()
        async with lock:
            try:
                yield conn
            except psycopg.errors.LockNotAvailable as exc:  # the bound of _bound_hold
                raise RunLeased(
                    f"run store {self.url}: {what} waited too long for a run's record that "
                    "another process is writing and has not finished (a process paused in "
                    "the middle of a write); nothing was changed. The server ends such a "
                    "write within ORCH_STORE_LEASE_S once that process is idle: try again "
                    "then.") from exc
            except psycopg.Error as exc:
                raise StoreError(f"run store {self.url}: {what} failed: {_first_line(exc)}"
                                 ) from exc

    async def _transaction(
        self, statements: list[Statement], *, hold_s: float | None = None
    ) -> tuple[list[int], list[tuple[Any, ...]]]:
        async with self._session("write") as conn, conn.transaction():
            if hold_s is not None:
                await self._bound_hold(conn, hold_s)
            counts: list[int] = []
            rows: list[tuple[Any, ...]] = []
            for sql, params in statements:
                cursor = await conn.execute(self._pg(sql), params)
                counts.append(cursor.rowcount)
                rows = list(await cursor.fetchall()) if cursor.description else []
            return counts, rows

    async def _write_many(self, groups: list[tuple[str, list[Sequence[Any]]]], *,
                          guard: Statement | None = None, durable: bool = False) -> None:
        async with self._session("write") as conn, conn.transaction(), conn.cursor() as cursor:
            if guard is not None:  # (durable: in the same round trip)
                await self._bound_hold(cursor, guard[1][0], durable=durable)
            elif durable:
                await cursor.execute("SET LOCAL synchronous_commit = on")
            if guard is not None:
                await cursor.execute(self._pg(guard[0]), guard[1])
                if cursor.rowcount != 1:
                    raise _lease_lost(self.url, guard)  # rolls the transaction back
            for sql, rows in groups:
                await cursor.executemany(self._pg(sql), rows)
                _check_counted(self.url, sql, len(rows), cursor.rowcount)

    @staticmethod
    async def _bound_hold(executor: Any, hold_s: float, *, durable: bool = False) -> None:
        """Bound, by ``hold_s`` (the lease), how long this transaction waits for a lock
        and how long it may keep its own while it waits on this process.

        A transaction that locks a run's row (the guard of a holder's write, a takeover)
        belongs to a process that may be frozen inside it (a GC pause, a suspended VM)
        for any length of time; without bounds, every process resuming the run would
        wait on that lock as long. Waiting longer than the lease is :class:`RunLeased`
        (nothing changed); a transaction idle that long between statements is ended by
        the server, committing nothing — a marker it held was never written and its call
        never sent. (A process frozen in the middle of a pipelined statement batch is
        not "idle" to the server: its write ends when it wakes or dies, and the others'
        waits end by the first bound meanwhile.)

        ``durable`` also makes this commit wait for the disk whatever the server's
        default (``SET LOCAL synchronous_commit = on``): the marker of a side effect."""
        limit = str(max(1, math.ceil(hold_s * 1000)))  # milliseconds
        await executor.execute(
            "SELECT set_config('idle_in_transaction_session_timeout', %s, true), "
            "set_config('lock_timeout', %s, true)"
            + (", set_config('synchronous_commit', 'on', true)" if durable else ""),
            (limit, limit))

    async def _fetch(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        async with self._session("read") as conn, conn.transaction():
            cursor = await conn.execute(self._pg(sql), params)
            return list(await cursor.fetchall())

    async def _tables(self) -> set[str]:
        rows = await self._fetch(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = "
            "current_schema()")
        return {r[0] for r in rows}

    async def _ensure_layout(self) -> None:
        """Create or migrate the layout (under the advisory lock :meth:`open` holds)."""
        tables = await self._tables()
        version = (_layout_version(self.url, await self._fetch(_VERSION_QUERY))
                   if "dagwright_meta" in tables else None)
        for transaction in _layout_changes(self.url, tables, version):
            await self._transaction(transaction)

    async def open(self) -> None:
        """Connect and create or migrate the layout: once per store, one process at a time."""
        async with self._opening.setdefault(id(asyncio.get_running_loop()), asyncio.Lock()):
            await self._connection()
            if self._layout_ready:
                return
            async with self._session("open") as conn:
                await conn.execute("SELECT pg_advisory_lock(7367240563)")
            try:
                await self._ensure_layout()
            finally:
                with contextlib.suppress(StoreError):
                    async with self._session("open") as conn:
                        await conn.execute("SELECT pg_advisory_unlock(7367240563)")
            self._layout_ready = True


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
