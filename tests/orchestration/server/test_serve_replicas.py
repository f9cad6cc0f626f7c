"""Several ``dagwright serve`` processes on one run store, as real processes on 127.0.0.1.

Two servers share a SQLite file (one machine) or a PostgreSQL database (what replicas
behind a load balancer share): a run executes in one of them, and the other answers for
it — reads it, streams its events, takes its approval and its cancel — and finishes the
runs of a server that was killed. The tools are the loopback side-effect server, which
counts what it executed: nothing is executed twice.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.orchestration.server.live import wait_for
from tests.orchestration.server.test_api import sse_events
from tests.orchestration.server.test_serve_process import STOPPED, dagwright_serve, server_env
from tests.support.net import processes
from tests.support.postgres import PostgresServer
from tests.support.side_effects import SideEffectTools

pytestmark = pytest.mark.slow

PLAN = {"steps": [
    {"id": "quote", "tool": "stocks", "capability": "quote", "params": {"symbol": "TSLA"}},
    {"id": "pay", "tool": "bank", "capability": "pay_keyed",
     "params": {"amount": "{{quote.price}}", "to": "broker"}},
    {"id": "receipt", "tool": "bank", "capability": "receipt", "params": {"paid": "{{pay.paid}}"}},
]}


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/runs.db"
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.create_database(f"replicas_{os.getpid()}_{time.monotonic_ns() % 10**9}")


def env_for(tools: SideEffectTools, tmp_path: Path, store: str, *,
            approvals: bool = False) -> dict[str, str]:
    env = server_env(tools, tmp_path)
    if approvals:  # bank.pay_keyed waits for a person
        spec = tools.catalog()
        for tool in spec["tools"]:
            for cap in tool["capabilities"]:
                if cap["name"] == "pay_keyed":
                    cap["requires_approval"] = True
        (tmp_path / "catalog.json").write_text(json.dumps(spec))
    return {**env, "ORCH_STORE_URL": store}


def two_servers(stack: ExitStack, env: dict[str, str],
                log: Path) -> tuple[tuple[subprocess.Popen[str], str], tuple[subprocess.Popen[str], str]]:
    return (stack.enter_context(dagwright_serve(env, log)),
            stack.enter_context(dagwright_serve(env, log)))


def run_of(url: str, run_id: str) -> dict[str, Any]:
    return dict(httpx.get(f"{url}/v1/runs/{run_id}", timeout=10).json())


class Follower:
    """Reads a run's event stream from one server in a thread, as a browser would."""

    def __init__(self, url: str, run_id: str) -> None:
        self.events: list[dict[str, Any]] = []
        self.ended = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(url, run_id), daemon=True)
        self._thread.start()

    def _read(self, url: str, run_id: str) -> None:
        try:
            with httpx.Client(timeout=60) as http, \
                    http.stream("GET", f"{url}/v1/runs/{run_id}/events") as response:
                for event in sse_events(response):
                    self.events.append(event)
        finally:
            self.ended.set()

    def types(self) -> list[str]:
        return [e["event"] for e in self.events]


def test_a_run_started_on_one_server_is_followed_and_approved_through_the_other(
    tools: SideEffectTools, tmp_path: Path, store_url: str,
) -> None:
    env = env_for(tools, tmp_path, store_url, approvals=True)
    held = tools.hold_first("/quote")  # the first server is caught executing the run
    with ExitStack() as stack:
        (_, first), (_, second) = two_servers(stack, env, tmp_path / "serve.log")
        started = httpx.post(f"{first}/v1/runs", json={"query": "pay", "plan": PLAN,
                                                        "run_id": "shared-1"})
        assert started.status_code == 202
        assert held.wait(10)
        # the other server reads it and follows it while the first executes it
        assert run_of(second, "shared-1")["status"] == "running"
        follower = Follower(second, "shared-1")
        tools.release_first("/quote")
        wait_for(lambda: run_of(second, "shared-1")["status"] == "awaiting_approval", timeout=20)
        wait_for(lambda: "approval_required" in follower.types(), timeout=10)
        assert not follower.ended.is_set()  # the stream stays open through the pause

        decided = httpx.post(f"{second}/v1/runs/shared-1/approvals/pay", json={"approved": True})
        assert decided.status_code == 202, decided.text
        assert follower.ended.wait(20)
        result = run_of(first, "shared-1")  # either server answers
    assert result["status"] == "succeeded", result
    types = follower.types()
    seqs = [int(e["id"]) for e in follower.events]
    assert seqs == sorted(set(seqs)), seqs  # every event once, in order
    # what the first server did (the quote) and what the second did after the approval
    assert types.index("step_finished") < types.index("approval_required")
    assert types[-1] == "run_finished" and follower.events[-1]["data"]["data"]["status"] == "succeeded"
    assert tools.executed == {"/quote": 1, "/pay_keyed": 1, "/receipt": 1}


