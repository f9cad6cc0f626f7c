"""``dagwright serve`` as an operator starts it: the span exporter of ``ORCH_OTEL_EXPORTER``
(as ``dagwright run`` and ``worker`` have it) and the ``-q``/``-v`` its help offers, with one
process and with ``--workers 2``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests import ROOT

pytestmark = pytest.mark.slow

PLAN = {"steps": [{"id": "n", "tool": "calc", "capability": "double", "params": {"x": 21}}]}
WORKERS = [pytest.param([], id="one-process"), pytest.param(["--workers", "2"], id="workers-2")]


def server_env(tmp_path: Path, **settings: str) -> dict[str, str]:
    """A catalog with one Python tool, a SQLite store, a model never asked (every request
    brings its plan, synthesis off) and no ORCH_* setting of the tests' own."""
    (tmp_path / "calc_tools.py").write_text(
        "def double(x: int) -> dict:\n    \"\"\"Twice x.\"\"\"\n    return {'y': 2 * x}\n")
    (tmp_path / "script.json").write_text('["unused"]')
    (tmp_path / "catalog.json").write_text(json.dumps({"tools": [{
        "name": "calc", "description": "arithmetic",
        "capabilities": [{"name": "double", "function": "calc_tools:double"}]}]}))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ORCH_", "OTEL_", "PROMETHEUS_"))}
    return {**env, "PYTHONPATH": str(ROOT), "ORCH_CATALOG": str(tmp_path / "catalog.json"),
            "ORCH_STORE_URL": f"sqlite:///{tmp_path}/runs.db", "ORCH_LLM_PROVIDER": "scripted",
            "ORCH_LLM_SCRIPT": str(tmp_path / "script.json"),
            "ORCH_SYNTHESIS_ENABLED": "false", **settings}


@contextmanager
def serving(env: dict[str, str], *args: str) -> Iterator[str]:
    """``dagwright serve --port 0 ARGS`` on 127.0.0.1 until SIGTERM; yields its URL, and
    leaves its stderr in ``env``'s folder as serve.err once it has stopped."""
    errors = Path(env["ORCH_CATALOG"]).parent / "serve.err"
    with errors.open("w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "orchestration", "serve", "--port", "0",
                                 *args], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                stderr=err, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("dagwright serve: http://127.0.0.1:"), errors.read_text()
        yield line.split()[2].removesuffix("/ui/")
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


def run_once(url: str) -> dict[str, object]:
    answer = httpx.post(f"{url}/v1/runs", json={"query": "double 21", "plan": PLAN, "wait": True},
                        timeout=30)
    assert answer.status_code == 200, answer.text
    result = dict(answer.json())
    assert result["status"] == "succeeded"
    return result


@pytest.mark.parametrize("workers", WORKERS)
def test_serve_exports_spans_as_ORCH_OTEL_EXPORTER_says(tmp_path: Path,
                                                        workers: list[str]) -> None:
    env = server_env(tmp_path, ORCH_OTEL_EXPORTER="console")
    with serving(env, *workers) as url:
        result = run_once(url)
    assert result["trace_id"], "the run was not traced"
    spans = (tmp_path / "serve.err").read_text()
    assert f'"trace_id": "0x{result["trace_id"]}"' in spans  # exported by the time it stopped
    assert '"name": "invoke_agent dagwright"' in spans


@pytest.mark.parametrize("workers", WORKERS)
def test_serve_quiet_logs_errors_only_and_the_default_logs_each_run(
    tmp_path: Path, workers: list[str],
) -> None:
    env = server_env(tmp_path)
    with serving(env, *workers) as url:
        run_once(url)
    assert "run started" in (tmp_path / "serve.err").read_text()  # INFO: a service's default

    with serving(env, "-q", *workers) as url:
        run_once(url)
    assert "run started" not in (tmp_path / "serve.err").read_text()


def test_serve_verbose_wins_over_ORCH_LOG_LEVEL(tmp_path: Path) -> None:
    env = server_env(tmp_path, ORCH_LOG_LEVEL="ERROR")
    with serving(env, "-v") as url:
        run_once(url)
    assert "run started" in (tmp_path / "serve.err").read_text()
