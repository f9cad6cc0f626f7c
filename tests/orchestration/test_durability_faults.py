"""Durable runs under the faults real deployments have, in the spirit of Jepsen.

Every test here runs real processes against a real store (SQLite, or a real PostgreSQL
cluster on 127.0.0.1) and a loopback tool that counts what it *executed*, injects one
fault — a process frozen past its lease (SIGSTOP), a machine whose clock is 40 s ahead,
two processes resuming one run at once, concurrent first use of a fresh store, a
PostgreSQL crash on a server that commits asynchronously, a store folder removed or
filled mid-run — and asserts the one property that matters: no side effect is executed
twice, and every run ends in a state a person can act on (a result, or a typed error that
says what happened). docs/guarantees.md names each fault and the test here that proves it.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestration import Catalog, Orchestrator, OrchestratorConfig, ScriptedLLM
from orchestration.errors import RunNotFound, StoreError
from tests import ROOT
from tests.support.net import ServerUnavailable
from tests.support.postgres import PostgresServer, start_postgres
from tests.support.side_effects import SideEffectTools, pay_plan

QUERY = "pay for one share and file the receipt"
LEASE_S = 2.0
"""A short lease, so a frozen process loses its run within the test's time."""


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/runs.db"
    server = request.getfixturevalue("postgres_server")
    return str(server.create_database(f"faults_{uuid.uuid4().hex[:10]}"))


def child(command: str, store: str, run_id: str, tools: SideEffectTools, *,
          lease_s: float = 30.0, skew_s: float = 0.0) -> subprocess.Popen[str]:
    """A real process running (or resuming) the payment plan."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DAGWRIGHT_CHILD_LEASE_S": str(lease_s),
           "DAGWRIGHT_CHILD_CLOCK_SKEW_S": str(skew_s)}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.durable_child", command, store, run_id,
         json.dumps(tools.catalog()), json.dumps(pay_plan("pay"))],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def outcome(proc: subprocess.Popen[str], timeout_s: float = 60) -> dict[str, Any]:
    """What the process ended with: its result, or ``{"raised": CLASS, "message": ...}``."""
    out, err = proc.communicate(timeout=timeout_s)
    assert proc.returncode in (0, 3), f"exit {proc.returncode}\n{err[-3000:]}"
    answer: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return answer


def orchestrator(tools: SideEffectTools, url: str, **config: Any) -> Orchestrator:
    cfg = OrchestratorConfig(store_url=url, synthesis_enabled=False,
                             retry_base_delay_s=0.01, **config)
    return Orchestrator(catalog=Catalog.from_dict(tools.catalog(), source="side-effect tools"),
                        llm=ScriptedLLM(["unused"]), config=cfg)


# --- a process frozen past its lease ------------------------------------------------------

def test_a_process_frozen_past_its_lease_never_sends_after_another_took_the_run(
    store_url: str, tools: SideEffectTools,
) -> None:
    """A runs the quote (held at the tool), is frozen (SIGSTOP: a GC pause, a frozen VM)
    past its lease; B resumes and pays; A wakes up, finds at its next write that the run
    is B's, and stops without paying. Before fencing: /pay executed twice."""
    run_id = f"frozen-{uuid.uuid4().hex[:8]}"
    quote_arrived = tools.hold_first("/quote")
    a = child("run", store_url, run_id, tools, lease_s=LEASE_S)
    try:
        assert quote_arrived.wait(30), "A never reached the quote"
        time.sleep(0.5)  # A's buffered writes (its plan above all) reach the store
        os.kill(a.pid, signal.SIGSTOP)
        time.sleep(LEASE_S + 1.0)  # A's lease runs out by the store's clock
        b = outcome(child("resume", store_url, run_id, tools, lease_s=LEASE_S))
        assert b["status"] == "succeeded", (b["error"], b["steps"])
        assert tools.executed["/pay"] == 1
    finally:
        tools.release_first("/quote")
        os.kill(a.pid, signal.SIGCONT)
    a_end = outcome(a)
    assert a_end.get("raised") == "LeaseLost", a_end
    assert "no longer holds the run" in a_end["message"]
    assert tools.executed["/pay"] == 1  # never twice


# --- a machine whose clock is wrong ---------------------------------------------------------

def test_a_process_whose_clock_is_40s_ahead_cannot_take_a_live_run(
    store_url: str, tools: SideEffectTools,
) -> None:
    """Leases run on the store's clock: B, whose wall clock is 40 s ahead of A's (lease
    30 s), is refused A's live run instead of running it beside A. Before: both paid."""
    run_id = f"skew-{uuid.uuid4().hex[:8]}"
    quote_arrived = tools.hold_first("/quote")
    a = child("run", store_url, run_id, tools, lease_s=30.0)
    try:
        assert quote_arrived.wait(30), "A never reached the quote"
        b = outcome(child("resume", store_url, run_id, tools, lease_s=30.0, skew_s=40.0))
        assert b.get("raised") == "RunLeased", b
        assert "being executed by another process" in b["message"]
    finally:
        tools.release_first("/quote")
    assert outcome(a)["status"] == "succeeded"
    assert tools.executed["/pay"] == 1


