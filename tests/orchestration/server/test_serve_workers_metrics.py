"""``dagwright serve --workers 2`` answers ``/metrics`` for the whole server, without the
operator setting ``PROMETHEUS_MULTIPROC_DIR``: every scrape, whichever worker accepts
it, reports every run the server finished — also after a worker was killed and replaced —,
and the directory the supervisor made for the workers' metric files is gone once it
stops."""

from __future__ import annotations

import os
import signal
import sqlite3
import stat
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.orchestration.server.live import wait_for
from tests.orchestration.server.test_serve_process import dagwright_serve
from tests.orchestration.server.test_serve_replicas import PLAN, children, env_for
from tests.support.side_effects import SideEffectTools

pytestmark = pytest.mark.slow

MAX_RUNS = 12
"""Runs sent at most, one by one, until each worker holds one (the kernel picks the
worker of each connection: all 12 on one worker is a 1-in-2048 chance)."""


def scrape(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """``/metrics`` over a new connection (the kernel chooses the worker): each sample's
    labels and value, by sample name."""
    answer = httpx.get(f"{url}/metrics", timeout=10)
    assert answer.status_code == 200, answer.text
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(answer.text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((sample.labels, sample.value))
    return samples


def finished_runs(url: str) -> float:
    return sum(value for _, value in scrape(url).get("orchestration_runs_total", []))


def holder(db_path: Path, run_id: str) -> int:
    """The pid of the worker executing ``run_id``, as the run store has its lease."""
    with sqlite3.connect(db_path) as db:
        (owner,), = db.execute("SELECT lease_owner FROM dagwright_runs WHERE run_id = ?",
                               (run_id,))
    return int(owner.split(":")[1])


def metrics_dir_of(workers: list[int]) -> Path:
    """The ``PROMETHEUS_MULTIPROC_DIR`` the workers were started with (one for all)."""
    dirs = set()
    for pid in workers:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        dirs |= {Path(entry.split(b"=", 1)[1].decode()) for entry in environ
                 if entry.startswith(b"PROMETHEUS_MULTIPROC_DIR=")}
    assert len(dirs) == 1, dirs
    return dirs.pop()


def workers_env(tools: SideEffectTools, tmp_path: Path, temp: Path) -> dict[str, str]:
    """``serve --workers 2`` on a SQLite store, making its temporary files in ``temp``,
    without ``PROMETHEUS_MULTIPROC_DIR`` (whatever the test run has)."""
    env = {**env_for(tools, tmp_path, f"sqlite:///{tmp_path}/runs.db"),
           "ORCH_SERVE_WORKERS": "2", "ORCH_SERVE_MAX_RUNS": str(MAX_RUNS), "TMPDIR": str(temp)}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    env.pop("prometheus_multiproc_dir", None)
    return env


def test_metrics_of_serve_with_two_workers_count_every_worker_s_runs(
    tools: SideEffectTools, tmp_path: Path,
) -> None:
    db_path = tmp_path / "runs.db"
    temp = tmp_path / "temp"  # where the supervisor makes its directory (TMPDIR)
    temp.mkdir()
    env = workers_env(tools, tmp_path, temp)
    tools.hold.set()  # each payment is held, so the store says which worker executes it
    with dagwright_serve(env, tmp_path / "serve.log") as (parent, url):
        workers = wait_for(lambda: len(children(parent.pid)) == 2 and children(parent.pid),
                           timeout=30)
        holders: set[int] = set()
        sent = 0
        while len(holders) < 2 and sent < MAX_RUNS:
            posted = httpx.post(f"{url}/v1/runs", json={"query": "pay", "plan": PLAN,
                                                         "run_id": f"m-{sent}"}, timeout=30)
            assert posted.status_code == 202, posted.text
            sent += 1
            wait_for(lambda n=sent: tools.executed["/pay_keyed"] == n, timeout=20)
            holders.add(holder(db_path, f"m-{sent - 1}"))
        if len(holders) < 2:
            pytest.skip("the kernel gave every connection to one worker")
        assert holders == set(workers)
        tools.hold.clear()
        tools.release.set()
        for number in range(sent):
            wait_for(lambda n=number: httpx.get(f"{url}/v1/runs/m-{n}", timeout=10).json()[
                "status"] == "succeeded", timeout=30)

        # the counter is recorded as the run ends: allow it a moment to get there
        totals = [finished_runs(url)]
        deadline = time.monotonic() + 5
        while totals[-1] != sent and time.monotonic() < deadline:
            time.sleep(0.1)
            totals.append(finished_runs(url))
        totals += [finished_runs(url) for _ in range(10)]
        assert totals[-11:] == [sent] * 11, (sent, totals)

        # one series per tool for the breaker gauge, as the dashboard and alerts read it:
        # no pid label from multiprocess mode on any series
        samples = scrape(url)
        assert sorted(labels["tool"] for labels, _ in samples["orchestration_circuit_state"]) \
            == ["bank", "stocks"]
        assert not [name for name, found in samples.items()
                    for labels, _ in found if "pid" in labels]

        metrics_dir = metrics_dir_of(workers)
        assert metrics_dir.parent == temp
        assert stat.S_IMODE(metrics_dir.stat().st_mode) == 0o700

        # a worker killed and replaced: what it did still counts, its gauge no longer does
        victim = workers[0]
        assert (metrics_dir / f"gauge_livemax_{victim}.db").exists()
        os.kill(victim, signal.SIGKILL)
        wait_for(lambda: len(children(parent.pid)) == 2 and victim not in children(parent.pid),
                 timeout=30)
        wait_for(lambda: not (metrics_dir / f"gauge_livemax_{victim}.db").exists(), timeout=10)
        assert [finished_runs(url) for _ in range(5)] == [sent] * 5
        parent.send_signal(signal.SIGTERM)
        parent.wait(30)
    assert not metrics_dir.exists()


def test_the_metrics_directory_made_for_the_workers_is_removed_on_sigint(
    tools: SideEffectTools, tmp_path: Path,
) -> None:
    temp = tmp_path / "temp"
    temp.mkdir()
    with dagwright_serve(workers_env(tools, tmp_path, temp), tmp_path / "serve.log") \
            as (parent, _):
        workers = wait_for(lambda: len(children(parent.pid)) == 2 and children(parent.pid),
                           timeout=30)
        metrics_dir = metrics_dir_of(workers)
        assert metrics_dir.is_dir() and metrics_dir.parent == temp
        parent.send_signal(signal.SIGINT)
        parent.wait(30)
    assert not metrics_dir.exists()


def test_the_operator_s_metrics_directory_is_used_and_kept(
    tools: SideEffectTools, tmp_path: Path,
) -> None:
    temp, mine = tmp_path / "temp", tmp_path / "metrics"
    temp.mkdir()
    mine.mkdir()
    env = {**workers_env(tools, tmp_path, temp), "PROMETHEUS_MULTIPROC_DIR": str(mine)}
    with dagwright_serve(env, tmp_path / "serve.log") as (parent, url):
        workers = wait_for(lambda: len(children(parent.pid)) == 2 and children(parent.pid),
                           timeout=30)
        assert metrics_dir_of(workers) == mine
        answer = httpx.post(f"{url}/v1/runs", json={"query": "pay", "plan": PLAN,
                                                     "wait": True}, timeout=30)
        assert answer.status_code == 200 and answer.json()["status"] == "succeeded"
        assert [finished_runs(url) for _ in range(4)] == [1] * 4
        parent.send_signal(signal.SIGTERM)
        parent.wait(30)
    assert mine.is_dir() and any(mine.glob("counter_*.db"))  # the operator's, untouched
    assert list(temp.glob("dagwright-*")) == []
