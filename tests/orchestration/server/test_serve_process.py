"""``dagwright serve`` as a real process: killed mid-run, or stopped with SIGTERM, the next
server on the same run store resumes the interrupted run, and no payment is executed
twice (the capability declares an idempotency key, so the re-sent call is recognised)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import ROOT
from tests.orchestration.server.live import wait_for
from tests.support.side_effects import SideEffectTools

pytestmark = pytest.mark.slow
STOPPED = (0, -signal.SIGTERM)
"""After its graceful shutdown uvicorn re-raises the signal it caught, so the process ends
by SIGTERM (what service managers count as a clean stop)."""

PLAN = {"steps": [
    {"id": "quote", "tool": "stocks", "capability": "quote", "params": {"symbol": "TSLA"}},
    {"id": "pay", "tool": "bank", "capability": "pay_keyed",
     "params": {"amount": "{{quote.price}}", "to": "broker"}},
    {"id": "receipt", "tool": "bank", "capability": "receipt", "params": {"paid": "{{pay.paid}}"}},
]}


def server_env(tools: SideEffectTools, tmp_path: Path) -> dict[str, str]:
    (tmp_path / "catalog.json").write_text(json.dumps(tools.catalog()))
    (tmp_path / "script.json").write_text('["unused"]')
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_")}
    return {**env, "PYTHONPATH": str(ROOT), "ORCH_CATALOG": str(tmp_path / "catalog.json"),
            "ORCH_STORE_URL": f"sqlite:///{tmp_path}/runs.db", "ORCH_LLM_PROVIDER": "scripted",
            "ORCH_LLM_SCRIPT": str(tmp_path / "script.json"), "ORCH_SYNTHESIS_ENABLED": "false",
            "ORCH_LOG_LEVEL": "INFO"}


@contextmanager
def dagwright_serve(env: dict[str, str], log: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``dagwright serve --port 0`` on 127.0.0.1; yields the process and its URL."""
    with log.open("a") as errors:
        proc = subprocess.Popen([sys.executable, "-m", "orchestration.cli", "serve", "--port", "0"],
                                cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=errors, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("dagwright serve: http://127.0.0.1:"), log.read_text()
        url = line.split()[2].removesuffix("/ui/")
        # an eager client, connecting the moment the address is printed, is never refused
        assert httpx.get(f"{url}/healthz", timeout=20).status_code == 200

        def healthy() -> bool:
            try:
                return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
            except httpx.TransportError:
                return False

        wait_for(healthy, timeout=20, every=0.05)
        yield proc, url
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


def run_of(url: str, run_id: str) -> dict[str, Any]:
    return dict(httpx.get(f"{url}/v1/runs/{run_id}", timeout=5).json())


def test_a_server_killed_mid_run_resumes_it_when_started_again(
    tools: SideEffectTools, tmp_path: Path,
) -> None:
    env, log = server_env(tools, tmp_path), tmp_path / "serve.log"
    tools.hold.set()
    with dagwright_serve(env, log) as (first, url):
        accepted = httpx.post(f"{url}/v1/runs", json={"query": "pay", "plan": PLAN, "run_id": "crash-1"})
        assert accepted.status_code == 202
        assert tools.arrived.wait(10)  # the payment executed; its answer is held back
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    tools.hold.clear()
    tools.release.set()

    with dagwright_serve(env, log) as (second, url):
        wait_for(lambda: run_of(url, "crash-1")["status"] == "succeeded", timeout=20)
        result = run_of(url, "crash-1")
        second.send_signal(signal.SIGTERM)
        assert second.wait(20) in STOPPED
    assert "resumed run crash-1" in log.read_text()
    assert result["steps"]["pay"]["output"]["paid"] == 250.0
    keys = [key for path, key, _ in tools.requests if path == "/pay_keyed"]
    assert len(keys) == 2 and keys[0] == keys[1]  # re-sent with the same key...
    assert tools.executed == {"/quote": 1, "/pay_keyed": 1, "/receipt": 1}  # ...executed once


def test_sigterm_leaves_runs_in_flight_resumable_for_the_next_start(
    tools: SideEffectTools, tmp_path: Path,
) -> None:
    env, log = server_env(tools, tmp_path), tmp_path / "serve.log"
    tools.hold.set()
    with dagwright_serve(env, log) as (first, url):
        httpx.post(f"{url}/v1/runs", json={"query": "pay", "plan": PLAN, "run_id": "stop-1"})
        assert tools.arrived.wait(10)
        first.send_signal(signal.SIGTERM)
        assert first.wait(20) in STOPPED  # a graceful stop does not wait for the held payment
    tools.hold.clear()
    tools.release.set()
    assert "stopping 1 run(s); they stay resumable" in log.read_text()

    with dagwright_serve(env, log) as (_, url):
        wait_for(lambda: run_of(url, "stop-1")["status"] == "succeeded", timeout=20)
    assert tools.executed == {"/quote": 1, "/pay_keyed": 1, "/receipt": 1}
