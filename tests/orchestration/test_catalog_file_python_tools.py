"""Python tools named in a catalog file (``function: module:name``): imported from the
catalog file's folder, described by their type hints, and never run twice at once after a
timeout while the first call still runs in its thread."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from orchestration import Catalog, CatalogError, Orchestrator, OrchestratorConfig, ScriptedLLM

TOOLS = '''
import pathlib
import time

CALLS = pathlib.Path(__file__).with_name("calls.txt")


def nap(seconds: float, label: str = "nap") -> dict:
    """Sleep for a while, then say how long."""
    with CALLS.open("a") as calls:
        calls.write(label + "\\n")
    time.sleep(seconds)
    return {"slept": seconds, "label": label}
'''


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    """A catalog beside its tools module (a fresh module name: sys.modules caches)."""
    monkeypatch.setattr(sys, "path", list(sys.path))  # what the catalog adds is undone
    module = f"mytools_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(TOOLS)
    (tmp_path / "catalog.yaml").write_text(textwrap.dedent(f"""
        tools:
          - name: py
            capabilities:
              - name: nap
                function: {module}:nap
                run_in_thread: true
                timeout_s: 0.3
    """))
    return tmp_path, module


def orchestrator(catalog: Catalog) -> Orchestrator:
    return Orchestrator(catalog=catalog, llm=ScriptedLLM(["unused"]), registry=CollectorRegistry(),
                        config=OrchestratorConfig(store_url="memory://", synthesis_enabled=False,
                                                  retry_base_delay_s=0.01))


def run(catalog: Catalog, params: dict[str, Any]) -> Any:
    plan = {"steps": [{"id": "n", "tool": "py", "capability": "nap", "params": params}]}
    return orchestrator(catalog).run("nap", plan=plan).steps["n"]


def test_a_tool_beside_its_catalog_imports_and_takes_its_schema_from_type_hints(
    folder: tuple[Path, str],
) -> None:
    path, module = folder
    assert str(path) not in sys.path  # no PYTHONPATH=. needed
    catalog = Catalog.from_file(path / "catalog.yaml")
    cap = catalog.get("py", "nap")
    assert cap.input_schema["properties"]["seconds"]["type"] == "number"
    assert cap.input_schema["required"] == ["seconds"]
    assert cap.description == "Sleep for a while, then say how long."
    step = run(catalog, {"seconds": "0.01", "label": "quick"})
    assert step.status == "succeeded" and step.output == {"slept": 0.01, "label": "quick"}
    # it round-trips: the catalog writes the function's own name back
    assert catalog.to_dict()["tools"][0]["capabilities"][0]["function"] == f"{module}:nap"


def test_a_module_in_neither_place_names_both(tmp_path: Path) -> None:
    (tmp_path / "catalog.yaml").write_text(
        "tools:\n  - name: py\n    capabilities:\n      - name: nap\n"
        "        function: not_here_anywhere:nap\n")
    with pytest.raises(CatalogError, match=r"No module named 'not_here_anywhere' \(looked for it "
                                           r"installed, then in the catalog's folder"):
        Catalog.from_file(tmp_path / "catalog.yaml")


async def test_a_timed_out_thread_tool_is_not_run_again_while_it_still_runs(
    folder: tuple[Path, str],
) -> None:
    path, _ = folder
    orch = orchestrator(Catalog.from_file(path / "catalog.yaml"))
    plan = {"steps": [{"id": "n", "tool": "py", "capability": "nap",
                       "params": {"seconds": 1.0, "label": "slow"}}]}
    step = (await orch.arun("nap", plan=plan)).steps["n"]
    assert step.status == "failed" and step.error.code == "TOOL_TIMEOUT"
    assert "still running in its thread" in step.error.message
    assert len(step.attempts) == 1  # no retry while the first call runs
    # the same call again, in another run, while the thread still sleeps: refused unsent
    again = (await orch.arun("nap", plan=plan)).steps["n"]
    assert again.status == "failed" and again.error.code == "TOOL_STILL_RUNNING"
    assert len(again.attempts) == 1
    await asyncio.sleep(1.1)
    assert (path / "calls.txt").read_text().splitlines() == ["slow"]  # it ran once
    # once the thread ended, the call may be sent again
    plan["steps"][0]["params"]["seconds"] = 0.01
    assert (await orch.arun("nap", plan=plan)).steps["n"].status == "succeeded"


def test_the_sync_run_returns_at_the_timeout_not_when_the_thread_ends(
    folder: tuple[Path, str],
) -> None:
    """Orchestrator.run is asyncio.run underneath, which waits for the loop's default
    executor: a tool thread there held the result back until the tool returned."""
    path, _ = folder
    orch = orchestrator(Catalog.from_file(path / "catalog.yaml"))
    plan = {"steps": [{"id": "n", "tool": "py", "capability": "nap",
                       "params": {"seconds": 3.0, "label": "slow"}}]}
    began = time.monotonic()
    step = orch.run("nap", plan=plan).steps["n"]
    took = time.monotonic() - began
    assert step.error is not None and step.error.code == "TOOL_TIMEOUT"
    assert took < 2.0, f"run() took {took:.1f} s: it waited for the 3 s thread"


def test_the_cli_prints_the_result_then_says_what_its_exit_waits_for(
    folder: tuple[Path, str], tmp_path: Path,
) -> None:
    path, _ = folder
    plan = {"steps": [{"id": "n", "tool": "py", "capability": "nap",
                       "params": {"seconds": 3.0, "label": "slow"}}]}
    (tmp_path / "script.json").write_text(json.dumps([plan]))
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("ORCH_")},
           "ORCH_CATALOG": str(path / "catalog.yaml"), "ORCH_LLM_PROVIDER": "scripted",
           "ORCH_LLM_SCRIPT": str(tmp_path / "script.json"), "ORCH_SYNTHESIS_ENABLED": "false",
           "ORCH_STORE_URL": f"sqlite:///{tmp_path}/runs.db"}
    began = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "orchestration", "-q", "run", "nap"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    try:
        lines = iter(proc.stdout.readline, "")
        status = next(line for line in lines if line.startswith("  status:"))
        printed = time.monotonic() - began
        waiting = proc.stderr.readline()
        assert proc.wait(30) == 1
    finally:
        if proc.poll() is None:
            proc.kill()
    ended = time.monotonic() - began
    assert "status: failed" in status
    assert waiting.startswith("dagwright: waiting for py.nap to return before exiting")
    # the result came before the 3 s thread ended; the process ended after it
    assert ended - printed > 1.0, (printed, ended)
