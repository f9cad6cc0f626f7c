"""``temporalio`` stays an optional extra: without it dagwright imports and runs locally,
and asking for the Temporal backend or a worker says which extra to install.

Each case runs in a fresh interpreter in which ``import temporalio`` fails, as it does
where the ``temporal`` extra is not installed.
"""

from __future__ import annotations

import os
import subprocess
import sys

from tests import ROOT

BLOCK = "import sys; sys.modules['temporalio'] = None\n"


def python(code: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", BLOCK + code, *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


def test_dagwright_imports_and_runs_locally_without_temporalio() -> None:
    proc = python(
        "from orchestration import Catalog, Orchestrator, OrchestratorConfig, ScriptedLLM\n"
        "import orchestration.cli\n"
        "catalog = Catalog()\n"
        "catalog.add_function(lambda x: {'y': x}, tool='t', capability='c')\n"
        "orch = Orchestrator(catalog=catalog, llm=ScriptedLLM(['ok']),\n"
        "                    config=OrchestratorConfig(store_url='memory://'))\n"
        "plan = {'steps': [{'id': 's', 'tool': 't', 'capability': 'c', 'params': {'x': 1}}]}\n"
        "print(orch.run('q', plan=plan).status)\n"
        "assert 'temporalio' not in [m for m in sys.modules if sys.modules[m] is not None]\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "succeeded"


def test_the_temporal_backend_without_the_extra_names_the_extra() -> None:
    proc = python(
        "from orchestration import Catalog, ConfigError, Orchestrator, OrchestratorConfig, ScriptedLLM\n"
        "orch = Orchestrator(catalog=Catalog(), llm=ScriptedLLM([]),\n"
        "                    config=OrchestratorConfig(backend='temporal'))\n"
        "try:\n"
        "    orch.run('q')\n"
        "except ConfigError as exc:\n"
        "    print(exc)\n")
    assert proc.returncode == 0, proc.stderr
    line = f"pip install -e '{ROOT.resolve()}[temporal]'"  # this checkout, installed editable
    assert "ORCH_BACKEND=temporal needs the 'temporal' extra" in proc.stdout and line in proc.stdout
    worker = python("from orchestration.cli import main; sys.exit(main(['worker']))")
    assert worker.returncode == 2
    assert "dagwright worker needs the 'temporal' extra" in worker.stderr and line in worker.stderr
