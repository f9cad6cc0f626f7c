"""The benchmark scripts, run end to end at tiny sizes so they cannot rot.

Each test runs a script's ``main`` with minimal sizes and a temporary report, and checks
that it printed its figures and wrote (only) its own section with the command, the
machine facts and the figures. The real numbers come from full runs (docs/benchmarks.md).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchmarks import (
    bfcl_rates,
    common,
    http_calls,
    lean_path,
    llm_sim,
    plan_cache,
    planner_path,
    recovery,
    scale_out,
    scheduler,
    selection,
    store,
    streaming_plan,
    throughput,
)
from executors import coerce


def section(report: Path, name: str) -> str:
    text = report.read_text(encoding="utf-8")
    match = re.search(rf"<!-- BEGIN {name} .*?-->\n(.*?)<!-- END {name} -->", text, re.S)
    assert match, f"section {name} missing from:\n{text}"
    return match.group(1)


def assert_preamble(body: str, module: str) -> None:
    assert f"python -m benchmarks.{module}" in body
    assert "- machine: " in body and "Python" in body and "pydantic" in body
    assert re.search(r"measured \d{4}-\d{2}-\d{2}", body)


def test_write_section_replaces_only_its_own_section(tmp_path: Path) -> None:
    report = tmp_path / "bench.md"
    common.write_section(report, "throughput", "## T\nbody-v1")
    common.write_section(report, "scheduler", "## S\nsched")
    common.write_section(report, "throughput", "## T\nbody-v2")
    text = report.read_text()
    assert text.startswith("# Benchmarks")
    assert "body-v1" not in text and "body-v2" in text and "sched" in text
    assert text.index("BEGIN scheduler") < text.index("BEGIN throughput")  # canonical order


def test_scheduler_smoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "bench.md"
    argv = ["--sizes", "24", "--repeats", "1", "--makespan-sizes", "12", "--no-memory",
            "--profile", "never", "--report", str(report)]
    if not scheduler.have_langgraph():
        argv.append("--no-langgraph")
    assert scheduler.main(argv) == 0
    out = capsys.readouterr().out
    assert re.search(r"overhead\s+24 steps: floor [\d.]+ µs/step, dagwright [\d.]+ µs/step", out)
    assert re.search(r"makespan\s+12 steps: critical path [\d.]+ s", out)
    body = section(report, "scheduler")
    assert_preamble(body, "scheduler")
    assert "| 24 |" in body and "### Makespan over critical path" in body
    # the headline: the tracing configurations and the planner path, each with a verdict
    assert re.search(r"tracing\s+24 steps: SDK sampled [\d.-]+ µs/step over the floor; every "
                     r"span [\d.]+× the floor; no-op [\d.]+×; planner path [\d.-]+ \(streamed "
                     r"[\d.-]+\)", out)
    assert "### Overhead per step by tracing configuration (headline)" in body
    assert "**Headline — real SDK `TracerProvider`, head sampling" in body


def test_http_calls_smoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "bench.md"
    argv = ["--concurrency", "2", "--delays", "0", "--calls", "20", "--repeats", "1",
            "--profile", "never", "--report", str(report)]
    assert http_calls.main(argv) == 0
    out = capsys.readouterr().out
    assert re.search(r"bare [\d.]+ µs/call, transport alone [\d.]+, dagwright [\d.]+ µs/call -> "
                     r"[\d.]+×", out)
    body = section(report, "http_calls")
    assert_preamble(body, "http_calls")
    assert re.search(r"\| 0 ms \| 2 \| 20 \| [\d.,]+ \|", body)


def test_recovery_smoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "docs" / "bench.md"
    argv = ["--scenarios", "4", "--trials", "1", "--report", str(report)]
    assert recovery.main(argv) == 0
    out = capsys.readouterr().out
    for label, _ in recovery.CONFIGS:
        assert re.search(rf"{re.escape(label)}\s+correct\s+[\d.]+%", out), label
    body = section(report, "recovery")
    assert_preamble(body, "recovery")
    assert "| real | 1+2+3+4 | 4 |" in body and "| stress | 1+2+3+4 | 4 |" in body
    assert "**Where the rates come from.**" in body and "BFCL" in body
    assert "**Targets** (real mix, all four layers)" in body
    assert re.search(r"\| correct answers \| ≥ 99.5% \| [\d.]+% \[[\d.]+–[\d.]+\] \|", body)
    if "![Recovery ablation](img/recovery_ablation.png)" in body:  # matplotlib installed
        assert (tmp_path / "docs" / "img" / "recovery_ablation.png").stat().st_size > 1000


def test_wilson_intervals_match_known_values() -> None:
    low, high = recovery.wilson(0, 10)
    assert low == 0.0 and round(high, 2) == 27.75
    low, high = recovery.wilson(5, 10)
    assert (round(low, 2), round(high, 2)) == (23.66, 76.34)
    ratio, low, high = recovery.ratio_interval([1.0, 1.0, 3.0], [1.0, 1.0, 1.0])
    assert ratio == 5 / 3 and low < ratio < high


def test_injected_faults_include_forms_layer_2_cannot_fix() -> None:
    """The simulator writes what models wrote, not the inverse of the coercion rules."""
    catalog = recovery.build_catalog(recovery.TransientFaults(recovery.TransientRates(0, 0, 0), 0.02))
    items = recovery.scenarios()
    truth = {s.name: {st["id"]: st["params"] for st in s.plan["steps"]} for s in items}
    sim = llm_sim.PlannerSimulator(catalog, items, truth, llm_sim.STRESS_MIX.scaled(4))
    fixed, unfixed = set(), set()
    for seed in range(12):
        for scenario in items:
            sim.start_run(scenario, str(seed))
            assert sim.run is not None
            faults = sim._draw_faults(sim.run, "")
            for fault in faults:
                if fault.kind not in llm_sim.FORM_KINDS:
                    continue
                cap = catalog.get(*next((s["tool"], s["capability"]) for s in scenario.plan["steps"]
                                        if s["id"] == fault.step_id))
                schema = cap.input_schema["properties"][fault.param]
                result = coerce(fault.wrong, schema)
                (fixed if result.value == fault.truth else unfixed).add(fault.kind)
    assert {"bool_as_text", "enum_case"} <= fixed
    assert {"list_for_scalar", "collection_as_text"} <= unfixed  # e.g. "east, west"


def test_layer_1_effect_is_read_from_the_prompt_content() -> None:
    typed = "### t.c\nparams:\n  - days: integer (required)\n  - to: \"EUR\" | \"USD\" (required)\n"
    raw = '### t.c\ninput schema: {"properties":{"days":{"type":"integer"},"on":{"type":"boolean"}}}\n'
    assert llm_sim.stated_type(llm_sim.capability_section(typed, "t.c"), "days") == "integer"
    assert llm_sim.stated_type(llm_sim.capability_section(typed, "t.c"), "to") == "enum"
    assert llm_sim.stated_type(llm_sim.capability_section(raw, "t.c"), "on") == "boolean"
    assert llm_sim.stated_type(llm_sim.capability_section(raw, "t.c"), "gone") is None
    rule = 'Give every value its type. boolean values are\n  true or false, never "true" or 1.'
    assert llm_sim.rule_stated(rule, "bool_as_text") and not llm_sim.rule_stated(raw, "bool_as_text")


def test_bfcl_rejections_are_sorted_into_the_simulated_kinds() -> None:
    def entry(kind: str, message: str) -> dict[str, object]:
        return {"error_type": kind, "error": [message]}

    assert bfcl_rates.classify(entry(
        "type_error:simple", "Incorrect type for parameter 'x'. Expected type boolean, got str. "
        "Parameter value: 'True'.")) == "bool_as_text"
    assert bfcl_rates.classify(entry(
        "type_error:simple", "Expected type integer, got NoneType. Parameter value: None.")) == "null_value"
    assert bfcl_rates.classify(entry(
        "value_error:others", "Invalid value for parameter 'rate': 5.0. Expected one of [0.05].")) \
        == "percent_scale"
    assert bfcl_rates.classify(entry(
        "simple_function_checker:missing_required", "Missing required parameter: 'a'.")) \
        == "missing_required"


def test_recovery_scenarios_and_tools_meet_the_brief() -> None:
    items = recovery.scenarios()
    assert len(items) >= 30
    tools = {step["tool"] for s in items for step in s.plan["steps"]}
    assert len(tools) >= 8
    assert all(len(s.plan["steps"]) >= 2 for s in items)


def test_throughput_smoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "bench.md"
    argv = ["--runs", "4", "--levels", "3", "--llm-latency", "0.01", "--tool-ms", "1,2",
            "--reference", "", "--report", str(report)]
    assert throughput.main(argv) == 0
    out = capsys.readouterr().out
    assert re.search(r"library, defaults: N=\s+4:\s+[\d.]+ runs/s", out)
    assert re.search(r"`serve --workers 2` over HTTP: N=\s+4:\s+[\d.]+ runs/s", out)
    body = section(report, "throughput")
    assert_preamble(body, "throughput")
    assert "| `serve --workers 1` over HTTP | " in body and "--workers 2` does" in body
    assert re.search(r"\| 3 \| [\d.]+ \| [\d.,]+ \|", body)


def test_store_smoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "bench.md"
    argv = ["--steps", "30", "--repeats", "1", "--no-postgres", "--report", str(report)]
    assert store.main(argv) == 0
    out = capsys.readouterr().out
    assert re.search(r"idempotent steps, 30 steps: memory [\d.]+ ms, sqlite [\d.]+ ms \([+-][\d.]+ µs/step\)", out)
    body = section(report, "store")
    assert_preamble(body, "store")
    assert "| side-effect steps | sqlite |" in body


@pytest.mark.temporal
def test_scale_out_smoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Local, one worker and two workers on one tiny batch (real dev server and workers;
    without the temporal CLI the Temporal rows say so instead of a figure)."""
    report = tmp_path / "bench.md"
    argv = ["--quick", "--runs", "6", "--tool-ms", "2", "--report", str(report)]
    assert scale_out.main(argv) == 0
    out = capsys.readouterr().out
    assert re.search(r"local:\s+[\d.]+ runs/s", out)
    body = section(report, "scale_out")
    assert_preamble(body, "scale_out")
    assert re.search(r"\| local \| [\d.,]+ \| [\d.,]+ \| [\d.,]+ \| [\d.,]+ \| 1\.00× local \|", body)
    for label in ("temporal, 1 worker", "temporal, 2 workers"):
        measured = re.search(rf"\| {label} \| [\d.,]+ \| .*× local \|", body)
        assert measured or f"| {label} | — |" in body, body
        if measured:
            assert re.search(rf"{label}: [\d.]+ runs/s", out)