def test_a_run_executing_on_one_server_is_cancelled_through_the_other_within_a_second(
    tools: SideEffectTools, tmp_path: Path, store_url: str,
) -> None:
    env = env_for(tools, tmp_path, store_url)
    held = tools.hold_first("/quote")
    with ExitStack() as stack:
        (_, first), (_, second) = two_servers(stack, env, tmp_path / "serve.log")
        httpx.post(f"{first}/v1/runs", json={"query": "pay", "plan": PLAN, "run_id": "stop-me"})
        assert held.wait(10)
        asked = time.monotonic()
        cancelled = httpx.post(f"{second}/v1/runs/stop-me/cancel", timeout=30)
        took = time.monotonic() - asked
        assert cancelled.status_code == 200, cancelled.text
        result = cancelled.json()
        assert result["status"] == "cancelled"
        assert result["steps"]["quote"]["status"] == "cancelled"
        assert took < 2.5, took  # the owner stopped within a poll of the store
        assert run_of(first, "stop-me")["status"] == "cancelled"
        again = httpx.post(f"{first}/v1/runs/stop-me/cancel", timeout=30)
        assert again.status_code == 409 and again.json()["error"]["code"] == "run_finished"
        tools.release_first("/quote")
    assert tools.executed.get("/pay_keyed", 0) == 0  # nothing after the cancelled step


def test_the_runs_of_a_killed_server_are_finished_by_the_other_and_sent_once(
    tools: SideEffectTools, tmp_path: Path, store_url: str,
) -> None:
    env = env_for(tools, tmp_path, store_url)
    tools.hold.set()  # payments execute, then their answers are held back
    with ExitStack() as stack:
        first_proc, first = stack.enter_context(dagwright_serve(env, tmp_path / "first.log"))
        for number in range(3):
            posted = httpx.post(f"{first}/v1/runs", json={"query": "pay", "plan": PLAN,
                                                           "run_id": f"orphan-{number}"})
            assert posted.status_code == 202
        wait_for(lambda: tools.executed["/pay_keyed"] == 3, timeout=20)
        second_proc, second = stack.enter_context(dagwright_serve(env, tmp_path / "second.log"))
        assert all(run_of(second, f"orphan-{n}")["status"] == "running" for n in range(3))
        first_proc.send_signal(signal.SIGKILL)
        first_proc.wait(10)
        tools.hold.clear()
        tools.release.set()
        for number in range(3):
            wait_for(lambda n=number: run_of(second, f"orphan-{n}")["status"] == "succeeded",
                     timeout=30)
        second_proc.send_signal(signal.SIGTERM)
        assert second_proc.wait(20) in STOPPED
    second_log = (tmp_path / "second.log").read_text()
    assert "resumed run orphan-" in second_log
    # said as it happened: killed, not stopped
    assert re.search(r"resumed run orphan-\d: its process \([^)]+\) died", second_log), second_log
    keys = [key for path, key, _ in tools.requests if path == "/pay_keyed"]
    assert len(keys) == 6 and len(set(keys)) == 3  # each re-sent once, with its own key...
    assert tools.executed == {"/quote": 3, "/pay_keyed": 3, "/receipt": 3}  # ...executed once