# --- two processes resume one run at once ------------------------------------------------------

def test_two_processes_resuming_one_run_at_once_pay_once(
    store_url: str, tools: SideEffectTools,
) -> None:
    run_id = f"twice-{uuid.uuid4().hex[:8]}"
    quote_arrived = tools.hold_first("/quote")
    a = child("run", store_url, run_id, tools, lease_s=LEASE_S)
    assert quote_arrived.wait(30), "A never reached the quote"
    time.sleep(0.5)  # A's buffered writes (its plan above all) reach the store
    a.kill()  # A dies holding the run before the payment
    a.communicate(timeout=10)
    tools.release_first("/quote")
    pay_arrived = tools.hold_first("/pay")  # the winner pays and waits there
    resumers = [child("resume", store_url, run_id, tools, lease_s=LEASE_S) for _ in range(2)]
    try:
        assert pay_arrived.wait(30), "no resumer reached the payment"
        # the loser ends while the winner holds the run (its payment held at the tool)
        deadline = time.monotonic() + 30
        while all(p.poll() is None for p in resumers) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        tools.release_first("/pay")
    ends = [outcome(p) for p in resumers]
    assert sorted(e.get("raised", e.get("status")) for e in ends) == ["RunLeased", "succeeded"]
    assert tools.executed["/pay"] == 1


# --- concurrent first use of a fresh store -------------------------------------------------

@pytest.mark.parametrize("runs", [5, 50])
def test_concurrent_first_runs_on_a_fresh_store_all_finish(
    store_url: str, tools: SideEffectTools, runs: int,
) -> None:
    """The store opens once under a lock (before: five concurrent first runs on a fresh
    PostgreSQL store hung forever)."""
    orch = orchestrator(tools, store_url)

    async def all_runs() -> list[Any]:
        return await asyncio.wait_for(asyncio.gather(
            *(orch.arun(QUERY, plan=pay_plan("pay"), run_id=f"first-{i}") for i in range(runs))
        ), timeout=120)

    results = asyncio.run(all_runs())
    assert [r.status for r in results] == ["succeeded"] * runs
    assert tools.executed["/pay"] == runs


# --- PostgreSQL as production runs it, crashed mid-run ------------------------------------------

@pytest.fixture(scope="module")
def async_commit_postgres() -> Iterator[PostgresServer]:
    """A cluster that writes to disk (fsync on) but commits asynchronously by default, as
    many production servers do for speed, with a WAL writer slow enough that a crash loses
    the last commits (what ``synchronous_commit = off`` allows)."""
    try:
        with start_postgres(settings={
            "fsync": "on", "full_page_writes": "on", "synchronous_commit": "off",
            "wal_writer_delay": "'10s'", "wal_writer_flush_after": "'1GB'",
        }) as server:
            yield server
    except ServerUnavailable as exc:
        pytest.skip(f"real PostgreSQL not available: {exc}")


def test_a_postgres_crash_mid_payment_never_loses_the_marker(
    async_commit_postgres: PostgresServer, tools: SideEffectTools,
) -> None:
    """The payment's marker is committed with ``synchronous_commit = on`` whatever the
    server's default, so a crash right after the tool executed it cannot lose it: the
    resumed run reports the payment's outcome as unknown instead of paying again.
    Before: /pay executed twice in 2 of 20 runs. Three rounds, each a real crash."""
    server = async_commit_postgres
    url = server.create_database(f"crash_{uuid.uuid4().hex[:8]}")
    for round_number in range(3):
        run_id = f"crash-{round_number}"
        tools.executed.clear()
        pay_arrived = tools.hold_first("/pay")
        a = child("run", url, run_id, tools)
        try:
            assert pay_arrived.wait(30), "the payment never reached the tool"
            server.crash()  # the payment executed; its answer is still held back
        finally:
            tools.release_first("/pay")
        a_end = outcome(a)
        assert a_end.get("raised") == "StoreError", a_end
        server.restart()
        b = outcome(child("resume", url, run_id, tools))
        assert b["steps"]["pay"]["status"] == "unknown", b["steps"]["pay"]
        assert b["steps"]["pay"]["error"]["code"] == "OUTCOME_UNKNOWN"
        assert tools.executed["/pay"] == 1, f"round {round_number}: paid twice"


