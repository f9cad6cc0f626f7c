"""A three-run session across real processes: ``dagwright run --session`` three times,
each in a process of its own; runs 2 and 3 use run 1's output (``{{run:1.quote.price}}``),
run 3 is killed while its payment is in flight and resumed by another process
(``dagwright resume``), which finds the session's earlier runs in the store again, binds
the same value and sends the payment once. On SQLite and on a real PostgreSQL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests import ROOT
from tests.support.side_effects import SideEffectTools

pytestmark = pytest.mark.slow

QUOTE = {"steps": [{"id": "quote", "tool": "stocks", "capability": "quote",
                    "params": {"symbol": "TSLA"}}]}
BUY = {"steps": [{"id": "pay", "tool": "bank", "capability": "pay_keyed",
                  "params": {"amount": "{{run:1.quote.price}}", "to": "broker"}}]}
SAVE = {"steps": [
    {"id": "save", "tool": "bank", "capability": "pay_keyed",
     "params": {"amount": "{{run:1.quote.price}}", "to": "savings"}},
    {"id": "receipt", "tool": "bank", "capability": "receipt",
     "params": {"paid": "{{save.paid}}"}, "depends_on": []},
]}


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/runs.db"
    server = request.getfixturevalue("postgres_server")
    return str(server.create_database(f"session_{uuid.uuid4().hex[:10]}"))


def env_for(tools: SideEffectTools, store_url: str, tmp_path: Path, script: list[Any],
            name: str) -> dict[str, str]:
    (tmp_path / "catalog.json").write_text(json.dumps(tools.catalog()))
    (tmp_path / f"{name}.json").write_text(json.dumps(script))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_")}
    return {**env, "PYTHONPATH": str(ROOT), "ORCH_CATALOG": str(tmp_path / "catalog.json"),
            "ORCH_STORE_URL": store_url, "ORCH_LLM_PROVIDER": "scripted",
            "ORCH_LLM_SCRIPT": str(tmp_path / f"{name}.json"),
            "ORCH_LLM_DEBUG_ENABLED": "true",
            "ORCH_LLM_DEBUG_PATH": str(tmp_path / "llm-debug.jsonl")}


def dagwright(env: dict[str, str], *args: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "orchestration.cli", *args, "--json"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode in (0, 1), done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_a_three_run_session_resumed_across_a_process_restart(
    tools: SideEffectTools, store_url: str, tmp_path: Path,
) -> None:
    first = dagwright(env_for(tools, store_url, tmp_path, [json.dumps(QUOTE), "TSLA is at 250."],
                              "p1"), "run", "--session", "trip", "--context", "user=ann",
                      "what does a TSLA share cost?")
    assert first["status"] == "succeeded" and first["session_run"] == 1
    second = dagwright(env_for(tools, store_url, tmp_path, [json.dumps(BUY), "Bought one."],
                               "p2"), "run", "--session", "trip", "--context", "user=ann",
                       "buy one of those")
    assert second["status"] == "succeeded", second["error"]
    assert second["session_run"] == 2
    assert second["steps"]["pay"]["attempts"][-1]["params"] == {"amount": 250.0, "to": "broker"}

    # run 3 in a third process, killed while its payment is in flight
    tools.hold.set()
    env3 = env_for(tools, store_url, tmp_path, [json.dumps(SAVE), "Saved 250."], "p3")
    proc = subprocess.Popen([sys.executable, "-m", "orchestration.cli", "run", "--session",
                             "trip", "--context", "user=ann", "and put the same in savings"],
                            cwd=ROOT, env=env3, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None
        announced = proc.stdout.readline()
        assert announced.startswith("run "), proc.stderr.read() if proc.stderr else ""
        run_id = announced.split()[1]
        assert tools.arrived.wait(60), "the payment of run 3 never reached the tool"
    finally:
        proc.kill()
        proc.wait(10)
        tools.hold.clear()
        tools.release.set()
    assert proc.returncode == -9

    # a fourth process resumes it: run 1's output is bound again from the store
    resumed = dagwright(env_for(tools, store_url, tmp_path, ["Saved 250."], "p4"),
                        "resume", run_id)
    assert resumed["status"] == "succeeded", resumed["error"]
    assert (resumed["session"], resumed["session_run"]) == ("trip", 3)
    assert resumed["steps"]["save"]["attempts"][-1]["params"] == {"amount": 250.0,
                                                                  "to": "savings"}
    keyed = [(key, body) for path, key, body in tools.requests if path == "/pay_keyed"]
    assert [body["to"] for _, body in keyed] == ["broker", "savings", "savings"]
    assert keyed[1] == keyed[2]  # the in-flight payment re-sent with its key: executed once
    assert tools.executed["/pay_keyed"] == 2

    # the planner of run 3 was shown runs 1 and 2: their queries, answers and outputs
    records = [json.loads(line) for line in
               (tmp_path / "llm-debug.jsonl").read_text().splitlines()]
    plan_prompts = ["\n".join(m["content"] for m in r["messages"])
                    for r in records if r["site"] == "plan"]
    third = plan_prompts[2]
    assert "what does a TSLA share cost?" in third and "buy one of those" in third
    assert "TSLA is at 250." in third and "Bought one." in third
    assert "{{run:2.pay}} (bank.pay_keyed) = " in third

    listed = subprocess.run([sys.executable, "-m", "orchestration.cli", "sessions", "show",
                             "trip"], cwd=ROOT, env=env3, capture_output=True, text=True,
                            timeout=60)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0] == "session trip: 3 run(s)"
    assert [line.split()[1] for line in lines[1::2]] == ["1:", "2:", "3:"]