def test_streaming_plan_smoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Both providers, the plan streamed and whole, on the loopback SSE servers."""
    report = tmp_path / "bench.md"
    assert streaming_plan.main(["--quick", "--report", str(report)]) == 0
    out = capsys.readouterr().out
    for provider in ("openai", "anthropic"):
        assert re.search(rf"{provider}\s+whole:\s+first tool call\s+[\d.]+ s", out)
        assert re.search(rf"{provider}\s+streamed:\s+first tool call\s+[\d.]+ s, end to end "
                         r"\s*[\d.]+ s \(first call [\d.]+× sooner", out)
    body = section(report, "streaming_plan")
    assert_preamble(body, "streaming_plan")
    assert re.search(r"\| openai \| streamed \| [\d.]+ \| [\d.]+ \| first call [\d.]+× sooner", body)
    assert "| anthropic | whole |" in body


def test_lean_path_smoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The per-change probe at this checkout's HEAD, in a worktree of its own."""
    import shutil
    import subprocess

    if shutil.which("git") is None or subprocess.run(
            ["git", "-C", str(common.REPO_ROOT), "rev-parse", "HEAD"],
            capture_output=True).returncode != 0:
        pytest.skip("needs git and the repository's history (run from a clone)")
    report = tmp_path / "bench.md"
    argv = ["--quick", "--commits", "HEAD", "--steps", "50", "--repeats", "1",
            "--report", str(report)]
    assert lean_path.main(argv) == 0
    out = capsys.readouterr().out
    assert re.search(r"HEAD: floor [\d.]+ µs/step; overhead SDK sampled [\d.-]+, every span "
                     r"[\d.-]+, no-op [\d.-]+ µs/step", out)
    body = section(report, "lean_path")
    assert_preamble(body, "lean_path")
    assert re.search(r"\| `HEAD` \|  \| [\d.]+ \| [\d.-]+ \| — \|", body)


