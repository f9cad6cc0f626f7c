"""The README's tour runs as written and says what it shows."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

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


def test_tour_run_as_a_script_prints_the_values_its_comments_promise(tmp_path: Path) -> None:
    """What a user does with the tour: save it, run it from the clone, read its output."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)```", readme, re.S)
    assert code
    script = tmp_path / "tour.py"
    script.write_text(code.group(1))
    promised = [re.split(r"\s{2,}", line.split("# ", 1)[1])[0]
                for line in code.group(1).splitlines()
                if line.startswith("print(") and "# " in line]
    done = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env={k: v for k, v in os.environ.items()
                                           if not k.startswith("ORCH_")} | {"ORCH_STORE_URL": "memory://"})
    assert done.returncode == 0, done.stderr
    assert len(promised) >= 5 and done.stdout.splitlines() == promised
