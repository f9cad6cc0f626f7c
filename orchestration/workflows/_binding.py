"""A workflow made into one run: its inputs validated, bound into the steps, checked.

Everything here happens before the run is recorded or anything is sent, so a bad input
is an :class:`~orchestration.errors.InvalidInput` naming every problem and the run never
starts:

1. inputs not declared are refused; missing ones take their schema's ``default``;
2. each value goes through layer 2 coercion (``"4"`` for an integer becomes ``4``), then
   the inputs' JSON Schemas — every problem is reported, by input name;
3. text that would read as a reference (``{{``) is refused, so an input's value can never
   inject a reference into the plan;
4. ``{{inputs.x}}`` is replaced in the steps' parameters and the query; the parameters
   of each step are then checked against its capability's schema as far as they are
   known without upstream outputs (a step whose parameters are all bound, whole).

The result is a :class:`WorkflowCall`: the query text, the plan (every layer and the
resilience policy apply to its steps as to any plan) and the run's setup (how it
answers, its workflow, inputs and outputs).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from orchestration._resolve import BindingFailure, bind_value
from orchestration.catalog import Catalog
from orchestration.errors import InvalidInput, WorkflowError
from orchestration.plan import Plan, Step, iter_strings
from orchestration.result import SynthesisStrategy, WorkflowInfo
from orchestration.state import RunSetup
from orchestration.workflows._checks import StepChecks, has_reference
from orchestration.workflows.model import INPUTS, Workflow

__all__ = ["WorkflowCall", "bind_workflow", "inputs_schema"]

MAX_QUERY_CHARS = 20_000


@dataclass(frozen=True, slots=True)
class WorkflowCall:
    """What a run of a workflow starts with."""

    query: str
    plan: Plan
    setup: RunSetup
    inputs: dict[str, Any]


def inputs_schema(workflow: Workflow) -> dict[str, Any]:
    """The workflow's inputs as one object schema (required: those without a default)."""
    return {"type": "object", "properties": dict(workflow.inputs),
            "required": [name for name, schema in workflow.inputs.items()
                         if "default" not in schema],
            "additionalProperties": False}


def bind_workflow(workflow: Workflow, inputs: dict[str, Any] | None, catalog: Catalog,
                  checks: StepChecks, *, synthesis: SynthesisStrategy | None = None) -> WorkflowCall:
    """``workflow`` with ``inputs``, ready to run (see the module docstring); raises
    :class:`InvalidInput` for inputs that do not fit, naming each."""
    values = _checked_inputs(workflow, inputs, checks)
    sources = {INPUTS: values}
    steps: list[Step] = []
    problems: list[str] = []
    for step in workflow.steps:
        try:
            params = bind_value(step.params, sources, "$", {}, only=INPUTS)
        except BindingFailure as failure:
            problems.append(f"step {step.id!r}: {failure}")
            continue
        steps.append(Step(**{**step.model_dump(), "params": params}))
        if not has_reference(params) and catalog.has(step.tool, step.capability):
            schema = catalog.get(step.tool, step.capability).input_schema
            checked = checks.check_values(schema, params)
            problems.extend(f"step {step.id!r} param {path}: {message}"
                            for path, message, _ in checked.issues)
    if problems:
        raise InvalidInput(_refusal(workflow, "its steps would refuse these inputs", problems))
    query = _query(workflow, sources)
    answer = workflow.answer
    setup = RunSetup(
        plan_source="workflow",
        answer_strategy=synthesis or (answer.strategy if answer is not None else None),
        answer_template=answer.template if answer is not None else None,
        workflow=WorkflowInfo(name=workflow.name,
                              path=str(workflow.path) if workflow.path is not None else None,
                              revision=workflow.revision, inputs=values,
                              output_refs=dict(workflow.outputs)))
    return WorkflowCall(query=query, plan=Plan(steps=steps), setup=setup, inputs=values)


def _checked_inputs(workflow: Workflow, inputs: dict[str, Any] | None,
                    checks: StepChecks) -> dict[str, Any]:
    if not isinstance(inputs, dict | None):
        raise InvalidInput(f"the inputs of workflow {workflow.label} must be a mapping of "
                           f"names to values, not {type(inputs).__name__}")
    given = dict(inputs or {})
    unknown = sorted(set(given) - set(workflow.inputs))
    problems = [f"input {name!r} is not an input of the workflow (inputs: "
                f"{', '.join(workflow.inputs) or 'none'})" for name in unknown]
    for name, schema in workflow.inputs.items():
        if name not in given:
            if "default" in schema:
                given[name] = schema["default"]
            else:
                problems.append(f"input {name!r} is missing (it has no default)")
    checked = checks.check_values(inputs_schema(workflow), given)
    for path, message, validator in checked.issues:
        if validator in ("additionalProperties", "required") and path == "$":
            continue  # named above, with the inputs there are
        name = path.removeprefix("$.").split(".")[0].split("[")[0] if path != "$" else ""
        problems.append(f"input {name!r}: {message}" if name else message)
    for path, text in iter_strings(checked.values):
        if "{{" in text:
            problems.append(f"input {path.removeprefix('$.')!r}: text may not contain '{{{{' "
                            "(it would read as a reference in the plan)")
    if problems:
        raise InvalidInput(_refusal(workflow, "these inputs do not fit", problems))
    return checked.values


def _query(workflow: Workflow, sources: dict[str, Any]) -> str:
    """The run's query: the workflow's ``query`` with its inputs, or its name and inputs."""
    if workflow.query is None:
        shown = json.dumps(sources[INPUTS], ensure_ascii=False, sort_keys=True, default=str)
        return f"workflow {workflow.name} {shown}"[:MAX_QUERY_CHARS]
    try:
        text = bind_value(workflow.query, sources, "query", {}, only=INPUTS)
    except BindingFailure as failure:
        raise WorkflowError(f"workflow {workflow.label}: query: {failure}") from None
    return str(text)[:MAX_QUERY_CHARS]


def _refusal(workflow: Workflow, what: str, problems: list[str]) -> str:
    listed = "\n".join(f"  - {p}" for p in problems)
    return f"workflow {workflow.label}: {what}; nothing was run:\n{listed}"
