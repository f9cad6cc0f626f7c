"""The README's tour runs as written and says what it shows."""

from __future__ import annotations

import re

import pytest

from tests import ROOT


def test_tour_runs_and_its_comments_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)```", readme, re.S)
    assert code, "README has no python tour"
    monkeypatch.chdir(ROOT)
    namespace: dict[str, object] = {}
    exec(compile(code.group(1), "README.md", "exec"), namespace)
    result = namespace["result"]
    assert result.status == "succeeded"  # type: ignore[attr-defined]
    assert result.answer == "2 + 3 = 5"  # type: ignore[attr-defined]
    step = result.steps["sum"]  # type: ignore[attr-defined]
    assert step.output == 5
    assert [(c.path, c.old, c.new) for c in step.attempts[0].coercions] == [("$.a", "2", 2)]
