"""``dagwright`` as a user runs it from a shell: a scripted model, a catalog file, a SQLite
run store, and no ORCH_* setting but these (the tests' own environment must not leak in)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.side_effects import SideEffectTools

__all__ = ["dagwright", "run_killed_while_paying", "scripted_env"]


def scripted_env(tmp_path: Path, catalog: dict[str, Any], answers: list[Any]) -> dict[str, str]:
    """The environment of a shell whose ORCH_* settings are: ``catalog`` and the scripted
    model's ``answers`` written under ``tmp_path``, runs in a SQLite file there, synthesis
    off."""
    (tmp_path / "catalog.json").write_text(json.dumps(catalog))
    (tmp_path / "script.json").write_text(json.dumps(answers))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_")}
    return {**env, "ORCH_CATALOG": str(tmp_path / "catalog.json"),
            "ORCH_STORE_URL": f"sqlite:///{tmp_path}/runs.db", "ORCH_LLM_PROVIDER": "scripted",
            "ORCH_LLM_SCRIPT": str(tmp_path / "script.json"), "ORCH_SYNTHESIS_ENABLED": "false"}


def dagwright(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``dagwright ARGS`` in that shell, to its end."""
    return subprocess.run([sys.executable, "-m", "orchestration", *args], env=env,
                          capture_output=True, text=True, timeout=60)


def run_killed_while_paying(env: dict[str, str], tools: SideEffectTools, query: str) -> str:
    """``dagwright run -q QUERY`` killed (SIGKILL) once its payment reached the tool, whose
    answer is held back; the run's id, from the first line it printed."""
    tools.hold.set()
    proc = subprocess.Popen([sys.executable, "-m", "orchestration", "run", "-q", query],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert tools.arrived.wait(30), "the payment never reached the tool"
    finally:
        proc.kill()
        out, _ = proc.communicate(timeout=10)
        tools.hold.clear()
        tools.release.set()
    return out.splitlines()[0].split()[1]
