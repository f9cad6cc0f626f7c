"""Every install line a user is shown works from a clone and from a wheel.

dagwright is not on PyPI, so ``pip install 'dagwright[serve]'`` fails ("Could not find a
version that satisfies the requirement"). The lines in README.md, docs/ and the messages
in the package name the clone (``'.[serve]'``), a wheel (``'dist/dagwright-…whl[serve]'``),
or are computed for this installation (``orchestration._extras.install_line``), and every
extra they name exists in pyproject.toml.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from orchestration import _extras
from orchestration._version import __version__
from tests import ROOT

EXTRAS = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
INSTALL = re.compile(r"pip install (?:-[-\w]+ )*(['\"]?)([^\s'\"`]+)\1")
NOT_ON_PYPI = re.compile(r"['\"]dagwright\[")
# Messages in modules another change of this round owns; their lines are fixed there.
ELSEWHERE: set[str] = set()


def shown_to_users() -> list[Path]:
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    code = [p for package in ("orchestration", "executors", "planners")
            for p in sorted((ROOT / package).rglob("*.py"))
            if p.relative_to(ROOT).as_posix() not in ELSEWHERE]
    return docs + code


def test_no_install_line_names_dagwright_as_if_it_were_on_pypi() -> None:
    wrong = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
             for path in shown_to_users()
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if "pip install" in line and NOT_ON_PYPI.search(line)]
    assert wrong == []


def test_every_extra_named_in_an_install_line_exists() -> None:
    named: dict[str, set[str]] = {}
    for path in shown_to_users():
        for target in (m.group(2) for m in INSTALL.finditer(path.read_text(encoding="utf-8"))):
            if "[" in target and "{" not in target:  # not a line a message computes
                extras = target[target.index("[") + 1:target.rindex("]")]
                named.setdefault(str(path.relative_to(ROOT)), set()).update(extras.split(","))
    assert named, "no install line with an extra was found: the pattern is wrong"
    unknown = {path: sorted(e - EXTRAS) for path, e in named.items() if e - EXTRAS}
    assert unknown == {}
    # a wheel named in the docs is the one `pip wheel .` builds from this version
    wheels = set(re.findall(r"dagwright-([\w.]+)-py3-none-any\.whl",
                            "\n".join(p.read_text(encoding="utf-8") for p in shown_to_users())))
    assert wheels == {__version__}


def test_the_line_in_a_message_is_the_one_for_this_installation() -> None:
    """This checkout is installed editable (.ci/run: pip install -e '.[dev]')."""
    line = _extras.install_line("serve")
    assert line == f"pip install -e '{ROOT.resolve()}[serve]'"
    message = _extras.needs_extra("dagwright serve", "serve", "uvicorn")
    assert message == f"dagwright serve needs the 'serve' extra (uvicorn is missing): {line}"
