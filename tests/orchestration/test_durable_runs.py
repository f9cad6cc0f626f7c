"""Durable runs: a run survives its process, and no side effect happens twice.

The crash tests run the engine in a real subprocess, kill it with SIGKILL while a
non-idempotent call is in flight at a loopback tool that counts what it executed, and
resume the run in another process. They run against SQLite and a real PostgreSQL.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from orchestration import (
    Catalog,
    ConfigError,
    DagwrightError,
    Orchestrator,
    OrchestratorConfig,
    ScriptedLLM,
)
from orchestration.errors import RunLeased, RunNotFound, StoreError
from orchestration.store import MemoryStore
from tests import ROOT
from tests.support.side_effects import SideEffectTools, pay_plan

QUERY = "pay for one share and file the receipt"


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh store of each persistent kind (PostgreSQL: a new database per test)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/runs.db"
    server = request.getfixturevalue("postgres_server")
    return str(server.create_database(f"runs_{uuid.uuid4().hex[:10]}"))


def child(command: str, store: str, run_id: str, tools: SideEffectTools,
          plan: dict[str, Any]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.durable_child", command, store, run_id,
         json.dumps(tools.catalog()), json.dumps(plan)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)})


def finished(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def kill_mid_call(store: str, run_id: str, tools: SideEffectTools, plan: dict[str, Any]) -> None:
    """Start the run in a subprocess and SIGKILL it while the payment is in flight."""
    tools.hold.set()
    proc = child("run", store, run_id, tools, plan)
    try:
        assert tools.arrived.wait(30), "the payment never reached the tool"
    finally:
        proc.kill()
        proc.wait(10)
    assert proc.returncode == -9
    tools.hold.clear()
    tools.release.set()


# --- crash and resume, in real processes ----------------------------------------------------

@pytest.mark.slow
def test_a_crash_during_a_payment_without_a_key_is_resumed_as_outcome_unknown(
    store_url: str, tools: SideEffectTools,
) -> None:
    run_id = f"crash-{uuid.uuid4().hex[:8]}"
    kill_mid_call(store_url, run_id, tools, pay_plan("pay"))
    assert tools.executed == {"/quote": 1, "/pay": 1}

    result = finished(child("resume", store_url, run_id, tools, pay_plan("pay")))

    # nothing was sent again: the quote came from the store, the payment is not repeated
    assert tools.executed == {"/quote": 1, "/pay": 1}
    steps = result["steps"]
    assert steps["quote"]["status"] == "succeeded" and steps["quote"]["output"]["price"] == 250.0
    pay = steps["pay"]
    assert pay["status"] == "unknown"
    assert pay["error"]["code"] == "OUTCOME_UNKNOWN"
    assert pay["error"]["details"]["request"] == {"amount": 250.0, "to": "broker"}
    assert steps["receipt"]["status"] == "skipped"
    assert "unknown outcome" in steps["receipt"]["skipped_reason"]
    assert result["status"] == "partial"

    # resuming a finished run returns it as stored and sends nothing
    again = finished(child("resume", store_url, run_id, tools, pay_plan("pay")))
    assert again["steps"]["pay"]["status"] == "unknown" and again["status"] == "partial"
    assert tools.executed == {"/quote": 1, "/pay": 1}


@pytest.mark.slow
def test_a_crash_during_a_keyed_payment_is_resent_with_the_same_key_and_executes_once(
    store_url: str, tools: SideEffectTools,
) -> None:
    run_id = f"keyed-{uuid.uuid4().hex[:8]}"
    kill_mid_call(store_url, run_id, tools, pay_plan("pay_keyed"))
    assert tools.executed == {"/quote": 1, "/pay_keyed": 1}

    result = finished(child("resume", store_url, run_id, tools, pay_plan("pay_keyed")))

    assert result["status"] == "succeeded", result["error"]
    keyed = [(key, body) for path, key, body in tools.requests if path == "/pay_keyed"]
    assert len(keyed) == 2 and keyed[0] == keyed[1] and keyed[0][0]  # same request, same key
    assert tools.executed == {"/quote": 1, "/pay_keyed": 1, "/receipt": 1}
    pay = result["steps"]["pay"]
    assert pay["output"] == {"paid": 250.0, "number": 1}  # the first execution's answer
    assert pay["attempts"][-1]["note"] == "resumed: re-sent with the same idempotency key"


# --- the same run id never runs twice ------------------------------------------------------

def _catalog(tools: SideEffectTools) -> Catalog:
    return Catalog.from_dict(tools.catalog(), source="side-effect tools")


def _orchestrator(tools: SideEffectTools, store: str, **config: Any) -> Orchestrator:
    cfg = OrchestratorConfig(store_url=store, synthesis_enabled=False, **config)
    return Orchestrator(catalog=_catalog(tools), llm=ScriptedLLM(["unused"]), config=cfg)


def test_a_finished_run_id_returns_the_stored_result_without_running(
    store_url: str, tools: SideEffectTools,
) -> None:
    orch = _orchestrator(tools, store_url)
    first = orch.run(QUERY, plan=pay_plan("pay"), run_id="order-1")
    assert first.status == "succeeded"
    assert tools.executed == {"/quote": 1, "/pay": 1, "/receipt": 1}

    again = _orchestrator(tools, store_url).run(QUERY, plan=pay_plan("pay"), run_id="order-1")
    assert again.to_dict() == first.to_dict()
    assert tools.executed == {"/quote": 1, "/pay": 1, "/receipt": 1}

    with pytest.raises(DagwrightError, match="already exists for another query"):
        orch.run("something else", plan=pay_plan("pay"), run_id="order-1")


def test_run_history_lists_runs_newest_first_and_reads_one_back(
    store_url: str, tools: SideEffectTools,
) -> None:
    orch = _orchestrator(tools, store_url)
    orch.run(QUERY, plan=pay_plan("pay"), run_id="h-1")
    bad = {"steps": [{"id": "q", "tool": "stocks", "capability": "quote", "params": {}}]}
    orch.run(QUERY, plan=bad, run_id="h-2")

    runs = orch.list_runs()
    assert [r.run_id for r in runs] == ["h-2", "h-1"]
    assert runs[1].status == "succeeded" and runs[1].steps == {"succeeded": 3}
    assert runs[0].status == "failed" and runs[0].steps == {"failed": 1}
    assert [r.run_id for r in orch.list_runs(status="failed")] == ["h-2"]
    assert len(orch.list_runs(limit=1)) == 1

    stored = orch.get_run("h-1")
    assert stored is not None and stored.steps["pay"].output == {"paid": 250.0, "number": 1}
    assert [a.layer for a in stored.steps["pay"].attempts] == ["plan"]
    assert orch.get_run("nope") is None
    with pytest.raises(RunNotFound, match="no run 'nope'"):
        orch.resume("nope")


async def test_the_same_run_id_twice_at_once_never_starts_two_runs(tools: SideEffectTools,
                                                                   tmp_path: Path) -> None:
    orch = _orchestrator(tools, f"sqlite:///{tmp_path}/runs.db")
    tools.hold.set()
    first = asyncio.create_task(orch.arun(QUERY, plan=pay_plan("pay"), run_id="twice"))
    await asyncio.to_thread(tools.arrived.wait, 30)
    with pytest.raises(RunLeased, match="being executed by another process"):
        await orch.arun(QUERY, plan=pay_plan("pay"), run_id="twice")
    tools.release.set()
    assert (await first).status == "succeeded"
    assert tools.executed["/pay"] == 1
    await orch.aclose()


# --- a store that cannot be used is a clear error before anything is sent -------------------

def test_a_corrupt_database_file_is_reported_and_left_untouched(
    tools: SideEffectTools, tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    path.write_bytes(b"this is not a database\n" * 100)
    before = path.read_bytes()
    with pytest.raises(StoreError, match="is not a SQLite database"):
        _orchestrator(tools, f"sqlite:///{path}").run(QUERY, plan=pay_plan("pay"))
    assert path.read_bytes() == before
    assert tools.executed == {}


def test_a_foreign_database_is_reported_and_left_untouched(
    tools: SideEffectTools, tmp_path: Path,
) -> None:
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE dagwright_runs (id INTEGER)")  # not made by dagwright
        conn.execute("CREATE TABLE invoices (id INTEGER)")
    with pytest.raises(StoreError, match="not made by dagwright"):
        _orchestrator(tools, f"sqlite:///{path}").run(QUERY, plan=pay_plan("pay"))
    with sqlite3.connect(path) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert tables == {"dagwright_runs", "invoices"}
    assert tools.executed == {}


def test_a_store_that_is_down_fails_the_run_at_start(tools: SideEffectTools) -> None:
    with pytest.raises(StoreError, match=r"run store postgresql://u:\*\*\*\*@127\.0\.0\.1:1/db: "
                                         r"cannot connect"):
        _orchestrator(tools, "postgresql://u:secret@127.0.0.1:1/db").run(QUERY, plan=pay_plan())
    assert tools.executed == {}


@pytest.mark.parametrize("url", ["redis://x", "sqlite://", "nonsense"])
def test_an_unknown_store_url_names_the_setting(tools: SideEffectTools, url: str) -> None:
    with pytest.raises(ConfigError, match="ORCH_STORE_URL"):
        _orchestrator(tools, url)


class FailingStore(MemoryStore):
    """A store whose writes start failing on demand (a disk that fills up mid-run)."""

    def __init__(self) -> None:
        super().__init__()
        self.failing = False

    async def write(self, batch: list[Any], **fence: Any) -> None:
        if self.failing:
            raise StoreError("run store memory://: write failed: database or disk is full")
        await super().write(batch, **fence)


def test_a_store_that_fails_mid_run_never_sends_an_unrecorded_side_effect(
    tools: SideEffectTools,
) -> None:
    store = FailingStore()
    cfg = OrchestratorConfig(synthesis_enabled=False)
    orch = Orchestrator(catalog=_catalog(tools), llm=ScriptedLLM(["unused"]), config=cfg,
                        store=store)
    real_quote = tools.handle

    def quote_then_fill_the_disk(method: str, path: str, body: dict[str, Any],
                                 key: str | None) -> tuple[int, dict[str, Any]]:
        answer = real_quote(method, path, body, key)
        if path == "/quote":
            store.failing = True  # the disk fills while the quote is answered
        return answer

    tools.handle = quote_then_fill_the_disk  # type: ignore[method-assign]
    with pytest.raises(StoreError, match="disk is full") as caught:
        orch.run(QUERY, plan=pay_plan("pay"), run_id="full-disk")

    # the payment was not sent: its marker could not be written first
    assert tools.executed == {"/quote": 1}
    result = caught.value.result
    assert result is not None and result.run_id == "full-disk"
    # the run stopped at the store's first failed write: the payment's marker, or a
    # buffered write just before it (which of the two comes first is a matter of timing)
    assert result.status == "failed" and "run store failed" in (result.error or "")
    pay = result.steps.get("pay")
    if pay is not None:
        assert pay.status == "failed" and pay.error is not None
        assert pay.error.code == "STORE_UNAVAILABLE" and not pay.error.request_sent
        assert all(a.outcome == "not_sent" for a in pay.attempts)
    assert "receipt" not in result.steps or result.steps["receipt"].status == "skipped"


# --- retention --------------------------------------------------------------------------------

def test_retention_deletes_old_finished_runs(tools: SideEffectTools, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/runs.db"
    orch = _orchestrator(tools, url)
    orch.run(QUERY, plan=pay_plan("pay"), run_id="old")
    with sqlite3.connect(tmp_path / "runs.db") as conn:
        conn.execute("UPDATE dagwright_runs SET finished_at = ?, started_at = ? WHERE run_id = 'old'",
                     (time.time() - 10 * 86400, time.time() - 10 * 86400))
    keeper = _orchestrator(tools, url, store_retention_days=7)
    keeper.run(QUERY, plan=pay_plan("pay"), run_id="new")
    assert [r.run_id for r in keeper.list_runs()] == ["new"]


# --- the CLI reads the history ------------------------------------------------------------

def test_the_cli_lists_shows_and_resumes_stored_runs(tools: SideEffectTools, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/runs.db"
    _orchestrator(tools, url).run(QUERY, plan=pay_plan("pay"), run_id="cli-1")
    env = {**os.environ, "ORCH_STORE_URL": url}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "orchestration", *args], env=env,
                              capture_output=True, text=True, timeout=60)

    listed = cli("runs", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    (run,) = json.loads(listed.stdout)
    assert (run["run_id"], run["status"], run["steps"]) == ("cli-1", "succeeded", {"succeeded": 3})
    shown = cli("runs", "show", "cli-1")
    assert shown.returncode == 0
    lines = [line for line in shown.stdout.splitlines() if "✔" in line]
    assert [line.split()[1] for line in lines] == ["quote", "pay", "receipt"]  # plan order
    missing = cli("runs", "show", "nope")
    assert missing.returncode == 2 and "no run 'nope'" in missing.stderr
    no_catalog = cli("resume", "cli-1")
    assert no_catalog.returncode == 2 and "ORCH_CATALOG" in no_catalog.stderr


# --- the layout is versioned --------------------------------------------------------------

def test_an_older_store_layout_is_migrated_and_a_newer_one_refused(
    tools: SideEffectTools, tmp_path: Path,
) -> None:
    from orchestration.store._base import SCHEMA_VERSION
    from orchestration.store._sql import _SCHEMA_V1  # the layout of dagwright's first store

    old = tmp_path / "v1.db"
    with sqlite3.connect(old) as conn:
        for statement in _SCHEMA_V1:
            conn.execute(statement)
        conn.execute("INSERT INTO dagwright_meta (key, value) VALUES ('schema_version', '1')")
    orch = _orchestrator(tools, f"sqlite:///{old}")
    result = orch.run(QUERY, plan=pay_plan("pay"), run_id="migrated")
    assert result.status == "succeeded"
    assert [e.type for e in orch.get_events("migrated")][-1] == "run_finished"  # v2's events
    with sqlite3.connect(old) as conn:
        assert conn.execute("SELECT value FROM dagwright_meta").fetchone() == (
            str(SCHEMA_VERSION),)
        # v7's requests to runs other processes execute: there, empty
        assert conn.execute("SELECT count(*) FROM dagwright_requests").fetchone() == (0,)
        # v6's plan cache: the table is there, empty (ORCH_PLAN_CACHE is off)
        assert conn.execute("SELECT count(*) FROM dagwright_plan_cache").fetchone() == (0,)
        # v5's runs in context: the columns and the sessions table are there
        assert conn.execute("SELECT tenant, session_id FROM dagwright_runs "
                            "WHERE run_id = 'migrated'").fetchone() == ("", None)
        assert conn.execute("SELECT count(*) FROM dagwright_sessions").fetchone() == (0,)
        # v4's payloads of Temporal runs (claim-check): the table is there, empty
        assert conn.execute("SELECT count(*) FROM dagwright_payloads").fetchone() == (0,)
        # v3's fenced lease: the run was created at generation 1 and released at its end
        assert conn.execute("SELECT lease_generation, lease_owner FROM dagwright_runs "
                            "WHERE run_id = 'migrated'").fetchone() == (1, None)

    with sqlite3.connect(old) as conn:
        conn.execute("UPDATE dagwright_meta SET value = '99'")
    with pytest.raises(StoreError, match="written by a newer dagwright"):
        _orchestrator(tools, f"sqlite:///{old}").run(QUERY, plan=pay_plan("pay"))
