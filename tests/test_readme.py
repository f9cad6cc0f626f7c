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


SCREEN_LINES = 24
"""What a terminal or a repository page shows before any scrolling."""


def test_the_first_screen_holds_exactly_the_two_set_up_commands() -> None:
    """A new user found a paragraph of wheel and extras commands between the two set-up
    commands, which pushed the test command off the first screen."""
    screen = "\n".join((ROOT / "README.md").read_text(encoding="utf-8").splitlines()[:SCREEN_LINES])
    blocks = re.findall(r"```bash\n(.*?)```", screen, re.S)
    assert [b.strip() for b in blocks] == [
        "python3 -m venv .venv && .venv/bin/pip install -q . && .venv/bin/dagwright demo",
        "python3 -m venv .venv && .venv/bin/pip install -q -e '.[dev]' && "
        ".venv/bin/python -m pytest -q",
    ]
    outside = re.sub(r"```bash\n.*?```", "", screen, flags=re.S)
    assert "pip " not in outside and "dagwright " not in outside.replace("# dagwright", "")


def test_the_tour_is_run_with_the_python_the_set_up_installed_into() -> None:
    """`python tour.py` with the system's Python fails (no module named httpx): the
    set-up installs into .venv, so the line to type says .venv/bin/python."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    after_tour = readme.split("```python", 1)[1].split("```", 2)[1]
    assert "`.venv/bin/python tour.py`" in after_tour
    assert "`python tour.py`" not in readme


def test_the_readme_names_every_command() -> None:
    """A new user read the README's CLI line and missed runs, resume, sessions, workflows,
    eval and worker, which only `dagwright --help` listed."""
    from orchestration.cli import build_parser

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    commands = next(action for action in build_parser()._actions
                    if action.dest == "command").choices
    assert commands, "the parser has no commands"
    missing = [name for name in commands if f"`dagwright {name}" not in readme]
    assert not missing, f"README.md does not name: {missing}"


def test_the_readme_lists_every_extra_a_user_installs() -> None:
    """The README's list of extras is pyproject's (less the developers' own: dev, bench);
    it once left out `eval`, which docs/eval.md tells a user to install."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = set(project["optional-dependencies"]) - {"dev", "bench"}
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    listed = re.search(r"The extras are\s+(.*?);", readme, re.S)
    assert listed, "README no longer says 'The extras are ...;'"
    assert set(re.findall(r"`([a-z]+)`", listed.group(1))) == extras
