"""Does a workflow still fit the catalog? Checked whole when it is loaded, before any run.

A workflow is saved against one catalog and run against whatever the catalog is today.
What it checks, every problem at once, each naming the step and parameter:

* its own shape: input names and schemas, unique step ids (none called ``inputs``),
  ``{{inputs.x}}`` naming a declared input, the query using only inputs, the answer
  template's syntax, the outputs referring to steps and inputs that exist;
* as a plan: known tools and capabilities, references to existing steps, no cycle,
  valid ``retry`` overrides (the plan's own validation, with the inputs left out);
* its parameters against each capability's input schema: parameters the capability no
  longer takes, required ones it does not give, literal values that no longer validate
  after layer 2 coercion, and an input whose declared type cannot be what the parameter
  takes;
* its references' paths against the upstream capabilities' output schemas.

The message names the catalog's revision (its fingerprint, and the one the workflow was
saved against when it differs), so "it worked last week" can be traced to the change.
Coercion and the reference-path check live in the executor and the planner; they are
reached through :class:`StepChecks`, which the engine implements.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from orchestration._templates import template_problem
from orchestration.capability import schema_problems
from orchestration.catalog import Catalog
from orchestration.errors import PlanIssue, PlanValidationError, WorkflowError
from orchestration.plan import Plan, Step, find_references, iter_strings, validate_plan
from orchestration.result import CoercionRecord
from orchestration.workflows.model import INPUT_NAME_PATTERN, INPUTS, Workflow, WorkflowStep

__all__ = ["CheckedValues", "StepChecks", "check_workflow", "placeholder_plan",
           "workflow_problems"]

_INPUT_NAME = re.compile(INPUT_NAME_PATTERN)
_NUMBERS = frozenset({"integer", "number"})


@dataclass(frozen=True, slots=True)
class CheckedValues:
    """Values after layer 2 coercion and schema validation: ``issues`` are
    ``(json path, message, validator)``, empty when the values fit."""

    values: dict[str, Any]
    coercions: list[CoercionRecord] = field(default_factory=list)
    issues: list[tuple[str, str, str]] = field(default_factory=list)


class StepChecks(Protocol):
    """What the checks need of the executor and the planner (the engine provides it)."""

    def check_values(self, schema: dict[str, Any], values: dict[str, Any]) -> CheckedValues:
        """``values`` coerced (layer 2) and validated against ``schema``."""
        ...

    def reference_issues(self, steps: list[Step], catalog: Catalog) -> list[PlanIssue]:
        """References whose path the upstream capability's output schema cannot provide."""
        ...


def has_reference(value: Any) -> bool:
    return any("{{" in text for _, text in iter_strings(value))


def input_references(value: Any) -> list[tuple[str, str, str]]:
    """``(json path, input name, reference text)`` of every ``{{inputs.x}}`` in ``value``."""
    found = []
    for path, ref in find_references(value):
        if ref.step_id == INPUTS:
            name = ref.path[0] if ref.path else ""
            found.append((path, str(name), ref.text))
    return found


