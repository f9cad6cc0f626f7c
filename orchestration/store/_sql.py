"""The SQL run stores: ``sqlite:///PATH`` (embedded, the default) and ``postgresql://``.

Both keep the same tables (prefixed ``dagwright_``) and differ only in how they connect
and run a statement: SQLite through the standard library in a worker thread (WAL mode, so
several processes on one machine can share the file), PostgreSQL through psycopg 3's
async connections (one per event loop). The layout is created on first use and migrated
when it is older than this code (:data:`SCHEMA_VERSION`); a database that holds other
tables and not ours, or a file that is not a database, is reported and never touched.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from pydantic_core import to_json

from orchestration.errors import StoreError
from orchestration.events import RunEvent
from orchestration.result import Attempt, StepResult
from orchestration.state import RunState
from orchestration.store._base import (
    SCHEMA_VERSION,
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

__all__ = ["PostgresStore", "SqliteStore", "masked_url"]

Statement = tuple[str, Sequence[Any]]

_TABLES = ("dagwright_meta", "dagwright_runs", "dagwright_steps", "dagwright_attempts",
           "dagwright_calls", "dagwright_events")

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
}
"""Statements that bring a layout of version ``n`` to ``n + 1`` (a new store is created at
version 1 and brought up the same way, so every migration runs in every test)."""

_FINISHED = ("succeeded", "partial", "failed", "cancelled")


def masked_url(url: str) -> str:
    """``url`` with its password replaced, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":****@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def _encode_event_data(data: dict[str, Any]) -> str:
    """An event's data as JSON text (a value JSON has no form for, as its text).

    pydantic-core's encoder: a run writes three events per step, and for these small
    dicts it takes a fifth of the time of the standard library's (which enters Python
    code on every call before reaching its C encoder)."""
    return to_json(data, fallback=str).decode()


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
                "INSERT INTO dagwright_calls (run_id, step_id, attempt, layer, params, "
                "idempotency_key, started_at) VALUES (?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (run_id, step_id, attempt) DO NOTHING",
                (op.run_id, m.step_id, m.attempt, m.layer, json.dumps(m.params),
                 m.idempotency_key, m.started_at)))
        elif isinstance(op, CallFinished):
            out.append((
                "UPDATE dagwright_calls SET finished_at = ? "
                "WHERE run_id = ? AND step_id = ? AND attempt = ?",
                (now, op.run_id, op.step_id, op.attempt)))
    return out