def test_selection_smoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "bench.md"
    data = tmp_path / "corpus"
    data.mkdir()
    (data / "tools.jsonl").write_text(
        '{"tool": "zoo", "name": "feedAnimals", "description": "Feed the animals.", '
        '"parameters": {"species": {"type": "string", "description": "Which animals."}}}\n')
    (data / "questions.jsonl").write_text(
        '{"question": "the penguins look hungry, feed them", "capabilities": ["zoo.feedAnimals"],'
        ' "kind": "plain"}\n')
    assert selection.main(["--quick", "--pool", "300", "--sizes", "400",
                           "--data", f"jsonl:{data}", "--report", str(report)]) == 0
    out = capsys.readouterr().out
    assert "corpus/plain" in out and "400 capabilities: plan_prompt median" in out
    body = section(report, "selection")
    assert_preamble(body, "selection")
    assert "| corpus/plain | 1 |" in body and "| 400 |" in body


def test_plan_cache_smoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Planned, cache hit, saved workflow and plan given, against the loopback server."""
    report = tmp_path / "bench.md"
    assert plan_cache.main(["--quick", "--report", str(report)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"planned\s+LLM calls/run 1\.0\s+median\s+[\d.]+ ms", out)
    for name in ("plan cache hit", "saved workflow", "plan given"):
        assert re.search(rf"{name}\s+LLM calls/run 0\.0\s+median\s+[\d.]+ ms", out), out
    body = section(report, "plan_cache")
    assert_preamble(body, "plan_cache")
    assert re.search(r"\| plan cache hit \| 0 \| [\d,.]+ \| [\d,.]+ \| \d+× faster", body)
    assert "The machine is shared with other work (load average" in body


def test_planner_path_smoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "bench.md"
    argv = ["--steps", "30", "--repeats", "1", "--reference", "", "--report", str(report)]
    assert planner_path.main([*argv, "--quick"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"planner, whole answer\s+wall\s+[\d.]+ µs/step \([\d.]+× given\)", out)
    body = section(report, "planner_path")
    assert_preamble(body, "planner_path")
    assert "| planner, large pieces | " in body and "goal" in body
