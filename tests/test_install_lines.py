"""Every install line a user is shown works from a clone and from a wheel.

dagwright is not on PyPI, so ``pip install 'dagwright[serve]'`` fails ("Could not find a
version that satisfies the requirement"). The lines in README.md, docs/ and the messages
in the package name the clone (``'.[serve]'``), a wheel (``'dist/dagwright-…whl[serve]'``),
or are computed for this installation (``orchestration._extras.install_line``), and every
extra they name exists in pyproject.toml.

The last test runs them: a copy of this checkout's files stands for a fresh clone, and each
form the docs show — the clone, a wheel built from it, an editable install — goes into a
fresh virtualenv, after which the line that installation's "needs the extra" message
prints is run too. Offline: ``--no-index``, the build from the setuptools of this
environment (``--no-build-isolation``), and the dependencies already installed here seen
through a ``.pth`` file (dagwright's own installation left out of it).
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import sysconfig
import tomllib
import venv
from importlib import metadata
from pathlib import Path

import pytest

from orchestration import _extras
from orchestration._extras import DISTRIBUTION
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


def _line_targets(form: re.Pattern[str]) -> list[str]:
    """The targets of the install lines in the docs that have this form."""
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return sorted({m.group(2) for path in docs for m in INSTALL.finditer(path.read_text(encoding="utf-8"))
                   if form.fullmatch(m.group(2))})


def _extras_of(targets: list[str]) -> list[str]:
    """The extras these lines name whose requirements are all installed here (an offline
    install can only find those; ``bench``, say, needs langgraph)."""
    named = {e for t in targets if "[" in t for e in t[t.index("[") + 1:t.rindex("]")].split(",")}
    spec = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]

    def installed(requirement: str) -> bool:
        name = re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0]
        try:
            metadata.version(name)
        except metadata.PackageNotFoundError:
            return name == DISTRIBUTION
        return True

    return sorted(e for e in named if all(installed(r) for r in spec[e]))


def _fresh_venv(path: Path, deps: Path) -> Path:
    venv.create(path, with_pip=False)
    site = Path(sysconfig.get_paths(vars={"base": str(path), "platbase": str(path)})["purelib"])
    (site / "_deps.pth").write_text(f"{deps}\n")
    return path / "bin" / "python"


def _pip(python: Path, line: str, cwd: Path) -> str:
    """Run ``line`` ("pip install ...", as shown) with the pip of this environment for
    ``python``, offline; what pip printed. A missing extra is only a warning to pip."""
    words = shlex.split(line)
    assert words[:2] == ["pip", "install"], line
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-index",
         "--no-build-isolation", "--no-cache-dir", "--disable-pip-version-check", *words[2:]],
        cwd=cwd, capture_output=True, text=True, timeout=240)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "does not provide the extra" not in output, output
    return output


def _message_line(python: Path, extra: str) -> str:
    """The install line a 'needs the extra' message prints in that installation."""
    done = subprocess.run([str(python), "-c", "from orchestration._extras import needs_extra; "
                           f"print(needs_extra('x', {extra!r}))"], cwd=python.parent,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split(": ", 1)[1]


@pytest.mark.slow
def test_the_lines_install_from_a_clone_from_a_wheel_and_editable(tmp_path: Path) -> None:
    setuptools = metadata.version("setuptools")
    if int(setuptools.split(".")[0]) < 77:
        pytest.skip(f"building dagwright offline needs setuptools>=77 here (the dev extra has it); "
                    f"found {setuptools}")
    clone = tmp_path / "clone"
    for name in subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True,
                               text=True).stdout.split("\0"):
        if name and (ROOT / name).is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            (clone / name).write_bytes((ROOT / name).read_bytes())
    # this environment's packages, without dagwright's own installation
    deps = tmp_path / "deps"
    deps.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.lower().startswith(("dagwright", "__editable__.dagwright", "_deps")):
            (deps / entry.name).symlink_to(entry)

    clone_lines = _line_targets(re.compile(r"\.(\[[\w,]+\])?"))
    wheel_lines = _line_targets(re.compile(r"dist/dagwright-[\w.]+-py3-none-any\.whl(\[[\w,]+\])?"))
    assert "." in clone_lines and ".[serve]" in clone_lines, clone_lines
    assert any("[" in t for t in wheel_lines), wheel_lines
    extras = _extras_of(clone_lines + wheel_lines)
    assert {"serve", "postgres", "temporal"} <= set(extras), extras
    extras = ",".join(extras)

    # from the clone, every extra the docs name: pip install '.[serve,temporal,...]'
    python = _fresh_venv(tmp_path / "from-clone", deps)
    _pip(python, f"pip install '.[{extras}]'", clone)
    line = _message_line(python, "serve")
    assert line == f"pip install '{clone}[serve]'"
    _pip(python, line, tmp_path)

    # a wheel built as the README says, then installed with an extra
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-index",
                           "--no-build-isolation", "--no-cache-dir", "-w", "dist", "."],
                          cwd=clone, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    wheel = f"dist/dagwright-{__version__}-py3-none-any.whl"
    assert (clone / wheel).is_file() and all(t.startswith(wheel) for t in wheel_lines)
    python = _fresh_venv(tmp_path / "from-wheel", deps)
    _pip(python, f"pip install '{wheel}[{extras}]'", clone)
    line = _message_line(python, "serve")
    assert line == f"pip install '{clone / wheel}[serve]'"
    _pip(python, line, tmp_path)

    # editable, as the README's test set-up: the message keeps -e
    python = _fresh_venv(tmp_path / "editable", deps)
    _pip(python, "pip install -e '.[serve]'", clone)
    line = _message_line(python, "serve")
    assert line == f"pip install -e '{clone}[serve]'"
    _pip(python, line, tmp_path)