def test_serve_with_two_workers_runs_on_both_and_stops_them_all(
    tools: SideEffectTools, tmp_path: Path,
) -> None:
    env = {**env_for(tools, tmp_path, f"sqlite:///{tmp_path}/runs.db"), "ORCH_SERVE_WORKERS": "2"}
    with dagwright_serve(env, tmp_path / "serve.log") as (parent, url):
        workers = wait_for(lambda: len(children(parent.pid)) == 2 and children(parent.pid),
                           timeout=30)
        with httpx.Client(base_url=url, timeout=30) as http:
            for number in range(6):
                answer = http.post("/v1/runs", json={"query": "pay", "plan": PLAN, "wait": True,
                                                     "run_id": f"w-{number}"})
                assert answer.status_code == 200 and answer.json()["status"] == "succeeded"
            # any worker answers for any run
            assert {http.get(f"/v1/runs/w-{n}").json()["status"] for n in range(6)} == {"succeeded"}
        parent.send_signal(signal.SIGTERM)
        parent.wait(30)
        assert all(not Path(f"/proc/{pid}").exists() for pid in workers)
    assert tools.executed == {"/quote": 6, "/pay_keyed": 6, "/receipt": 6}


def payments_held_by_workers(url: str, tools: SideEffectTools, db_path: Path, prefix: str,
                             count: int) -> list[int]:
    """Start ``count`` runs (``PREFIX-N``) whose payments reach the tool and are held
    there (``tools.hold`` set), over connections the kernel spreads over the workers;
    the pid of the worker holding each, as the store says."""
    for number in range(count):
        posted = httpx.post(f"{url}/v1/runs", json={"query": "pay", "plan": PLAN,
                                                     "run_id": f"{prefix}-{number}"}, timeout=30)
        assert posted.status_code == 202
    wait_for(lambda: tools.executed["/pay_keyed"] == count, timeout=20)
    with sqlite3.connect(db_path) as db:
        return [int(owner.split(":")[1]) for (owner,) in db.execute(
            "SELECT lease_owner FROM dagwright_runs WHERE run_id LIKE ?", (f"{prefix}-%",))]


def children(pid: int) -> list[int]:
    """The live worker processes ``pid`` started (multiprocessing's resource tracker, also
    a child, is not one)."""
    return [child for child, (parent, state) in processes().items()
            if parent == pid and state != "Z" and is_worker(child)]


def test_a_decision_taken_by_a_full_server_is_carried_out_where_a_slot_is_free(
    tools: SideEffectTools, tmp_path: Path, store_url: str,
) -> None:
    env = {**env_for(tools, tmp_path, store_url, approvals=True), "ORCH_SERVE_MAX_RUNS": "1"}
    held = tools.hold_first("/receipt")  # keeps the first server's only slot busy
    busy_plan = {"steps": [{"id": "busy", "tool": "bank", "capability": "receipt",
                            "params": {"paid": 1}}]}
    with ExitStack() as stack:
        (_, first), (_, second) = two_servers(stack, env, tmp_path / "serve.log")
        paused = httpx.post(f"{second}/v1/runs", json={"query": "pay", "plan": PLAN,
                                                        "run_id": "decided", "wait": True})
        assert paused.status_code == 200 and paused.json()["status"] == "awaiting_approval"
        httpx.post(f"{first}/v1/runs", json={"query": "busy", "plan": busy_plan, "run_id": "busy"})
        assert held.wait(10)
        assert httpx.get(f"{first}/healthz").json()["active_runs"] == 1  # full

        wrong = httpx.post(f"{first}/v1/runs/decided/approvals/pay",
                           json={"approved": True, "params": {"amount": "lots"}})
        assert wrong.status_code == 422  # checked before it is queued
        queued = httpx.post(f"{first}/v1/runs/decided/approvals/pay", json={"approved": True})
        assert queued.status_code == 202, queued.text
        assert queued.json()["decision"] == "queued"
        # the other server has a slot: it continues the run
        wait_for(lambda: run_of(first, "decided")["status"] == "succeeded", timeout=30)
        tools.release_first("/receipt")
        wait_for(lambda: run_of(first, "busy")["status"] == "succeeded", timeout=20)
    log = (tmp_path / "serve.log").read_text()
    assert "the decision on step pay is queued" in log
    assert "continued with the decision(s) on pay queued by another server" in log
    assert tools.executed == {"/quote": 1, "/pay_keyed": 1, "/receipt": 2}


