"""Saved workflows: plan once, run many.

A workflow is a plan with named, typed inputs and named outputs, kept in a YAML or JSON
file (``docs/workflows.md`` has the format and a complete example). Running one skips
planning — no planning LLM call — while every defense layer and the resilience policy
apply to its steps as to any plan::

    result = orch.run_workflow("weekly-report", inputs={"team": "Platform", "weeks": 4})
    result.workflow.outputs["summary"]

This package is the format and its checks; the facade runs them
(:meth:`~orchestration.Orchestrator.run_workflow`), the CLI saves and lists them
(``dagwright plan "…" --save FILE``, ``dagwright run --workflow NAME --input k=v``,
``dagwright workflows``), and ``dagwright serve`` starts them (``POST /v1/runs`` with
``{"workflow", "inputs"}``).

=========================  =================================================================
``model.py``               the file format (:class:`Workflow`) and reading a file
``_checks.py``             whether a workflow fits the catalog, every problem at once
``_binding.py``            inputs validated (layer 2, then the schemas) and bound into a plan
``_library.py``            the directory workflows are found in by name, and listing it
``_draft.py``              a planned run lifted into a workflow (``plan --save``)
=========================  =================================================================
"""

from __future__ import annotations

from orchestration.workflows._binding import WorkflowCall, bind_workflow, inputs_schema
from orchestration.workflows._checks import (
    CheckedValues,
    StepChecks,
    check_workflow,
    workflow_problems,
)
from orchestration.workflows._draft import Lift, WorkflowDraft, draft_workflow
from orchestration.workflows._library import WorkflowEntry, WorkflowLibrary
from orchestration.workflows.model import Workflow, WorkflowAnswer, WorkflowStep, read_workflow

__all__ = [
    "CheckedValues",
    "Lift",
    "StepChecks",
    "Workflow",
    "WorkflowAnswer",
    "WorkflowCall",
    "WorkflowDraft",
    "WorkflowEntry",
    "WorkflowLibrary",
    "WorkflowStep",
    "bind_workflow",
    "check_workflow",
    "draft_workflow",
    "inputs_schema",
    "read_workflow",
    "workflow_problems",
]
