"""The workflow file format: a plan with named, typed inputs and named outputs.

::

    name: weekly-report                 # how it is found and listed
    description: Weekly numbers of a team
    query: "weekly report for team {{inputs.team}}"   # optional: the run's query text
    inputs:                             # each a JSON Schema; required unless it has a default
      team: {type: string}
      weeks: {type: integer, minimum: 1, maximum: 12, default: 4}
    steps:                              # a plan's steps, with per-step settings
      - id: stats
        tool: tracker
        capability: team_stats
        params: {team: "{{inputs.team}}", weeks: "{{inputs.weeks}}"}
        retry: {max_attempts: 5}        # optional, as in a plan
        timeout_s: 20                   # optional: timeout of each call of this step
        requires_approval: true         # optional: a person approves the call first
    outputs:                            # named values, references into the results
      summary: "{{stats.summary}}"
    answer:                             # optional: how the answer is composed
      strategy: template                # llm | template | raw
      template: "Team {{ inputs.team }}: {{ outputs.summary }}"

``{{inputs.NAME}}`` (a path into an input works too: ``{{inputs.filter.team}}``) is
replaced by the input's value before the run starts: a parameter that is exactly one
reference keeps the input's JSON type, one inside longer text is interpolated.
``{{step.path}}`` references between steps work as in any plan. Unknown keys are
refused, so a misspelt one is reported instead of ignored.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from orchestration._data_files import DataFileError, read_data_file
from orchestration._text import describe_validation_error
from orchestration.errors import WorkflowError
from orchestration.plan import Step
from orchestration.result import SynthesisStrategy

__all__ = ["INPUTS", "NAME_PATTERN", "Workflow", "WorkflowAnswer", "WorkflowStep",
           "read_workflow"]

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$"
"""What a workflow's (and an input's) name may look like: it names files and URLs."""
INPUT_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"
INPUTS = "inputs"
"""The name ``{{inputs.x}}`` references start with; no step may take it."""
SUFFIXES = (".yaml", ".yml", ".json")
MAX_FILE_BYTES = 1_000_000


class WorkflowStep(Step):
    """One step: a plan step, with the per-step settings a plan step has. A file is
    written by a person, so a key a plan step does not have is an error here (a
    planner's extra keys are ignored)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class WorkflowAnswer(BaseModel):
    """How a run of the workflow composes its answer (a run may still choose another)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    strategy: SynthesisStrategy | None = None
    template: str | None = None


class Workflow(BaseModel):
    """A saved workflow (see the module docstring for the file format).

    ``path`` is the file it was read from; ``revision`` a digest of its content, recorded
    with every run made from it.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=NAME_PATTERN)
    description: str | None = None
    query: str | None = None
    inputs: dict[str, dict[str, Any]] = Field(default_factory=dict)
    steps: list[WorkflowStep] = Field(min_length=1)
    outputs: dict[str, Any] = Field(default_factory=dict)
    answer: WorkflowAnswer | None = None
    catalog: str | None = None
    """The fingerprint of the catalog it was saved against (informational)."""

    _path: Path | None = PrivateAttr(default=None)
    _revision: str | None = PrivateAttr(default=None)

    @property
    def path(self) -> Path | None:
        return self._path

    @property
    def revision(self) -> str:
        """A digest of the workflow's content (of its file, when read from one)."""
        if self._revision is None:
            text = json.dumps(self.model_dump(mode="json"), sort_keys=True)
            self._revision = hashlib.sha256(text.encode()).hexdigest()[:16]
        return self._revision

    @property
    def label(self) -> str:
        """How messages name it: ``'weekly-report' (workflows/weekly-report.yaml)``."""
        return f"{self.name!r}" + (f" ({self._path})" if self._path is not None else "")

    @classmethod
    def from_data(cls, data: Any, *, source: str = "workflow", path: Path | None = None,
                  revision: str | None = None) -> Workflow:
        """A workflow from parsed YAML/JSON; :class:`WorkflowError` lists every field that
        is wrong, with where it is."""
        if not isinstance(data, dict):
            raise WorkflowError(f"{source}: a workflow is a mapping with name, inputs, steps "
                                f"and outputs, not {type(data).__name__}", path=_shown(path))
        try:
            workflow = cls.model_validate(data)
        except ValidationError as exc:
            problems = [f"{source}: {describe_validation_error(exc, root='workflow')}"]
            raise WorkflowError(problems[0], problems, path=_shown(path)) from None
        workflow._path = path
        workflow._revision = revision
        return workflow

    def to_data(self) -> dict[str, Any]:
        """The workflow as the file holds it (what :meth:`from_data` reads back)."""
        return self.model_dump(mode="json", exclude_none=True, exclude_defaults=True)

    def to_yaml(self, *, header: str = "") -> str:
        """The workflow as a YAML file (``header``: comment lines put first)."""
        data = self.model_dump(mode="json", exclude_none=True)
        for step in data["steps"]:
            if not step.get("depends_on"):
                step.pop("depends_on", None)
        if not data.get("outputs"):
            data.pop("outputs", None)
        text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)
        comments = "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines())
        return comments + text


def read_workflow(path: str | Path) -> Workflow:
    """Read a workflow file (YAML, or JSON for ``.json``): its format only — whether it
    fits the catalog is checked separately (``_checks.check_workflow``)."""
    p = Path(path)
    try:
        data, raw = read_data_file(p, "workflow", max_bytes=MAX_FILE_BYTES)
    except DataFileError as exc:
        raise WorkflowError(str(exc), path=str(p)) from None
    revision = hashlib.sha256(raw).hexdigest()[:16]
    return Workflow.from_data(data, source=str(p), path=p, revision=revision)


def _shown(path: Path | None) -> str | None:
    return None if path is None else str(path)