def test_a_cancel_waiting_for_a_frozen_server_is_carried_out_when_it_dies(
    tools: SideEffectTools, tmp_path: Path,
) -> None:
    env = env_for(tools, tmp_path, f"sqlite:///{tmp_path}/runs.db")
    tools.hold.set()
    with ExitStack() as stack:
        first_proc, first = stack.enter_context(dagwright_serve(env, tmp_path / "first.log"))
        _, second = stack.enter_context(dagwright_serve(env, tmp_path / "second.log"))
        httpx.post(f"{first}/v1/runs", json={"query": "pay", "plan": PLAN, "run_id": "doomed"})
        assert tools.arrived.wait(10)  # the payment executed; its answer is held back
        first_proc.send_signal(signal.SIGSTOP)  # alive and holding the run, but deaf
        answer: list[httpx.Response] = []
        asking = threading.Thread(target=lambda: answer.append(
            httpx.post(f"{second}/v1/runs/doomed/cancel", timeout=60)))
        asking.start()
        time.sleep(1.5)  # the cancel request waits in the store for its owner
        assert not answer
        first_proc.send_signal(signal.SIGKILL)
        first_proc.wait(10)
        asking.join(60)
        tools.hold.clear()
        tools.release.set()
    (cancelled,) = answer
    assert cancelled.status_code == 200, cancelled.text
    result = cancelled.json()
    assert result["status"] == "cancelled"
    # the payment was in flight when its process died: reported unknown, and the run was
    # cancelled rather than resumed, so it was not sent again (not even with its key)
    assert result["steps"]["pay"]["status"] == "unknown"
    assert [path for path, _, _ in tools.requests].count("/pay_keyed") == 1
    assert tools.executed == {"/quote": 1, "/pay_keyed": 1}


def test_a_killed_worker_is_replaced_and_its_runs_finished_with_payments_sent_once(
    tools: SideEffectTools, tmp_path: Path,
) -> None:
    env = {**env_for(tools, tmp_path, f"sqlite:///{tmp_path}/runs.db"), "ORCH_SERVE_WORKERS": "2"}
    tools.hold.set()
    with dagwright_serve(env, tmp_path / "serve.log") as (parent, url):
        workers = wait_for(lambda: len(children(parent.pid)) == 2 and children(parent.pid),
                           timeout=30)
        owners = payments_held_by_workers(url, tools, tmp_path / "runs.db", "k", 4)
        victim = owners[0]
        assert victim in workers
        os.kill(victim, signal.SIGKILL)
        # the supervisor starts another worker in its place
        wait_for(lambda: len(children(parent.pid)) == 2 and victim not in children(parent.pid),
                 timeout=30)
        tools.hold.clear()
        tools.release.set()
        for number in range(4):
            wait_for(lambda n=number: httpx.get(f"{url}/v1/runs/k-{n}", timeout=10).json()[
                "status"] == "succeeded", timeout=40)
        parent.send_signal(signal.SIGTERM)
        parent.wait(30)
    assert tools.executed == {"/quote": 4, "/pay_keyed": 4, "/receipt": 4}


def test_workers_stop_when_their_supervisor_is_killed(tools: SideEffectTools, tmp_path: Path) -> None:
    env = {**env_for(tools, tmp_path, f"sqlite:///{tmp_path}/runs.db"), "ORCH_SERVE_WORKERS": "2"}
    with dagwright_serve(env, tmp_path / "serve.log") as (parent, _):
        workers = wait_for(lambda: len(children(parent.pid)) == 2 and children(parent.pid),
                           timeout=30)
        parent.send_signal(signal.SIGKILL)  # the supervisor cannot stop them itself
        parent.wait(10)
        wait_for(lambda: not any(is_worker(pid) for pid in workers), timeout=20)


