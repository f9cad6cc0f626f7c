"""The example of config/eval/: a dozen cases over the demo tools, a scripted model whose
plans carry known mistakes, layers on and off. Recorded from the real demo tools, replayed
with them stopped; the attribution must name the layer that fixed each mistake; the
cassettes shipped beside the dataset are what a recording gives; a regression fails the
gate."""

from __future__ import annotations

import dataclasses
import io
import json
import shutil
import socket
import xml.etree.ElementTree as ET
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from orchestration import Catalog
from orchestration.cli import main
from orchestration.demo.tools import start_demo_tools
from orchestration.eval import (
    Cassettes,
    EvalConfig,
    EvalReport,
    config_from_env_file,
    run_eval,
)
from tests import ROOT

EXAMPLE = ROOT / "config" / "eval"
DATASET = EXAMPLE / "demo.jsonl"
SHIPPED = EXAMPLE / "cassettes"
CONFIGS = ("layers-on", "layers-off")

# what the example must show with layers on: the layer that recovered each case's mistake
RECOVERED_BY_LAYERS_ON = {
    "tokyo-weather": [],
    "strings-for-numbers": ["coercion"],
    "days-over-maximum": ["validation_feedback"],
    "currency-words": ["validation_feedback"],
    "company-name-as-ticker": ["validation_feedback"],
    "tesla-proceeds": ["semantic_retry"],
    "tokio-typo": ["semantic_retry"],
    "invented-amount": [],
    "unknown-ticker-replanned": ["replanning"],
    "wrong-company": [],
    "swapped-currencies": [],
    "given-plan": ["coercion"],
}
WRONG = {"wrong-company", "swapped-currencies"}


def _configs() -> list[EvalConfig]:
    return [config_from_env_file(name, EXAMPLE / f"{name}.env") for name in CONFIGS]


def _outcomes(report: EvalReport) -> dict[tuple[str, str], tuple[str, str | None, list[str]]]:
    return {(r.config, r.case): (r.outcome, r.status,
                                 r.attribution.recovering_layers() if r.attribution else [])
            for r in report.results}


def _tracks(directory: Path) -> dict[str, object]:
    return {name: json.loads((directory / f"{name}.json").read_text())["tracks"]
            for name in CONFIGS}


def _port_is_closed(url: str) -> bool:
    parts = urlsplit(url)
    with socket.socket() as probe:
        probe.settimeout(1)
        return probe.connect_ex((parts.hostname or "", parts.port or 80)) != 0


def test_recorded_from_the_demo_tools_and_replayed_with_them_stopped(tmp_path: Path) -> None:
    cassettes = tmp_path / "cassettes"
    with start_demo_tools() as tools:
        catalog = Catalog.from_dict(tools.catalog_dict())
        urls = list(tools.urls.values())
        recorded = run_eval(DATASET, _configs(), catalog=catalog,
                            cassettes=Cassettes(cassettes, "record"))
        requests_made = sum(len(tools[name].requests) for name in tools.urls)
    assert requests_made > 20  # the recording reached the real tools
    assert all(_port_is_closed(url) for url in urls)  # and they are gone now

    replayed = run_eval(DATASET, _configs(), catalog=catalog,
                        cassettes=Cassettes(cassettes, "replay"))

    assert _outcomes(replayed) == _outcomes(recorded)
    on, off = replayed.config("layers-on"), replayed.config("layers-off")
    assert (on.passed, on.succeeded_but_wrong, on.failed, on.errors) == (10, 2, 0, 0)
    assert (off.passed, off.succeeded_but_wrong, off.failed, off.errors) == (2, 2, 8, 0)
    for case, layers in RECOVERED_BY_LAYERS_ON.items():
        result = replayed.result("layers-on", case)
        assert result.attribution is not None
        assert result.attribution.recovering_layers() == layers, case
        assert result.outcome == ("succeeded_but_wrong" if case in WRONG else "passed"), case
    # with the layers off nothing recovers the same mistakes: each is an unrecovered fault
    for case, layers in RECOVERED_BY_LAYERS_ON.items():
        result = replayed.result("layers-off", case)
        assert result.attribution is not None and result.attribution.recovering_layers() == []
        if layers:
            assert result.attribution.unrecovered, case
            assert result.outcome == "failed", case
    # the invented amount was refused by the ground stage, not sent
    refusals = replayed.result("layers-on", "invented-amount").attribution
    assert refusals is not None and [r.params for r in refusals.grounding_refusals] == [
        {"amount": "quote_not_found"}]
    # the layer table adds it up, with what each layer spent
    assert [(row.layer, row.recovered, row.passed_runs) for row in on.layers] == [
        ("coercion", 2, 2), ("validation_feedback", 3, 3), ("semantic_retry", 2, 2),
        ("transient_override", 0, 0), ("resilience", 0, 0), ("replanning", 1, 1)]
    assert on.layer("validation_feedback").llm.calls == 5  # 3 fixes, 2 declines (Tokio, AMAZON)
    assert on.layer("replanning").llm.calls == 1
    assert on.grounding_refusals == 1
    assert sum(off.unrecovered.values()) == 9
    # what a recording gives is what config/eval/cassettes ships
    assert _tracks(cassettes) == _tracks(SHIPPED), \
        "config/eval/cassettes is stale: record it again (docs/eval.md#the-example)"