def _without_inputs(value: Any) -> Any:
    """``value`` with every ``{{inputs.x}}`` taken out (a whole-value one becomes None), so
    the plan's own validation sees only the references between steps."""
    if isinstance(value, str):
        if "{{" not in value:
            return value
        refs = [ref for _, ref in find_references(value) if ref.step_id == INPUTS]
        if not refs:
            return value
        if len(refs) == 1 and value.strip() == refs[0].text:
            return None
        for ref in refs:
            value = value.replace(ref.text, "")
        return value
    if isinstance(value, dict):
        return {k: _without_inputs(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_inputs(v) for v in value]
    return value


def placeholder_plan(workflow: Workflow) -> Plan:
    """The workflow's steps as a plan, its inputs left out: what the plan checks see."""
    return Plan(steps=[Step(**{**s.model_dump(), "params": _without_inputs(s.params)})
                       for s in workflow.steps])


def workflow_problems(workflow: Workflow, catalog: Catalog, checks: StepChecks, *,
                      max_steps: int = 1000) -> list[str]:
    """Every way ``workflow`` does not fit ``catalog`` (empty when it fits)."""
    problems = _shape_problems(workflow)
    plan = placeholder_plan(workflow)
    try:
        validate_plan(plan, catalog, max_steps=max_steps)
    except PlanValidationError as exc:
        problems.extend(_issue_text(issue) for issue in exc.issues)
    for step in workflow.steps:
        if catalog.has(step.tool, step.capability):
            problems.extend(f"step {step.id!r}: {p}" for p in _param_problems(
                step, workflow, catalog, checks))
    known = [s for s in plan.steps if catalog.has(s.tool, s.capability)]
    outputs_step = Step(id="__outputs__", tool="-", capability="-",
                        params={"outputs": _without_inputs(workflow.outputs)})
    for issue in checks.reference_issues([*known, outputs_step], catalog):
        problems.append(_issue_text(issue).replace("step '__outputs__': param $.outputs",
                                                   "outputs"))
    return problems


def check_workflow(workflow: Workflow, catalog: Catalog, checks: StepChecks, *,
                   max_steps: int = 1000) -> None:
    """Raise :class:`WorkflowError` with every problem when ``workflow`` does not fit."""
    problems = workflow_problems(workflow, catalog, checks, max_steps=max_steps)
    if not problems:
        return
    saved = (f"; it was saved against revision {workflow.catalog}"
             if workflow.catalog and workflow.catalog != catalog.fingerprint else "")
    where = f" ({catalog.path})" if catalog.path is not None else ""
    head = (f"workflow {workflow.label} does not fit the catalog at revision "
            f"{catalog.fingerprint}{where}{saved}")
    listed = "\n".join(f"  {n}. {p}" for n, p in enumerate(problems, 1))
    raise WorkflowError(f"{head}:\n{listed}", problems,
                        path=str(workflow.path) if workflow.path else None)


# --- the parts -----------------------------------------------------------------------------
def _issue_text(issue: PlanIssue) -> str:
    return f"step {issue.step_id!r}: {issue.message}" if issue.step_id else issue.message


def _shape_problems(workflow: Workflow) -> list[str]:
    problems: list[str] = []
    declared = set(workflow.inputs)
    for name, schema in workflow.inputs.items():
        if not _INPUT_NAME.match(name):
            problems.append(f"input {name!r}: a name is a letter or '_' then letters, digits "
                            "or '_' (it is written {{inputs." + name + "}})")
        problems.extend(schema_problems(schema, f"input {name!r}", "schema"))
    ids = [s.id for s in workflow.steps]
    if INPUTS in ids:
        problems.append(f"step {INPUTS!r}: the name is taken by the workflow's inputs "
                        "({{inputs.x}}); give the step another id")
    places: list[tuple[str, Any]] = [(f"step {s.id!r}: param", s.params)
                                     for s in workflow.steps]
    places.append(("outputs", workflow.outputs))
    if workflow.query is not None:
        places.append(("query", workflow.query))
        others = sorted({ref.step_id for _, ref in find_references(workflow.query)} - {INPUTS})
        if others:
            problems.append(f"query: it may use only inputs, not the steps {', '.join(others)} "
                            "(it is the run's query, written before anything runs)")
    for where, value in places:
        for path, name, text in input_references(value):
            if name not in declared:
                listed = ", ".join(sorted(declared)) or "none"
                problems.append(f"{where} {path}: {text} names no input (inputs: {listed})")
    step_ids = set(ids)
    for path, ref in find_references(workflow.outputs):
        if ref.step_id != INPUTS and ref.step_id not in step_ids:
            problems.append(f"outputs {path}: {ref.text} names no step of the workflow")
    answer = workflow.answer
    if answer is not None and answer.template is not None:
        problem = template_problem(answer.template)
        if problem is not None:
            problems.append(f"answer.template: {problem}")
    if answer is not None and answer.strategy == "template" and answer.template is None:
        problems.append("answer: strategy template needs a template")
    return problems


def _param_problems(step: WorkflowStep, workflow: Workflow, catalog: Catalog,
                    checks: StepChecks) -> Iterable[str]:
    """The step's parameters against its capability's input schema (see the module
    docstring): what can be known before the inputs and upstream outputs are there."""
    capability = catalog.get(step.tool, step.capability)
    schema = capability.input_schema
    literal = {k: v for k, v in step.params.items() if not has_reference(v)}
    checked = checks.check_values(schema, literal)
    for path, message, validator in checked.issues:
        if validator in ("required", "additionalProperties") and path == "$":
            continue  # worked out below, counting the referenced parameters too
        yield f"param {path}: {message}"
    properties = schema.get("properties")
    if schema.get("additionalProperties") is False and isinstance(properties, dict):
        for key in step.params:
            if key not in properties:
                yield (f"param {key!r}: the capability {capability.key} does not take it "
                       f"(it takes: {', '.join(properties) or 'nothing'})")
    required = schema.get("required")
    if isinstance(required, list):
        missing = [name for name in required if isinstance(name, str) and name not in step.params]
        if missing:
            yield (f"the capability {capability.key} requires {', '.join(map(repr, missing))}, "
                   "which the step does not give")
    if not isinstance(properties, dict):
        return
    for key, value in step.params.items():
        refs = input_references(value) if isinstance(value, str) else []
        if len(refs) != 1 or value.strip() != refs[0][2] or key not in properties:
            continue
        wanted = _types(properties[key])
        given = _types(workflow.inputs.get(refs[0][1], {}))
        if wanted and given and not _compatible(given, wanted):
            yield (f"param {key!r} takes {'/'.join(sorted(wanted))} but input "
                   f"{refs[0][1]!r} is {'/'.join(sorted(given))}")


def _types(schema: Any) -> set[str]:
    if not isinstance(schema, dict) or "type" not in schema:
        return set()
    kind = schema["type"]
    return {kind} if isinstance(kind, str) else {k for k in kind if isinstance(k, str)}


def _compatible(given: set[str], wanted: set[str]) -> bool:
    """Whether a value of one of ``given``'s types can be one of ``wanted``'s (an integer
    is a number; a number may be a whole one)."""
    if given & wanted:
        return True
    return bool(given & _NUMBERS and wanted & _NUMBERS)
