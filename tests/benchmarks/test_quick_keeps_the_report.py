"""``--quick`` is a smoke run at tiny sizes: its figures never replace the published ones
in docs/benchmarks.md unless ``--report`` names a page for them."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import common, plan_cache


def test_quick_prints_and_leaves_the_default_report_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    published = tmp_path / "benchmarks.md"
    published.write_text("# Benchmarks\n\nthe published figures\n", encoding="utf-8")
    monkeypatch.setattr(common, "DEFAULT_REPORT", published)

    assert plan_cache.main(["--quick"]) == 0

    assert published.read_text(encoding="utf-8") == "# Benchmarks\n\nthe published figures\n"
    assert "plan cache" in capsys.readouterr().out.lower()  # the figures were printed


def test_quick_with_report_writes_there(tmp_path: Path) -> None:
    report = tmp_path / "quick.md"
    assert plan_cache.main(["--quick", "--report", str(report)]) == 0
    assert "<!-- BEGIN plan_cache" in report.read_text(encoding="utf-8")