def test_a_dead_postgres_is_a_store_error_not_a_driver_exception(
    async_commit_postgres: PostgresServer, tools: SideEffectTools,
) -> None:
    server = async_commit_postgres
    orch = orchestrator(tools, server.create_database(f"dead_{uuid.uuid4().hex[:8]}"))
    assert orch.run(QUERY, plan=pay_plan("pay")).status == "succeeded"
    server.crash()
    try:
        with pytest.raises(StoreError, match="run store postgresql://") as caught:
            orch.run(QUERY, plan=pay_plan("pay"))
        assert "****" in str(caught.value) or server.password not in str(caught.value)
    finally:
        server.restart()
    assert tools.executed["/pay"] == 1


# --- a SQLite store removed or filled mid-run ------------------------------------------------

def _hold_every(tools: SideEffectTools, path: str) -> tuple[threading.Event, threading.Event]:
    """Hold every request to ``path`` until the returned release is set; the first event
    is set once ``count`` requests wait (see the callers)."""
    release = threading.Event()
    arrived = threading.Event()
    waiting = [0]
    lock = threading.Lock()
    real = tools.handle

    def held(method: str, p: str, body: dict[str, Any], key: str | None) -> Any:
        answer = real(method, p, body, key)
        if p == path:
            with lock:
                waiting[0] += 1
                if waiting[0] >= tools.hold_count:  # type: ignore[attr-defined]
                    arrived.set()
            release.wait(60)
        return answer

    tools.handle = held  # type: ignore[method-assign]
    return arrived, release


def _runs_during(tools: SideEffectTools, orch: Orchestrator, runs: int, fault: Any) -> list[Any]:
    """Start ``runs`` runs; once every one waits at its quote, inject ``fault``, let them on."""
    tools.hold_count = runs  # type: ignore[attr-defined]
    arrived, release = _hold_every(tools, "/quote")

    async def all_runs() -> list[Any]:
        tasks = [asyncio.ensure_future(orch.arun(QUERY, plan=pay_plan("pay"),
                                                 run_id=f"run-{i}")) for i in range(runs)]
        await asyncio.wait_for(asyncio.to_thread(arrived.wait, 30), timeout=40)
        fault()
        release.set()
        return await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 120)

    try:
        return asyncio.run(all_runs())
    finally:
        release.set()


def test_a_sqlite_store_removed_mid_run_stops_every_run_before_it_pays(
    tools: SideEffectTools, tmp_path: Path,
) -> None:
    """Before: 20 of 20 runs ended `succeeded`, 40 side effects sent into a store that no
    longer existed, and every later resume said RunNotFound."""
    folder = tmp_path / "store"
    url = f"sqlite:///{folder}/runs.db"
    # a tool pool of 20 connections (2 x max_concurrency), so that all 20 quotes reach the
    # tool and wait there together; with 16, four waited for a connection the held ones
    # kept until they timed out, and the tool's circuit breaker rightly opened
    orch = orchestrator(tools, url, max_concurrency=10)
    ends = _runs_during(tools, orch, 20, lambda: shutil.rmtree(folder))
    assert all(isinstance(e, StoreError) for e in ends), ends
    assert all("is gone" in str(e) or "removed" in str(e) for e in ends)
    assert tools.executed["/pay"] == 0  # nothing sent without a record
    for end in ends:  # each error carries the run's result: failed, saying why
        assert end.result is not None and end.result.status == "failed"
    with pytest.raises(RunNotFound, match="the store lost it"):
        orchestrator(tools, url).resume("run-0")


def test_a_sqlite_store_whose_disk_fills_mid_run_never_pays_unrecorded(
    tools: SideEffectTools, tmp_path: Path,
) -> None:
    mount = tmp_path / "small-disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {done.stderr.strip()}")
    try:
        url = f"sqlite:///{mount}/runs.db"
        orch = orchestrator(tools, url)
        assert orch.run(QUERY, plan=pay_plan("pay"), run_id="before").status == "succeeded"

        def fill_the_disk() -> None:
            fd = os.open(mount / "filler", os.O_WRONLY | os.O_CREAT)
            try:
                while os.write(fd, b"\0" * 4096):
                    pass
            except OSError:  # ENOSPC: the disk is full
                pass
            finally:
                os.close(fd)

        ends = _runs_during(tools, orch, 5, fill_the_disk)
        paid = [e for e in ends if not isinstance(e, BaseException)]
        refused = [e for e in ends if isinstance(e, BaseException)]
        assert all(isinstance(e, StoreError) for e in refused), refused
        assert all(r.status == "succeeded" for r in paid)
        # every payment executed belongs to a run that recorded it; none unrecorded
        assert tools.executed["/pay"] == 1 + len(paid)
        assert refused, "the disk filled, yet every run wrote its record"
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


