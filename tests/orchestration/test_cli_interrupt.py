"""Ctrl-C during ``dagwright run``: the run stops as a crash would, and the command says
how to go on with it — and that advice, typed as printed, finishes the run."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.cli import dagwright, scripted_env

pytestmark = pytest.mark.slow

PLAN = {"steps": [{"id": "nap", "tool": "clock", "capability": "nap", "params": {"seconds": 1}}]}


def test_ctrl_c_names_the_resume_command_that_finishes_the_run(tmp_path: Path) -> None:
    (tmp_path / "clock_tools.py").write_text(
        "import asyncio\nfrom pathlib import Path\n\n"
        "async def nap(seconds: float) -> dict:\n"
        "    \"\"\"Sleep, then say so; the first call sleeps a minute (till Ctrl-C).\"\"\"\n"
        "    marker = Path(__file__).with_name('napped')\n"
        "    if not marker.exists():\n"
        "        marker.write_text('once')\n"
        "        await asyncio.sleep(60)\n"
        "    await asyncio.sleep(seconds)\n"
        "    return {'slept': seconds}\n")
    catalog = {"tools": [{"name": "clock", "description": "time", "capabilities": [
        {"name": "nap", "function": "clock_tools:nap", "timeout_s": 120}]}]}
    env = scripted_env(tmp_path, catalog, [PLAN])
    proc = subprocess.Popen([sys.executable, "-m", "orchestration", "run", "take a nap"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    run_id = proc.stdout.readline().split()[1]  # "run ID", printed as the run starts
    deadline = time.monotonic() + 20
    while not (tmp_path / "napped").exists():  # the call is in flight
        assert time.monotonic() < deadline, "the tool was never called"
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)

    assert proc.returncode == 130, err
    advice = f"`dagwright resume {run_id}` continues it"
    assert advice in err

    resumed = dagwright(env, "resume", run_id)
    assert resumed.returncode == 0, resumed.stderr
    assert "succeeded" in resumed.stdout
