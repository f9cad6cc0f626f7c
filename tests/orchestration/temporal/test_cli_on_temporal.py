"""What a caller is told to do when Temporal does not answer — ``dagwright runs show
RUN_ID`` and ``dagwright resume RUN_ID`` — works for a Temporal run, from a shell with
only the client's settings (no catalog, no LLM settings: the workers hold both).

A real dev server, a ``dagwright worker`` process, a loopback bank holding the payment's
answer back. While the run is in flight (nothing recorded in the run store yet),
``runs show`` shows it live from its workflow, and ``resume`` follows it to its end once
the bank answers. With the server stopped, ``runs show`` reads the run store and says so.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from orchestration import Catalog, Orchestrator, OrchestratorConfig, ScriptedLLM
from tests.support.net import free_port
from tests.support.side_effects import pay_plan, side_effect_tools
from tests.support.temporal import start_temporal_dev_server
from tests.support.temporal_workers import ROOT, start_workers

pytestmark = [pytest.mark.temporal, pytest.mark.slow]


async def dagwright(env: dict[str, str], cwd: Path, *args: str) -> tuple[int, str]:
    """``dagwright ARGS`` in a shell whose ORCH_* are ``env`` only; exit code and stdout
    (the result), with stderr (live progress, which ``resume`` draws) appended only when
    the command failed, so a ``--json`` result parses as a script would read it."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_")}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "orchestration", *args, cwd=cwd,
        env={**clean, "PYTHONPATH": str(ROOT), **env},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), 90)
    code = process.returncode or 0
    return code, out.decode() + (f"\n[stderr]\n{err.decode()}" if code else "")


async def test_runs_show_and_resume_work_for_a_temporal_run_from_a_bare_shell(
    tmp_path: Path,
) -> None:
    pytest.importorskip("temporalio", reason="temporalio is in the temporal extra")
    db, port = tmp_path / "temporal.db", free_port()
    with side_effect_tools() as tools:
        catalog_path = tmp_path / "catalog.json"
        catalog_path.write_text(json.dumps(tools.catalog()))
        store_url = f"sqlite:///{tmp_path}/runs.db"
        queue = f"cli-{uuid.uuid4().hex[:8]}"
        with start_temporal_dev_server(db_filename=db, port=port) as server:
            client_env = {"ORCH_BACKEND": "temporal", "ORCH_STORE_URL": store_url,
                          "ORCH_TEMPORAL_ADDRESS": server.address,
                          "ORCH_TEMPORAL_TASK_QUEUE": queue}
            worker_env = {"ORCH_CATALOG": str(catalog_path), "ORCH_STORE_URL": store_url,
                          "ORCH_TEMPORAL_ADDRESS": server.address,
                          "ORCH_TEMPORAL_TASK_QUEUE": queue}
            arrived = tools.hold_first("/pay")
            with start_workers(["worker-a"], worker_env):
                orch = Orchestrator(
                    catalog=Catalog.from_dict(tools.catalog()), llm=ScriptedLLM([]),
                    registry=CollectorRegistry(), config=OrchestratorConfig(
                        backend="temporal", temporal_address=server.address,
                        temporal_task_queue=queue, store_url=store_url,
                        synthesis_enabled=False))
                run_id = f"cli-{uuid.uuid4().hex[:8]}"
                run = asyncio.ensure_future(orch.arun("pay for one share",
                                                      plan=pay_plan("pay"), run_id=run_id))
                try:
                    while not arrived.is_set():
                        await asyncio.sleep(0.05)
                    # in flight: nothing in the run store yet, the workflow knows it
                    shown, live = await dagwright(client_env, tmp_path, "runs", "show",
                                                  run_id, "--json")
                    assert shown == 0, live
                    assert json.loads(live)["status"] == "running", live
                    assert json.loads(live)["steps"]["quote"]["status"] == "succeeded"
                    # resume follows it to its end, without a catalog or LLM settings
                    resumed = asyncio.ensure_future(dagwright(client_env, tmp_path,
                                                              "resume", run_id, "--json"))
                    await asyncio.sleep(1.0)
                    tools.release_first("/pay")
                    code, followed = await resumed
                    assert code == 0, followed
                    assert json.loads(followed)["status"] == "succeeded", followed
                    assert (await asyncio.wait_for(run, 30)).status == "succeeded"
                finally:
                    tools.release_first("/pay")
                    if not run.done():
                        run.cancel()
        # the server is gone: runs show answers from the run store, and says so
        shown, stored = await dagwright(client_env, tmp_path, "runs", "show", run_id)
    assert shown == 0, stored
    assert "succeeded" in stored and "could not be read from Temporal" in stored, stored
    assert tools.executed["/pay"] == 1