# --- a crash under load: only calls that may have left are unknown ------------------------

def test_a_crash_under_load_leaves_unknown_only_the_calls_that_may_have_left(
    tools: SideEffectTools, tmp_path: Path,
) -> None:
    """20 runs at once share a pool of 10 connections; every payment that reaches the
    tool is held there, so 10 runs wait for a connection when the process is SIGKILLed.
    A payment's marker is committed only once its connection is ready (the transport's
    gate), so on resume the 10 that waited are re-sent (never sent before) and only the
    10 that reached the tool are OUTCOME_UNKNOWN. Before: a marker was written long
    before the request left, and 28 of 50 runs ended unknown for calls never received."""
    url = f"sqlite:///{tmp_path}/runs.db"
    runs, pool = 20, 10
    tools.hold.set()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ORCH_MAX_CONCURRENCY": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.durable_child", "many", url, "load",
         json.dumps(tools.catalog()), json.dumps(pay_plan("pay")), str(runs)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 60
        while tools.executed["/pay"] < pool and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)  # the others wait for a connection, their markers not written
        assert tools.executed["/pay"] == pool, tools.executed
    finally:
        proc.kill()
        proc.communicate(timeout=10)
    tools.hold.clear()
    tools.release.set()
    orch = orchestrator(tools, url)
    ends = [orch.resume(f"load-{i}") for i in range(runs)]
    unknown = [e.run_id for e in ends if e.steps["pay"].status == "unknown"]
    assert len(unknown) == pool, [(e.run_id, e.steps["pay"].status) for e in ends]
    assert all(e.status == "succeeded" for e in ends if e.run_id not in unknown)
    assert tools.executed["/pay"] == runs  # each run's payment executed exactly once


# --- a crash right after an approved payment was sent ---------------------------------------

def test_a_crash_after_an_approved_payment_left_ends_unknown_not_awaiting_approval(
    store_url: str, tools: SideEffectTools,
) -> None:
    """A person approves the payment with an edited amount; the process dies while the
    payment is at the tool. Before: the run was back to `awaiting_approval` with the old
    amount, a second approval failed ("a call marker is open already"), and a rejection
    recorded "rejected, 0 attempts" for money that had left. Now the decision is the
    store's before the call leaves, and the resume reports the call as unknown."""
    from tests.orchestration.test_approvals import approval_catalog

    run_id = f"approved-{uuid.uuid4().hex[:8]}"
    catalog = json.dumps(approval_catalog(tools))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def start(command: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.support.durable_child", command, store_url, run_id,
             catalog, json.dumps(pay_plan("pay"))],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)

    paused = outcome(start("run"))
    assert paused["status"] == "awaiting_approval", paused
    pay_arrived = tools.hold_first("/pay")
    approving = start("approve")
    try:
        assert pay_arrived.wait(30), "the approved payment never reached the tool"
    finally:
        approving.kill()
        approving.communicate(timeout=10)
        tools.release_first("/pay")
    assert tools.requests[-1][2]["amount"] == 111  # the edited amount was paid

    resumed = outcome(start("resume"))
    pay = resumed["steps"]["pay"]
    assert pay["status"] == "unknown", pay
    assert pay["error"]["code"] == "OUTCOME_UNKNOWN"
    assert pay["error"]["details"]["request"]["amount"] == 111
    assert resumed["pending_approvals"] == []
    assert tools.executed["/pay"] == 1


def test_an_approved_step_whose_process_stopped_before_sending_asks_again(
    tools: SideEffectTools, tmp_path: Path,
) -> None:
    """The approval was recorded (the run is `running`, nothing pending) but the process
    stopped before the call left: no marker, nothing sent. The resume does not leave the
    step stranded as `awaiting_approval` in a finished run: it asks the person again."""
    from orchestration.store._recorder import snapshot
    from tests.orchestration.test_approvals import approval_catalog

    orch = Orchestrator(catalog=Catalog.from_dict(approval_catalog(tools), source="t"),
                        llm=ScriptedLLM(["unused"]),
                        config=OrchestratorConfig(store_url=f"sqlite:///{tmp_path}/runs.db",
                                                  synthesis_enabled=False))
    paused = orch.run(QUERY, plan=pay_plan("pay"))
    assert paused.status == "awaiting_approval"

    async def decided_then_stopped() -> None:  # what the store holds after such a stop
        stored = await orch.store.load(paused.run_id)
        assert stored is not None
        stored.state.status, stored.state.pending_approvals = "running", []
        await orch.store.write([snapshot(stored.state)])

    asyncio.run(decided_then_stopped())
    again = orch.resume(paused.run_id)
    assert again.status == "awaiting_approval"
    assert [p.step_id for p in again.pending_approvals] == ["pay"]
    assert tools.executed["/pay"] == 0