class _SQLStore(ABC):
    """Everything but connecting and executing, shared by SQLite and PostgreSQL."""

    url: str

    # --- what a backend provides ------------------------------------------------------
    @abstractmethod
    async def _transaction(self, statements: list[Statement]) -> list[int]:
        """Run ``statements`` in one transaction; the row count of each."""

    @abstractmethod
    async def _write_many(self, groups: list[tuple[str, list[Sequence[Any]]]]) -> None:
        """Run each statement with each of its parameter rows, all in one transaction."""

    @abstractmethod
    async def _fetch(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]: ...

    @abstractmethod
    async def _tables(self) -> set[str]:
        """Names of the tables in the database (to tell ours, empty and foreign apart)."""

    # --- layout ---------------------------------------------------------------------
    async def _ensure_layout(self) -> None:
        tables = await self._tables()
        ours = {t for t in tables if t.startswith("dagwright_")}
        if "dagwright_meta" not in tables:
            if ours:
                raise StoreError(f"run store {self.url}: it has dagwright tables but no "
                                 "dagwright_meta version record; it was not made by dagwright "
                                 "or is damaged. Point ORCH_STORE_URL elsewhere.")
            await self._transaction([*((s, ()) for s in _SCHEMA_V1), (
                "INSERT INTO dagwright_meta (key, value) VALUES ('schema_version', '1')", ())])
            version = 1
        else:
            version = await self._version()
        if version > SCHEMA_VERSION:
            raise StoreError(f"run store {self.url} was written by a newer dagwright (layout "
                             f"version {version}, this one knows {SCHEMA_VERSION}); upgrade "
                             "dagwright or use another store.")
        for current in range(version, SCHEMA_VERSION):
            await self._transaction([*((s, ()) for s in _MIGRATIONS[current]), (
                "UPDATE dagwright_meta SET value = ? WHERE key = 'schema_version'",
                (str(current + 1),))])

    async def _version(self) -> int:
        rows = await self._fetch("SELECT value FROM dagwright_meta WHERE key = 'schema_version'")
        try:
            return int(rows[0][0])
        except (IndexError, ValueError) as exc:
            raise StoreError(f"run store {self.url}: its schema version record is missing or "
                             "unreadable; the database is damaged.") from exc

    # --- the interface --------------------------------------------------------------
    async def create_run(self, write: SaveRun, *, owner: str, lease_until: float) -> bool:
        (count,) = await self._transaction([(
            "INSERT INTO dagwright_runs (run_id, query, status, started_at, finished_at, "
            "updated_at, state, steps, error, lease_owner, lease_expires_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (run_id) DO NOTHING",
            (write.run_id, write.query, write.status, write.started_at, write.finished_at,
             time.time(), write.state_json, json.dumps(write.steps), write.error, owner,
             lease_until))])
        return count == 1

    async def write(self, batch: list[Write]) -> None:
        if batch:
            await self._write_many(_write_groups(batch))

    async def load(self, run_id: str) -> StoredRun | None:
        rows = await self._fetch(
            "SELECT state, lease_owner, lease_expires_at FROM dagwright_runs WHERE run_id = ?",
            (run_id,))
        if not rows:
            return None
        state_json, owner, until = rows[0]
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
            if step_id not in steps
        ]
        return StoredRun(state, attempts, outputs, calls, owner, until)

    async def load_events(self, run_id: str, *, after: int = 0) -> list[RunEvent]:
        rows = await self._fetch(
            "SELECT seq, type, at, data FROM dagwright_events WHERE run_id = ? AND seq > ? "
            "ORDER BY seq", (run_id, after))
        return [RunEvent(run_id=run_id, seq=seq, type=kind, at=at, data=json.loads(data))
                for seq, kind, at, data in rows]

    async def acquire(self, run_id: str, *, owner: str, now: float, until: float,
                      steal_from: str | None = None) -> bool:
        (count,) = await self._transaction([(
            "UPDATE dagwright_runs SET lease_owner = ?, lease_expires_at = ? WHERE run_id = ? "
            "AND (lease_owner IS NULL OR lease_owner = ? OR lease_owner = ? "
            "OR lease_expires_at IS NULL OR lease_expires_at < ?)",
            (owner, until, run_id, owner, steal_from or owner, now))])
        return count == 1

    async def release(self, run_id: str, *, owner: str) -> None:
        await self._transaction([(
            "UPDATE dagwright_runs SET lease_owner = NULL, lease_expires_at = NULL "
            "WHERE run_id = ? AND lease_owner = ?", (run_id, owner))])

    async def list_runs(self, *, status: str | None, limit: int) -> list[RunSummary]:
        where, params = ("WHERE status = ? ", (status, limit)) if status else ("", (limit,))
        rows = await self._fetch(
            "SELECT run_id, query, status, started_at, finished_at, steps, error "
            f"FROM dagwright_runs {where}ORDER BY started_at DESC LIMIT ?", params)
        return [RunSummary(run_id=r[0], query=r[1], status=r[2], started_at=r[3],
                           finished_at=r[4], steps=json.loads(r[5]), error=r[6]) for r in rows]

    async def delete_finished_before(self, cutoff: float) -> int:
        marks = ", ".join("?" for _ in _FINISHED)
        old = f"SELECT run_id FROM dagwright_runs WHERE status IN ({marks}) AND finished_at < ?"
        params = (*_FINISHED, cutoff)
        counts = await self._transaction([
            *((f"DELETE FROM {table} WHERE run_id IN ({old})", params)
              for table in ("dagwright_steps", "dagwright_attempts", "dagwright_calls",
                            "dagwright_events")),
            (f"DELETE FROM dagwright_runs WHERE run_id IN ({old})", params),
        ])
        return counts[-1]


