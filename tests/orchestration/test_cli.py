"""The CLI, mostly through the real ``dagwright`` entry point in a subprocess: what a new
user sees — the run id, the plan, each step with the layer that fixed it, the reason a
run failed and what to do next, exit codes, --json everywhere output is data, errors
that name the setting."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestration.cli import main
from orchestration.demo.tools import DemoTools
from tests import ROOT

CATALOG = ROOT / "config" / "catalog.example.yaml"


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


def test_tools_indents_every_line_of_a_description_and_skips_an_empty_one(tmp_path: Path) -> None:
    """A new user listed a real OpenAPI document: descriptions of several paragraphs ran
    out to the left margin between capabilities, and an empty one left a blank line."""
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text(
        "tools:\n- name: t\n  base_url: http://127.0.0.1:9\n  capabilities:\n"
        "  - name: long\n    path: /long\n    description: |\n      First paragraph.\n\n"
        "      Second paragraph.\n"
        "  - name: bare\n    path: /bare\n    description: ''\n")
    out = io.StringIO()
    assert main(["tools", "--catalog", str(catalog)], out=out) == 0
    lines = out.getvalue().splitlines()
    at = lines.index(next(line for line in lines if line.startswith("t.long")))
    assert lines[at + 2:at + 4] == ["    First paragraph.", "    Second paragraph."]
    assert lines[at + 4].startswith("t.bare") and lines[at + 5].startswith("    source:")
    assert lines[at + 6:] == []  # no line for the empty description
    assert all(line.strip() for line in lines), lines


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
    assert "no catalog: set ORCH_CATALOG or pass --catalog FILE" in done.stderr
    assert "next:" in done.stderr and "Traceback" not in done.stderr


# --- the real entry point ----------------------------------------------------------------------


def dagwright(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the installed ``dagwright`` script (``python -m orchestration`` if it is absent)."""
    script = Path(sys.executable).with_name("dagwright")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "orchestration"]
    base = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_")}
    return subprocess.run([*command, *args], env=env if env is not None else base,
                          capture_output=True, text=True, timeout=120)


def test_version_and_help_name_every_command_and_the_exit_codes() -> None:
    from orchestration import __version__

    version = dagwright("--version")
    assert version.returncode == 0 and version.stdout.strip() == f"dagwright {__version__}"
    shown = dagwright("--help").stdout
    for command in ("demo", "run", "plan", "tools", "debug", "config", "serve-tools"):
        assert f"\n    {command}" in shown, command
    for code in ("0", "1", "2", "3", "4", "130"):
        assert f"\n  {code:<4} " in shown
    assert "docs/troubleshooting.md" in shown