def test_workers_stop_when_their_supervisor_is_killed_while_they_start(
    tools: SideEffectTools, tmp_path: Path,
) -> None:
    """A worker that was still starting when its supervisor was killed (it found itself
    already handed to init) once watched the wrong parent and served on for ever."""
    env = {**env_for(tools, tmp_path, f"sqlite:///{tmp_path}/runs.db"), "ORCH_SERVE_WORKERS": "2"}
    with (tmp_path / "serve.log").open("a") as log:
        parent = subprocess.Popen([sys.executable, "-m", "orchestration.cli", "serve", "--port",
                                   "0"], env=env, stdout=subprocess.DEVNULL, stderr=log)
    workers: list[int] = []
    try:
        workers = wait_for(lambda: len(children(parent.pid)) == 2 and children(parent.pid),
                           timeout=30, every=0.005)
        for pid in workers:  # (still importing: far from the app and its watch)
            os.kill(pid, signal.SIGSTOP)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
    finally:
        for pid in workers:
            os.kill(pid, signal.SIGCONT)
        if parent.poll() is None:
            parent.kill()
    try:
        wait_for(lambda: not any(is_worker(pid) for pid in workers), timeout=30)
    finally:
        for pid in workers:
            if is_worker(pid):
                os.kill(pid, signal.SIGKILL)


def test_workers_whose_supervisor_is_killed_take_over_none_of_each_other_s_runs(
    tools: SideEffectTools, tmp_path: Path,
) -> None:
    """Each worker stops when it notices its supervisor is gone (within a second, each
    at its own moment): one that stops later must not take over the runs one that
    stopped earlier let go of — it would cut their calls again a moment later. The runs
    stay as they were, resumable, and nothing is sent twice."""
    env = {**env_for(tools, tmp_path, f"sqlite:///{tmp_path}/runs.db"), "ORCH_SERVE_WORKERS": "2"}
    tools.hold.set()
    with dagwright_serve(env, tmp_path / "serve.log") as (parent, url):
        workers = wait_for(lambda: len(children(parent.pid)) == 2 and children(parent.pid),
                           timeout=30)
        holders = set(payments_held_by_workers(url, tools, tmp_path / "runs.db", "o", 6))
        if len(holders) < 2:
            pytest.skip("the kernel gave every connection to one worker")
        first, later = sorted(holders)
        parent.send_signal(signal.SIGKILL)
        # the later worker notices after the first one stopped and let its runs go
        os.kill(later, signal.SIGSTOP)
        try:
            parent.wait(10)
            wait_for(lambda: not is_worker(first), timeout=20)
        finally:
            os.kill(later, signal.SIGCONT)
        wait_for(lambda: not any(is_worker(pid) for pid in workers), timeout=20)
    log = (tmp_path / "serve.log").read_text()
    assert "resumed run o-" not in log, log
    assert [path for path, _, _ in tools.requests].count("/pay_keyed") == 6


def test_a_server_that_is_stopping_takes_over_none_of_the_runs_another_stop_lets_go(
    tools: SideEffectTools, tmp_path: Path,
) -> None:
    """Two replicas stopped together (a deploy): the one that drains an open request for
    a while must not take over the runs the other let go of meanwhile — it would stop
    them again when its drain ends. They stay as they were, for the next start."""
    env = env_for(tools, tmp_path, f"sqlite:///{tmp_path}/runs.db")
    tools.hold.set()
    with ExitStack() as stack:
        (draining, first), (quick, second) = two_servers(stack, env, tmp_path / "serve.log")
        waiting = threading.Thread(target=lambda: httpx.post(
            f"{first}/v1/runs", json={"query": "pay", "plan": PLAN, "run_id": "on-first",
                                      "wait": True}, timeout=60), daemon=True)
        waiting.start()  # a request the first server drains when it is told to stop
        posted = httpx.post(f"{second}/v1/runs", json={"query": "pay", "plan": PLAN,
                                                        "run_id": "on-second"}, timeout=30)
        assert posted.status_code == 202
        wait_for(lambda: tools.executed["/pay_keyed"] == 2, timeout=20)
        draining.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        quick.send_signal(signal.SIGTERM)
        quick.wait(20)
        time.sleep(2.5)  # past two takeover rounds of the first while it drains
        assert draining.poll() is None, "the first server did not drain its open request"
        draining.wait(30)
    log = (tmp_path / "serve.log").read_text()
    assert "resumed run on-second" not in log, log
    assert [path for path, _, _ in tools.requests].count("/pay_keyed") == 2


