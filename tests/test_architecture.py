"""The layering of the three packages, as the next engineer relies on it.

import-linter (run in .ci/run, configured in pyproject.toml) checks who may import whom;
this test adds what it does not: no module-level import cycle anywhere in the three
packages (imports under ``TYPE_CHECKING`` aside), and every import order works.
"""

from __future__ import annotations

import subprocess
import sys

import grimp
import networkx as nx
import pytest

PACKAGES = ("orchestration", "planners", "executors")


def test_no_module_level_import_cycles() -> None:
    graph = grimp.build_graph(*PACKAGES, exclude_type_checking_imports=True)
    edges = nx.DiGraph()
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            edges.add_edge(module, imported)
    cycles = sorted(" -> ".join([*c, c[0]]) for c in nx.simple_cycles(edges))
    assert cycles == []


@pytest.mark.parametrize("module", [
    "executors.recovery", "executors.layers", "executors.coercion", "planners.planner",
    "planners.replan", "orchestration.plan", "orchestration.catalog", "orchestration.cli",
])
def test_any_public_module_can_be_imported_first(module: str) -> None:
    """A fresh interpreter importing ``module`` before anything else must not hit a
    partially initialised module (the facade composes the engine packages)."""
    proc = subprocess.run([sys.executable, "-c", f"import {module}; import orchestration; "
                           "orchestration.Orchestrator"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