def test_an_unknown_demo_scenario_is_an_error_with_the_closest_name(
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = io.StringIO()
    assert main(["demo", "layr3"], out=out) == 2 and out.getvalue() == ""
    err = capsys.readouterr().err
    assert "dagwright: error: unknown demo scenario 'layr3' (did you mean 'layer3'?); " \
        "the scenarios are: weather, parallel" in err
    assert "next: `dagwright demo --list` describes each" in err
    assert main(["demo", "--list"], out=out) == 0
    assert out.getvalue().splitlines()[0].startswith("weather ")


def test_run_shows_run_id_plan_steps_with_the_fixing_layer_and_the_debug_store_finds_it(
    tmp_path: Path, demo_tools: DemoTools,
) -> None:
    plan = {"steps": [
        {"id": "q", "tool": "stocks", "capability": "quote", "params": {"symbol": "AAPL"}},
        {"id": "eur", "tool": "currency", "capability": "convert",
         "params": {"amount": "{{q.price}}", "from": "USD", "to": "EUR"}, "depends_on": ["q"]},
        {"id": "fee", "tool": "currency", "capability": "convert",
         "params": {"amount": "10", "from": "USD", "to": "JPY"}},
    ]}
    env = _env_for(tmp_path, demo_tools.urls, [plan, "Apple is about 209 EUR."])
    catalog = env.pop("ORCH_CATALOG")
    env.update({"ORCH_LLM_DEBUG_ENABLED": "true", "ORCH_LLM_DEBUG_PATH": str(tmp_path / "d.jsonl")})
    done = dagwright("run", "Apple in EUR?", "--catalog", catalog, env=env)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("run ") and len(lines[0].split()[1]) == 32
    run_id = lines[0].split()[1]
    assert lines[1] == "  plan:"
    assert '  ├─ q: stocks.quote({"symbol": "AAPL"})' in lines
    assert any(line.startswith("  │  └─ eur: currency.convert(") for line in lines)
    assert any(line.startswith("  ✔ fee [currency.convert] succeeded — fixed by layer 2 "
                               "(type coercion) — 1 attempt(s)") for line in lines)
    assert "  status: succeeded" in done.stdout and "Apple is about 209 EUR." in done.stdout

    shown = dagwright("debug", run_id[:8], "--path", str(tmp_path / "d.jsonl"), env=env)
    assert shown.returncode == 0 and shown.stdout.startswith(f"run {run_id}: 2 LLM exchange(s)")


def test_a_planning_failure_says_why_and_what_next_with_exit_code_3(
    tmp_path: Path, demo_tools: DemoTools,
) -> None:
    env = _env_for(tmp_path, demo_tools.urls, ["no plan here", "still none", "nope"])
    done = dagwright("run", "Apple price?", env=env)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "  status: failed" in done.stdout
    assert "  reason: planning failed: " in done.stdout
    assert "  next: check the LLM settings with `dagwright config`" in done.stdout


def test_run_json_of_a_planning_failure(tmp_path: Path, demo_tools: DemoTools,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in _env_for(tmp_path, demo_tools.urls, ["x", "y", "z"]).items():
        if name.startswith("ORCH_"):
            monkeypatch.setenv(name, value)
    out = io.StringIO()
    assert main(["run", "Apple price?", "--json"], out=out) == 3
    result = json.loads(out.getvalue())
    assert result["status"] == "failed" and result["error"].startswith("planning failed")
    assert result["plan"] is None and len(result["run_id"]) == 32


def test_a_budget_stop_has_its_own_exit_code_and_reason(tmp_path: Path, demo_tools: DemoTools) -> None:
    plan = {"steps": [{"id": "q", "tool": "stocks", "capability": "quote",
                       "params": {"symbol": "AAPL"}}]}
    env = _env_for(tmp_path, demo_tools.urls, [plan, "never asked"])
    env["ORCH_MAX_TOKENS_PER_RUN"] = "5"
    done = dagwright("run", "Apple price?", env=env)
    assert done.returncode == 4, done.stdout + done.stderr
    assert "  status: partial" in done.stdout
    assert "  reason: run stopped: the run's LLM token budget is spent: " in done.stdout
    assert "  next: raise ORCH_MAX_TOKENS_PER_RUN if the run needs more" in done.stdout


@pytest.mark.parametrize(("env", "message"), [
    ({"ORCH_MAX_CONCURRENCY": "abc"},
     "dagwright: error: ORCH_MAX_CONCURRENCY='abc' is not valid: Input should be a valid integer"),
    ({"ORCH_LLM_PROVIDER": "openia"},
     "dagwright: error: ORCH_LLM_PROVIDER='openia' is not valid; allowed: one of openai, "
     "anthropic, scripted — did you mean 'openai'?"),
])
def test_configuration_errors_name_the_variable_and_end_with_what_to_do(
    env: dict[str, str], message: str, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(["run", "q", "--catalog", str(CATALOG)], out=io.StringIO()) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert "\n  next: fix the setting" in err


def test_a_misspelt_variable_is_warned_about_with_the_closest_name() -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_")}
    done = dagwright("config", env={**base, "ORCH_MAX_CONCURENCY": "3"})
    assert done.returncode == 0
    assert done.stderr.strip() == ("dagwright: warning: ORCH_MAX_CONCURENCY is not a dagwright "
                                   "setting and is ignored; did you mean ORCH_MAX_CONCURRENCY?")
    assert "ORCH_MAX_CONCURRENCY=8" in done.stdout


def test_tools_and_config_print_json_that_reads_back() -> None:
    from orchestration import Catalog

    out = io.StringIO()
    assert main(["tools", "--catalog", str(CATALOG), "--json"], out=out) == 0
    catalog = Catalog.from_dict(json.loads(out.getvalue()))
    assert catalog.has("currency", "convert")
    assert catalog.to_dict() == json.loads(out.getvalue())
    out = io.StringIO()
    assert main(["config", "--json"], out=out) == 0
    assert json.loads(out.getvalue())["ORCH_MAX_CONCURRENCY"] == 8


def test_a_broken_catalog_lists_every_problem_and_what_to_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    bad = tmp_path / "tools.yaml"
    bad.write_text("tools:\n  - name: t\n    capabilities:\n      - name: a\n        url: python:f\n"
                   "      - name: b\n        path: /b\n")
    assert main(["tools", "--catalog", str(bad)], out=io.StringIO()) == 2
    err = capsys.readouterr().err
    assert f"dagwright: error: {bad}: 2 problems in the catalog:" in err
    assert "\n  1. " in err and "\n  2. " in err
    assert "next: fix the catalog; `dagwright tools --catalog FILE` checks" in err


def test_plan_command_planning_failure_exits_3_with_what_next(
    tmp_path: Path, demo_tools: DemoTools, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name, value in _env_for(tmp_path, demo_tools.urls, ["x", "y", "z"]).items():
        if name.startswith("ORCH_"):
            monkeypatch.setenv(name, value)
    assert main(["plan", "Apple price?"], out=io.StringIO()) == 3
    err = capsys.readouterr().err
    assert err.startswith("dagwright: error: planning failed: no valid plan after 3 attempt(s)")
    assert "next: check the LLM settings with `dagwright config`" in err


@pytest.mark.parametrize(("args", "said"), [
    (["run", "q", "--context", "user=a", "--context", "user=b"], "--context user is given twice"),
    (["run", "q", "--context", "user"], "--context 'user' is not KEY=VALUE"),
    (["run", "--workflow", "w", "--input", "a=1", "--input", "a=2"], "--input a is given twice"),
], ids=["context-twice", "context-without-value", "input-twice"])
def test_key_value_options_refuse_a_key_given_twice(
    args: list[str], said: str, capsys: pytest.CaptureFixture[str],
) -> None:
    """Before: ``--context user=a --context user=b`` ran as user b, silently; ``--input``
    refused the same. Both now read KEY=VALUE pairs one way."""
    assert main([*args, "--catalog", str(CATALOG)], out=io.StringIO()) == 2
    assert said in capsys.readouterr().err


def test_runs_show_gives_a_run_not_finished_no_duration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """A run still running, or whose process stopped, was shown as taking '0 ms'."""
    import asyncio

    from prometheus_client import CollectorRegistry

    from orchestration import Catalog, Orchestrator, OrchestratorConfig, ScriptedLLM

    async def wait() -> str:
        await asyncio.sleep(30)
        return "done"

    store = f"sqlite:///{tmp_path}/runs.db"

    async def stop_midway() -> None:
        catalog = Catalog()
        catalog.add_function(wait, tool="clock", capability="wait",
                             input_schema={"type": "object", "properties": {}})
        orch = Orchestrator(catalog=catalog, llm=ScriptedLLM(["unused"]),
                            registry=CollectorRegistry(),
                            config=OrchestratorConfig(store_url=store, synthesis_enabled=False))
        try:
            handle = await orch.astart("wait a while", run_id="unfinished", plan={"steps": [
                {"id": "w", "tool": "clock", "capability": "wait", "params": {}}]})
            await asyncio.sleep(0.2)
            await handle.interrupt()  # as its process stopping would: it stays running
        finally:
            await orch.aclose()

    asyncio.run(stop_midway())
    monkeypatch.setenv("ORCH_STORE_URL", store)
    assert main(["runs", "show", "unfinished"]) == 0
    shown = capsys.readouterr().out
    assert "status: running" in shown and "| not finished" in shown, shown
    assert "| 0 ms" not in shown


def test_runs_list_shows_a_boolean_context_value_as_it_was_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """`--context vip=true` was listed back as `vip=True`, Python's spelling."""
    from prometheus_client import CollectorRegistry

    from orchestration import Catalog, Orchestrator, OrchestratorConfig, ScriptedLLM

    def hello() -> str:
        return "hi"

    store = f"sqlite:///{tmp_path}/runs.db"
    catalog = Catalog()
    catalog.add_function(hello, tool="greet", capability="hello",
                         input_schema={"type": "object", "properties": {}})
    orch = Orchestrator(catalog=catalog, llm=ScriptedLLM(["unused"]), registry=CollectorRegistry(),
                        config=OrchestratorConfig(store_url=store, synthesis_enabled=False))
    try:
        orch.run("say hello", context={"user": "u-7", "vip": True, "trial": False}, plan={
            "steps": [{"id": "h", "tool": "greet", "capability": "hello", "params": {}}]})
    finally:
        orch.close()
    monkeypatch.setenv("ORCH_STORE_URL", store)
    assert main(["runs", "list"]) == 0
    listed = capsys.readouterr().out
    assert "for trial=false user=u-7 vip=true" in listed, listed
