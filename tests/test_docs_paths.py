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


# --- settings, exit codes and commands: the docs spell them as the code does ----------------

SETTING = re.compile(r"\bORCH_[A-Z0-9_]+\b")
MISSPELT_ON_PURPOSE = {"ORCH_MAX_CONCURENCY": "ORCH_MAX_CONCURRENCY",
                       "ORCH_VALIDATON_FEEDBACK_ENABLED": "ORCH_VALIDATION_FEEDBACK_ENABLED"}
"""docs/troubleshooting.md shows what dagwright says of a misspelt variable."""


def test_every_setting_the_docs_name_is_a_setting() -> None:
    """``ORCH_X`` is a field of OrchestratorConfig; ``ORCH_X_`` (a family) prefixes one."""
    from orchestration.config import OrchestratorConfig, env_name

    settings = {env_name(field) for field in OrchestratorConfig.model_fields}
    assert set(MISSPELT_ON_PURPOSE.values()) <= settings
    unknown = sorted({f"{doc.relative_to(ROOT)}: {name}" for doc in DOCS
                      for name in SETTING.findall(doc.read_text(encoding="utf-8"))
                      if name not in settings and name not in MISSPELT_ON_PURPOSE
                      and not (name.endswith("_") and any(s.startswith(name) for s in settings))})
    assert unknown == []


EXIT_CITED = re.compile(r"\bexit(?:s| code)? `?(\d+)`?")


def test_every_exit_code_the_docs_cite_is_one_the_cli_has() -> None:
    from orchestration.cli import EXIT_CODES

    cited_codes = {(doc.relative_to(ROOT).as_posix(), int(m.group(1))) for doc in DOCS
                   for m in EXIT_CITED.finditer(doc.read_text(encoding="utf-8"))}
    assert len(cited_codes) > 5  # the pattern finds what the docs cite
    assert sorted(f"{doc}: exit {code}" for doc, code in cited_codes if code not in EXIT_CODES) == []


COMMAND_LINE = re.compile(r"`(dagwright [^`]+)`|^\s*\$?\s*(dagwright [^\n]+)$", re.MULTILINE)


def test_every_command_and_option_the_docs_cite_exists() -> None:
    """``dagwright runs show RUN_ID --json``: a command the parser has, with options it takes
    (a command's own or the global ones)."""
    import argparse

    from orchestration.cli import build_parser

    def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> dict[
            tuple[str, ...], argparse.ArgumentParser]:
        found = {path: parser}
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    found.update(commands(sub, (*path, name)))
        return found

    parser = build_parser()
    known = commands(parser)
    global_options = {o for a in parser._actions for o in a.option_strings}
    checked, wrong = 0, set()
    for doc in DOCS:
        for m in COMMAND_LINE.finditer(doc.read_text(encoding="utf-8")):
            line = m.group(1) or m.group(2)
            command: tuple[str, ...] = ()
            for word in line.split()[1:]:
                if (*command, word) not in known:
                    break
                command = (*command, word)
            if not command:  # prose that starts with the name, or a command that is not
                first = line.split()[1] if len(line.split()) > 1 else ""
                if m.group(1) and re.fullmatch(r"[a-z][a-z-]+", first):
                    wrong.add(f"{doc.relative_to(ROOT)}: no command `dagwright {first}`")
                continue
            checked += 1
            options = {o for a in known[command]._actions for o in a.option_strings}
            wrong |= {f"{doc.relative_to(ROOT)}: `dagwright {' '.join(command)}` has no {o}"
                      for o in re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", line)
                      if o not in options | global_options}
    assert checked > 50
    assert sorted(wrong) == []