class SqliteStore(_SQLStore):
    """A run store in one SQLite file (WAL mode: several processes on one machine)."""

    def __init__(self, url: str, path: Path) -> None:
        self.url = url
        self.path = path
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()  # one statement at a time on the shared connection

    async def open(self) -> None:
        """Open the file and create or migrate its layout."""
        await asyncio.to_thread(self._open)
        await self._ensure_layout()

    def _open(self) -> None:
        if self._conn is not None:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=10.0, isolation_level=None,
                                   check_same_thread=False)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"run store {self.url}: cannot open {self.path}: {exc}. Check the "
                             "directory exists and is writable, or set ORCH_STORE_URL.") from exc
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise StoreError(f"run store {self.url}: {self.path} is not a SQLite database "
                             f"({exc}); it was left untouched. Move it away or set "
                             "ORCH_STORE_URL to another file.") from exc
        self._conn = conn

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await asyncio.to_thread(conn.close)

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            self._open()
        assert self._conn is not None
        return self._conn

    def _run_transaction(self, statements: list[Statement]) -> list[int]:
        with self._lock:
            conn = self._connection()
            try:
                conn.execute("BEGIN IMMEDIATE")
                counts = [conn.execute(sql, params).rowcount for sql, params in statements]
                conn.execute("COMMIT")
                return counts
            except sqlite3.Error as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise StoreError(f"run store {self.url}: write failed: {exc}") from exc

    def _run_write_many(self, groups: list[tuple[str, list[Sequence[Any]]]]) -> None:
        with self._lock:
            conn = self._connection()
            try:
                conn.execute("BEGIN IMMEDIATE")
                for sql, rows in groups:
                    conn.executemany(sql, rows)
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise StoreError(f"run store {self.url}: write failed: {exc}") from exc

    def _run_fetch(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        with self._lock:
            try:
                return self._connection().execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                raise StoreError(f"run store {self.url}: read failed: {exc}") from exc

    async def _transaction(self, statements: list[Statement]) -> list[int]:
        return await asyncio.to_thread(self._run_transaction, statements)

    async def _write_many(self, groups: list[tuple[str, list[Sequence[Any]]]]) -> None:
        await asyncio.to_thread(self._run_write_many, groups)

    async def _fetch(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return await asyncio.to_thread(self._run_fetch, sql, params)

    async def _tables(self) -> set[str]:
        rows = await self._fetch("SELECT name FROM sqlite_master WHERE type = 'table'")
        return {r[0] for r in rows}



class PostgresStore(_SQLStore):
    """A run store in PostgreSQL (psycopg 3; one async connection per event loop)."""

    def __init__(self, url: str) -> None:
        self.url = masked_url(url)
        self._dsn = url
        self._conns: dict[int, Any] = {}
        self._locks: dict[int, asyncio.Lock] = {}

    async def _connection(self) -> tuple[Any, asyncio.Lock]:
        loop_id = id(asyncio.get_running_loop())
        conn = self._conns.get(loop_id)
        if conn is None or conn.closed:
            try:
                import psycopg
            except ImportError as exc:
                raise StoreError("ORCH_STORE_URL names PostgreSQL but psycopg is not installed: "
                                 "pip install 'dagwright[postgres]'") from exc
            try:
                conn = await psycopg.AsyncConnection.connect(
                    self._dsn, connect_timeout=10, autocommit=True)
            except psycopg.Error as exc:
                raise StoreError(f"run store {self.url}: cannot connect: "
                                 f"{str(exc).strip().splitlines()[0]}. Check the server is up "
                                 "and ORCH_STORE_URL is right.") from exc
            self._conns[loop_id] = conn
            self._locks[loop_id] = asyncio.Lock()
        return conn, self._locks[loop_id]

    async def close(self) -> None:
        conn = self._conns.pop(id(asyncio.get_running_loop()), None)
        if conn is not None:
            await conn.close()

    @staticmethod
    def _pg(sql: str) -> str:
        return sql.replace("?", "%s")

    async def _transaction(self, statements: list[Statement]) -> list[int]:
        import psycopg

        conn, lock = await self._connection()
        async with lock:
            try:
                async with conn.transaction():
                    counts = []
                    for sql, params in statements:
                        cursor = await conn.execute(self._pg(sql), params)
                        counts.append(cursor.rowcount)
                    return counts
            except psycopg.Error as exc:
                raise StoreError(f"run store {self.url}: write failed: {exc}") from exc

    async def _write_many(self, groups: list[tuple[str, list[Sequence[Any]]]]) -> None:
        import psycopg

        conn, lock = await self._connection()
        async with lock:
            try:
                async with conn.transaction(), conn.cursor() as cursor:
                    for sql, rows in groups:
                        await cursor.executemany(self._pg(sql), rows)
            except psycopg.Error as exc:
                raise StoreError(f"run store {self.url}: write failed: {exc}") from exc

    async def _fetch(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        import psycopg

        conn, lock = await self._connection()
        async with lock:
            try:
                async with conn.transaction():
                    cursor = await conn.execute(self._pg(sql), params)
                    return list(await cursor.fetchall())
            except psycopg.Error as exc:
                raise StoreError(f"run store {self.url}: read failed: {exc}") from exc

    async def _tables(self) -> set[str]:
        rows = await self._fetch(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = "
            "current_schema()")
        return {r[0] for r in rows}

    async def open(self) -> None:
        """Connect and create or migrate the layout (one process at a time)."""
        conn, lock = await self._connection()
        async with lock:  # concurrent first uses create the tables one after the other
            await conn.execute("SELECT pg_advisory_lock(7367240563)")
        try:
            await self._ensure_layout()
        finally:
            async with lock:
                await conn.execute("SELECT pg_advisory_unlock(7367240563)")
