"""docs/guarantees.md names, for each guarantee, the test that proves it: those tests exist."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests import ROOT

_FILE = re.compile(r"`(tests/[\w/]+\.py)(?:::(\w+))?`")
_SAME_FILE = re.compile(r"`…::(\w+)`")


def _test_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {node.name for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and node.name.startswith("test")}


def test_every_test_the_guarantees_name_exists() -> None:
    doc = (ROOT / "docs" / "guarantees.md").read_text(encoding="utf-8")
    named: list[tuple[str, str]] = []
    current: str | None = None  # "…::name" is a test of the last file named before it
    for line in doc.splitlines():
        for match in re.finditer(f"{_FILE.pattern}|{_SAME_FILE.pattern}", line):
            if match.group(1):
                current = match.group(1)
                if match.group(2):
                    named.append((current, match.group(2)))
            else:
                assert current is not None, f"'…::{match.group(3)}' follows no file: {line}"
                named.append((current, match.group(3)))
    assert len(named) > 30
    for file, name in named:
        path = ROOT / file
        assert path.exists(), f"docs/guarantees.md names {file}, which does not exist"
        assert name in _test_names(path), f"docs/guarantees.md names {file}::{name}, which does not exist"