def is_worker(pid: int) -> bool:
    """Whether ``pid`` is a live worker process of dagwright serve."""
    try:
        return b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def test_a_dead_server_s_run_with_per_run_credentials_is_parked_until_resumed_with_them(
    tools: SideEffectTools, tmp_path: Path, store_url: str,
) -> None:
    """Per-run credentials are never stored: the server that takes over a dead one's runs
    must not send that run's calls without them (or with the catalog's). It marks the run
    as waiting for them and sends nothing; a client resuming with them finishes it."""
    env = env_for(tools, tmp_path, store_url)
    given = {"bank": {"Authorization": "Bearer alice-0123456789"}}
    held = tools.hold_first("/quote")  # the first server dies before the payment
    with ExitStack() as stack:
        first_proc, first = stack.enter_context(dagwright_serve(env, tmp_path / "first.log"))
        posted = httpx.post(f"{first}/v1/runs", json={"query": "pay", "plan": PLAN,
                                                       "run_id": "alice-1", "credentials": given})
        assert posted.status_code == 202, posted.text
        assert held.wait(10)
        _, second = stack.enter_context(dagwright_serve(env, tmp_path / "second.log"))
        first_proc.send_signal(signal.SIGKILL)
        first_proc.wait(10)
        tools.release_first("/quote")  # (its answer goes to a dead process)
        parked = wait_for(lambda: next((w for w in run_of(second, "alice-1")["warnings"]
                                        if w.startswith("waiting for per-run credentials")),
                                       None), timeout=60)
        assert "'bank'" in parked and "/v1/runs/alice-1/resume" in parked, parked
        time.sleep(1.0)  # another takeover round: still parked, still nothing sent
        assert run_of(second, "alice-1")["status"] == "running"
        assert tools.executed.get("/pay_keyed", 0) == 0
        assert "alice-0123456789" not in json.dumps(run_of(second, "alice-1"))

        resumed = httpx.post(f"{second}/v1/runs/alice-1/resume",
                             json={"credentials": given}, timeout=30)
        assert resumed.status_code in (200, 202), resumed.text
        result = wait_for(lambda: (r := run_of(second, "alice-1"))["status"] == "succeeded" and r,
                          timeout=30)
    assert not any(w.startswith("waiting for per-run credentials") for w in result["warnings"])
    assert tools.executed["/pay_keyed"] == 1
    assert [a for path, a in tools.authorizations if path == "/pay_keyed"] == [
        "Bearer alice-0123456789"]
    assert "resumed run alice-1" not in (tmp_path / "second.log").read_text()


def test_a_viewer_signed_in_on_one_server_is_signed_in_on_every_replica_with_the_same_key(
    tools: SideEffectTools, tmp_path: Path,
) -> None:
    """The viewer's cookie is signed under a key derived from ORCH_SERVE_SESSION_KEY, not
    drawn per process: a load balancer may send the next page to any replica, and a
    restart keeps the viewer signed in. A replica with another key does not accept it."""
    token = "acme-token-" + "0123456789abcdef"
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({hashlib.sha256(token.encode()).hexdigest(): "acme"}))
    env = {**env_for(tools, tmp_path, f"sqlite:///{tmp_path}/runs.db"),
           "ORCH_SERVE_TOKENS": str(tokens), "ORCH_SERVE_SESSION_KEY": "k" * 40}
    with ExitStack() as stack:
        (_, first), (_, second) = two_servers(stack, env, tmp_path / "serve.log")
        _, other_key = stack.enter_context(dagwright_serve(
            {**env, "ORCH_SERVE_SESSION_KEY": "z" * 40}, tmp_path / "other.log"))
        signed = httpx.post(f"{first}/login", data={"token": token, "next": "/ui/"},
                            headers={"Origin": first})
        assert signed.status_code == 303, signed.text
        cookie = signed.cookies["dagwright_session"]
        assert token not in cookie
        for url in (first, second):
            page = httpx.get(f"{url}/ui/", cookies={"dagwright_session": cookie})
            assert page.status_code == 200 and "acme" in page.text, (url, page.status_code)
        refused = httpx.get(f"{other_key}/ui/", cookies={"dagwright_session": cookie},
                            headers={"Accept": "text/html"})  # as a browser asks
        assert refused.is_redirect and "/login" in refused.headers["location"], refused
