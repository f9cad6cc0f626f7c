"""The CLI: the demo runs every scenario as expected; tools lists a catalog."""

from __future__ import annotations

import io
from pathlib import Path

from orchestration.cli import main

ROOT = Path(__file__).resolve().parent.parent


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
