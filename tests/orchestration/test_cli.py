"""The CLI: the demo runs every scenario as expected; tools lists a catalog."""

from __future__ import annotations

import io
from pathlib import Path

from orchestration.cli import main
from orchestration.demo.tools import DemoTools
from tests import ROOT


def test_demo_runs_every_scenario_as_expected() -> None:
    out = io.StringIO()
    code = main(["demo"], out=out)
    text = out.getvalue()
    assert code == 0, text
    assert "SCRIPTED" in text
    assert "behaved as expected" in text and "UNEXPECTED" not in text
    assert "coerced $.days: '3' → 3" in text
    assert "layer=validation_feedback outcome=succeeded" in text


def test_tools_lists_the_example_catalog() -> None:
    out = io.StringIO()
    assert main(["tools", "--catalog", str(ROOT / "config" / "catalog.example.yaml")], out=out) == 0
    assert "currency.convert" in out.getvalue() and "http://127.0.0.1:8701/convert" in out.getvalue()


def _env_for(tmp_path: Path, demo_urls: dict[str, str], answers: list[object]) -> dict[str, str]:
    import json
    import os

    catalog = tmp_path / "catalog.yaml"
    text = (ROOT / "config" / "catalog.example.yaml").read_text()
    for port, tool in ((8700, "stocks"), (8701, "currency"), (8702, "weather")):
        text = text.replace(f"${{DAGWRIGHT_DEMO_HOST:-http://127.0.0.1}}:{port}", demo_urls[tool])
    catalog.write_text(text)
    script = tmp_path / "script.json"
    script.write_text(json.dumps(answers))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_")}
    env.update({"ORCH_CATALOG": str(catalog), "ORCH_LLM_PROVIDER": "scripted",
                "ORCH_LLM_SCRIPT": str(script)})
    return env


def test_run_and_plan_commands_in_a_real_process(tmp_path: Path, demo_tools: DemoTools) -> None:
    import json
    import subprocess
    import sys

    plan = {"steps": [{"id": "q", "tool": "stocks", "capability": "quote",
                       "params": {"symbol": "AAPL"}}]}
    env = _env_for(tmp_path, demo_tools.urls, [plan, "Apple trades at 227.52 USD."])
    run = subprocess.run([sys.executable, "-m", "orchestration", "run", "Apple price?", "--json"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert result["status"] == "succeeded"
    assert result["steps"]["q"]["output"]["price"] == 227.52
    assert result["answer"] == "Apple trades at 227.52 USD."
    assert [r.body for r in demo_tools["stocks"].requests_to("/quote")] == [{"symbol": "AAPL"}]

    env = _env_for(tmp_path, demo_tools.urls, [plan])
    shown = subprocess.run([sys.executable, "-m", "orchestration", "plan", "Apple price?"],
                           env=env, capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert 'q: stocks.quote({"symbol": "AAPL"})' in shown.stdout
    assert len(demo_tools["stocks"].requests_to("/quote")) == 1  # plan does not execute


def test_run_without_a_catalog_is_a_clear_error(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_")}
    done = subprocess.run([sys.executable, "-m", "orchestration", "run", "q"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "ORCH_CATALOG is not set" in done.stderr