def test_the_shipped_example_replays_offline_with_a_report(tmp_path: Path) -> None:
    out = io.StringIO()
    code = main(["eval", str(DATASET), "--config", f"layers-on={EXAMPLE / 'layers-on.env'}",
                 "--config", f"layers-off={EXAMPLE / 'layers-off.env'}", "--replay", str(SHIPPED),
                 "--report", str(tmp_path / "report"), "-q"], out=out)
    text = out.getvalue()
    assert code == 0, text
    assert "layers-on          83.3%  [55.2%, 95.3%]   10/12" in text
    assert "layers-off         16.7%  [4.7%, 44.8%]     2/12" in text
    assert "validation feedback (layer 3)          3          3 (3)" in text
    assert "grounding refusals: 1" in text
    assert "dagwright runs show eval-" in text
    report = EvalReport.load(tmp_path / "report")
    assert report.config("layers-on").pass_rate == pytest.approx(10 / 12)
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert "![pass rate by configuration](pass_rate.svg)" in markdown
    assert "| layers-on | 12 | 10 | 2 | 0 | 0 | 83.3% | 55.2% – 95.3% |" in markdown
    for plot in ("pass_rate.svg", "layers.svg"):
        root = ET.fromstring((tmp_path / "report" / plot).read_text())
        assert root.tag.endswith("svg") and len(root) > 5


def test_a_regression_against_the_baseline_fails_the_gate(tmp_path: Path) -> None:
    baseline = tmp_path / "baseline"
    assert main(["eval", str(DATASET), "--config", f"layers-on={EXAMPLE / 'layers-on.env'}",
                 "--replay", str(SHIPPED), "--report", str(baseline), "-q"],
                out=io.StringIO()) == 0
    same = io.StringIO()
    assert main(["eval", str(DATASET), "--config", f"layers-on={EXAMPLE / 'layers-on.env'}",
                 "--replay", str(SHIPPED), "--baseline", str(baseline / "report.json"), "-q"],
                out=same) == 0
    assert "no regression" in same.getvalue()

    # the candidate: the same name, the layers switched off (its own recording)
    candidate = tmp_path / "candidate"
    candidate.mkdir()
    shutil.copy(SHIPPED / "layers-off.json", candidate / "layers-on.json")
    out = io.StringIO()
    code = main(["eval", str(DATASET), "--config", f"layers-on={EXAMPLE / 'layers-off.env'}",
                 "--replay", str(candidate), "--baseline", str(baseline), "-q"], out=out)
    text = out.getvalue()
    assert code == 6, text
    assert "REGRESSION" in text
    assert ("layers-on: pass rate 16.7% is below the baseline's 95% interval [55.2%, 95.3%] "
            "(baseline 83.3%)") in text
    assert "layers-on: case days-over-maximum passed in the baseline (passed 1/1), now passed " \
           "0/1 — failed: status is succeeded: the run ended partial" in text
    # a pass-rate floor is a gate too
    floor = io.StringIO()
    assert main(["eval", str(DATASET), "--config", f"layers-on={EXAMPLE / 'layers-on.env'}",
                 "--replay", str(SHIPPED), "--min-pass-rate", "0.9", "-q"], out=floor) == 6


def test_eval_runs_are_in_the_run_store_like_any_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("ORCH_STORE_URL", f"sqlite:///{tmp_path / 'runs.db'}")
    configs = [dataclasses.replace(c) for c in _configs()[:1]]
    report = run_eval(DATASET, configs, cassettes=Cassettes(SHIPPED, "replay"))
    result = report.result("layers-on", "tesla-proceeds")
    assert result.run_id is not None and result.run_id.startswith("eval-")
    out = io.StringIO()
    assert main(["runs", "show", result.run_id], out=out) == 0
    shown = out.getvalue()
    assert "Sell 100 Tesla shares" in shown and "semantic_retry" in shown
    listing = io.StringIO()
    assert main(["runs", "list", "--limit", "100"], out=listing) == 0
    assert sum(1 for line in listing.getvalue().splitlines() if line.startswith("eval-")) == 12


def test_a_baseline_that_is_not_there_is_refused_before_any_case_runs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A new user typed --baseline with a directory no eval had written: the refusal's
    next step sent them to the ORCH_* settings page. It says how to make a baseline, and
    comes before a case is run (and a real model paid)."""
    missing = tmp_path / "nothere"
    progress = io.StringIO()
    code = main(["eval", str(DATASET), "--config", f"layers-on={EXAMPLE / 'layers-on.env'}",
                 "--replay", str(SHIPPED), "--baseline", str(missing)], out=progress)
    assert code == 2
    err = capsys.readouterr().err
    assert f"no eval report at {missing}" in err
    assert "next: make a baseline first: `dagwright eval DATASET --report DIR`" in err
    assert "ORCH_" not in err and "[1]" not in err  # no case ran
    assert progress.getvalue() == ""


def test_png_plots_without_their_extra_are_refused_before_any_case_runs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`--plots png` in an installation without the eval extra ran every case (a real
    model paid) and then failed drawing the report, its next step sending the user to the
    ORCH_* settings page. It is refused first, with the install line to run."""
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # (not installed)
    progress = io.StringIO()
    code = main(["eval", str(DATASET), "--config", f"layers-on={EXAMPLE / 'layers-on.env'}",
                 "--replay", str(SHIPPED), "--report", str(tmp_path / "report"),
                 "--plots", "png"], out=progress)
    assert code == 2
    err = capsys.readouterr().err
    assert "PNG plots (--plots png) needs the 'eval' extra (matplotlib is missing): pip " \
           "install" in err
    assert "next: run that install line" in err
    assert "ORCH_" not in err and "[1]" not in err  # no case ran
    assert progress.getvalue() == "" and not (tmp_path / "report").exists()
