"""Saved workflows for the facade: found by name or path, read, checked against the
catalog, their inputs bound — then started as a run whose plan is given (no planning).

A workflow file is read and checked again only when it changed (its path, size and
modification time) or the catalog did (its fingerprint); a run of an unchanged
workflow pays for binding its inputs only.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from orchestration._facade.parts import FacadeParts
from orchestration.result import SynthesisStrategy
from orchestration.workflows import (
    Workflow,
    WorkflowCall,
    WorkflowEntry,
    WorkflowLibrary,
    bind_workflow,
    check_workflow,
    read_workflow,
)
from orchestration.workflows._library import is_path

WorkflowRef = Workflow | str | os.PathLike[str]
"""A workflow, the path of its file, or its name in the workflows directory."""

_MAX_CHECKED = 256


class FacadeWorkflows:
    """The orchestrator's saved workflows."""

    def __init__(self, parts: FacadeParts) -> None:
        self._parts = parts
        self._checked: dict[tuple[str, int, int, str], Workflow] = {}

    def library(self) -> WorkflowLibrary:
        """Where names are looked up (``ORCH_WORKFLOWS_DIR``, else beside the catalog)."""
        return WorkflowLibrary.for_config(self._parts.config, self._parts.catalog)

    def load(self, reference: WorkflowRef) -> Workflow:
        """The workflow, checked against the catalog as it is now; raises
        :class:`~orchestration.errors.WorkflowError` naming every problem."""
        catalog = self._parts.catalog.snapshot()
        max_steps = self._parts.config.max_plan_steps
        if isinstance(reference, Workflow):
            check_workflow(reference, catalog, self._parts.engine, max_steps=max_steps)
            return reference
        path = (Path(reference) if is_path(reference)
                else self.library().find(os.fspath(reference)))
        try:
            stat = path.stat()
        except OSError:
            return read_workflow(path)  # says what is wrong with the path
        key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size, catalog.fingerprint)
        found = self._checked.get(key)
        if found is None:
            found = read_workflow(path)
            check_workflow(found, catalog, self._parts.engine, max_steps=max_steps)
            if len(self._checked) >= _MAX_CHECKED:
                self._checked.clear()
            self._checked[key] = found
        return found

    def entries(self) -> list[WorkflowEntry]:
        """Every workflow of the library, each with what keeps it from running."""
        return self.library().checked_entries(self._parts.catalog.snapshot(),
                                              self._parts.engine,
                                              max_steps=self._parts.config.max_plan_steps)

    def call(self, reference: WorkflowRef, inputs: dict[str, Any] | None,
             synthesis: SynthesisStrategy | None) -> WorkflowCall:
        """What a run of the workflow starts with: its query, bound plan and setup."""
        workflow = self.load(reference)
        return bind_workflow(workflow, inputs, self._parts.catalog.snapshot(),
                             self._parts.engine, synthesis=synthesis)
