"""Docs cite only what exists: every repository path in README.md and docs/*.md (files,
folders, globs) and every test file named by itself is in the repository."""

from __future__ import annotations

import re

from tests import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PATH = re.compile(r"(?<![\w./-])((?:orchestration|executors|planners|tests|benchmarks|docs|config"
                  r"|\.ci)/[\w./*-]*[\w*/])")
TEST_FILE = re.compile(r"(?<![\w/])(test_\w+\.py)")
TEST_NAMES = {p.name for p in (ROOT / "tests").rglob("test_*.py")}


def cited() -> list[tuple[str, str]]:
    return [(doc.relative_to(ROOT).as_posix(), m.group(1).split("::")[0].split("#")[0])
            for doc in DOCS for m in PATH.finditer(doc.read_text(encoding="utf-8"))]


def test_the_docs_cite_paths_at_all() -> None:
    assert len(cited()) > 50  # the pattern finds what the docs cite


def test_every_path_the_docs_cite_exists() -> None:
    missing = sorted({f"{doc}: {path}" for doc, path in cited()
                      if not (any(ROOT.glob(path)) if "*" in path else (ROOT / path).exists())})
    assert missing == []


def test_every_test_file_the_docs_name_exists() -> None:
    missing = sorted({f"{doc.relative_to(ROOT)}: {m.group(1)}" for doc in DOCS
                      for m in TEST_FILE.finditer(doc.read_text(encoding="utf-8"))
                      if m.group(1) not in TEST_NAMES})
    assert missing == []


TEST_REF = re.compile(r"(tests/[\w/]+\.py)|…::(\w+)|(?<=\.py::)(\w+)")


def _test_functions() -> dict[str, set[str]]:
    return {path.relative_to(ROOT).as_posix(): set(re.findall(
        r"^(?:async )?def (test_\w+)", path.read_text(encoding="utf-8"), re.MULTILINE))
        for path in (ROOT / "tests").rglob("test_*.py")}


def test_every_test_the_docs_name_exists() -> None:
    """``tests/x/test_y.py::test_z``, and ``…::test_z`` for the test file named last
    before it: the guarantees tables cite the test that proves each row."""
    functions = _test_functions()
    missing = []
    for doc in DOCS:
        file = None
        for m in TEST_REF.finditer(doc.read_text(encoding="utf-8")):
            if m.group(1):
                file = m.group(1)
                continue
            name = m.group(2) or m.group(3)
            if file is None or name not in functions.get(file, set()):
                missing.append(f"{doc.relative_to(ROOT)}: {file}::{name}")
    assert missing == []
