"""docs/api.md's signatures are the code's: every keyword a documented call names exists,
and a call documented with its keywords (``*,``) lists them all.

The issue that asked for this found ``@catalog.tool`` and ``add_function`` documented
without ``requires_approval`` and ``name=``; a signature drifts silently otherwise.
"""

from __future__ import annotations

import inspect
import re

import pytest

from orchestration import Catalog
from tests import ROOT

API = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
CALL = re.compile(r"^(?:@|await )?(catalog|Catalog)\.(\w+)\(", re.M)


def documented() -> dict[str, list[str]]:
    """Each documented ``catalog.name(...)`` call: the text between its parentheses (a
    call may be shown more than once, e.g. ``@catalog.tool`` with and without a name)."""
    calls: dict[str, list[str]] = {}
    for match in CALL.finditer(API):
        depth, end = 1, match.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(API[end], 0)
            end += 1
        calls.setdefault(match.group(2), []).append(API[match.end():end - 1])
    return calls


def keywords(arguments: str) -> set[str]:
    """The parameter names a documented argument list shows (``a``, ``b=None``), not the
    literals (``"tool.capability"``), ``*`` markers, ``**fields`` or ``...``."""
    text = re.sub(r"\[[^\]]*\]|\([^()]*\)|\{[^{}]*\}", "", arguments)  # nested defaults
    pieces = (piece.split("=")[0].strip() for piece in text.split(","))
    return {piece for piece in pieces if piece.isidentifier()}


def test_the_catalog_calls_are_found() -> None:
    assert {"add_function", "tool", "add_http", "add_mcp_server", "add_openapi",
            "from_dict"} <= set(documented())


@pytest.mark.parametrize("name", sorted(documented()))
def test_a_documented_call_matches_the_code(name: str) -> None:
    parameters = inspect.signature(getattr(Catalog, name)).parameters
    real = {p.name for p in parameters.values() if p.kind is not p.VAR_KEYWORD}
    keyword_only = {p.name for p in parameters.values() if p.kind is p.KEYWORD_ONLY}
    for arguments in documented()[name]:
        named = keywords(arguments)
        assert named <= real, f"catalog.{name}: documented but not in the code: {named - real}"
        if "*," in arguments or "*, " in arguments:
            assert keyword_only <= named, (
                f"catalog.{name}: keyword-only, not documented: {keyword_only - named}")


ORCH_CALL = re.compile(r"^(?:async for \w+ in |await |[\w\s=]*= )?orch\.(\w+)\(", re.M)


def documented_orchestrator_calls() -> dict[str, list[str]]:
    """Each ``orch.name(...)`` call of the Orchestrator block, as :func:`documented`."""
    calls: dict[str, list[str]] = {}
    for match in ORCH_CALL.finditer(API):
        depth, end = 1, match.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(API[end], 0)
            end += 1
        calls.setdefault(match.group(1), []).append(API[match.end():end - 1])
    return calls


def test_the_run_entry_points_are_documented() -> None:
    """A new user found ``orch.astream`` in the README and events.md but not on the API
    page, and ``run``/``arun`` documented without ``run_id`` and ``on_event``."""
    calls = documented_orchestrator_calls()
    assert {"run", "arun", "astart", "astream", "get_events", "acancel", "resume"} <= set(calls)
    for name in ("run", "arun", "astream"):
        assert any({"run_id", "plan"} <= keywords(arguments) for arguments in calls[name]), name


@pytest.mark.parametrize("name", sorted(documented_orchestrator_calls()))
def test_a_documented_orchestrator_call_matches_the_code(name: str) -> None:
    from orchestration import Orchestrator

    real = set(inspect.signature(getattr(Orchestrator, name)).parameters)
    for arguments in documented_orchestrator_calls()[name]:
        named = keywords(arguments)
        assert named <= real, f"orch.{name}: documented but not in the code: {named - real}"
