"""Where saved workflows are found by name: a directory of YAML and JSON files.

The directory is ``ORCH_WORKFLOWS_DIR``; unset, ``workflows/`` beside the catalog file
(``ORCH_CATALOG``), else ``./workflows``. A name is looked up as ``NAME.yaml``,
``NAME.yml`` or ``NAME.json`` first, then among the ``name:`` of every file there (a file
may be called otherwise than its workflow). A reference that is a path (it has a
workflow suffix or a directory part, or names an existing file) is read as it is.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from orchestration.catalog import Catalog
from orchestration.config import OrchestratorConfig
from orchestration.errors import WorkflowError
from orchestration.workflows._checks import StepChecks, workflow_problems
from orchestration.workflows.model import SUFFIXES, Workflow, read_workflow

__all__ = ["WorkflowEntry", "WorkflowLibrary", "is_path"]


def is_path(reference: str | os.PathLike[str]) -> bool:
    """Whether a workflow reference names a file rather than a workflow."""
    text = os.fspath(reference)
    return (Path(text).suffix in SUFFIXES or os.sep in text or "/" in text
            or Path(text).is_file())


@dataclass
class WorkflowEntry:
    """One file of the library: the workflow in it (None when it cannot be read) and
    every problem found — reading it, or checking it against the catalog."""

    path: Path
    workflow: Workflow | None
    problems: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.workflow.name if self.workflow is not None else self.path.stem


class WorkflowLibrary:
    """The workflows of one directory."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    @classmethod
    def for_config(cls, config: OrchestratorConfig, catalog: Catalog | None = None
                   ) -> WorkflowLibrary:
        """The directory the settings name (see the module docstring)."""
        if config.workflows_dir is not None:
            return cls(config.workflows_dir)
        catalog_file = catalog.path if catalog is not None and catalog.path else config.catalog
        if catalog_file is not None:
            return cls(Path(catalog_file).parent / "workflows")
        return cls("workflows")

    def files(self) -> list[Path]:
        if not self.directory.is_dir():
            return []
        return sorted(p for p in self.directory.iterdir()
                      if p.suffix in SUFFIXES and p.is_file() and not p.name.startswith("."))

    def find(self, name: str) -> Path:
        """The file of the workflow called ``name``; :class:`WorkflowError` naming the
        directory and the workflows it holds when there is none (or two)."""
        for suffix in SUFFIXES:
            candidate = self.directory / f"{name}{suffix}"
            if candidate.is_file():
                return candidate
        matches = [entry.path for entry in self.entries() if entry.name == name]
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            raise WorkflowError(f"two workflows are called {name!r} in {self.directory}: "
                                f"{', '.join(map(str, matches))}; rename one")
        known = ", ".join(sorted(e.name for e in self.entries())) or "none"
        raise WorkflowError(
            f"no workflow {name!r} in {self.directory} (workflows there: {known}); "
            "`dagwright workflows` lists them, and ORCH_WORKFLOWS_DIR names the directory")

    def entries(self) -> list[WorkflowEntry]:
        """Every file of the directory, read (not checked against a catalog)."""
        entries = []
        for path in self.files():
            try:
                entries.append(WorkflowEntry(path, read_workflow(path)))
            except WorkflowError as exc:
                entries.append(WorkflowEntry(path, None, exc.problems))
        return entries

    def checked_entries(self, catalog: Catalog, checks: StepChecks, *,
                        max_steps: int = 1000) -> list[WorkflowEntry]:
        """Every file of the directory, each with what keeps it from running against
        ``catalog`` (no problems: it fits)."""
        entries = self.entries()
        for entry in entries:
            if entry.workflow is not None:
                entry.problems = workflow_problems(entry.workflow, catalog, checks,
                                                   max_steps=max_steps)
        return entries
