"""A planned run turned into a workflow (``dagwright plan "query" --save FILE``).

The plan is what the planner wrote for one query; the query's own values in it are what
changes from one run to the next. So every literal parameter value that also appears in
the query — a string found in it (case-insensitively), a number written in it — is
*lifted* into an input:

* the input is named after the parameter (``location``); the same value used by two
  steps is one input, and a name already taken by another value gets the step's id in
  front (``fc_days``);
* its schema is the parameter's own schema in the capability (type, bounds, enum,
  format, description), with the value it had as an example;
* the query becomes the workflow's ``query``, with ``{{inputs.name}}`` where the value
  was, so a run of the workflow reads as the query it stands for;
* the outputs are the steps nothing depends on, whole.

Values the planner made up (units, defaults not in the query) stay as they are. Each
lift is a :class:`Lift` the caller may accept, rename or refuse before the draft becomes
a :class:`~orchestration.workflows.Workflow` (the CLI asks the user).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from orchestration.catalog import Catalog
from orchestration.errors import WorkflowError
from orchestration.plan import Plan, ValidatedPlan
from orchestration.workflows._checks import has_reference
from orchestration.workflows.model import INPUT_NAME_PATTERN, NAME_PATTERN, Workflow

__all__ = ["Lift", "WorkflowDraft", "draft_workflow"]

_SCHEMA_KEYS = ("type", "enum", "const", "format", "pattern", "minimum", "maximum",
                "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength", "items",
                "description")
_INPUT_NAME = re.compile(INPUT_NAME_PATTERN)
_MIN_TEXT = 2  # a one-letter string found in a query is more likely chance than a value


@dataclass
class Lift:
    """A literal value of the plan that the query holds, proposed as an input.

    ``uses`` are ``(step id, parameter)`` where it appears; ``name`` may be changed, and
    ``accepted`` set False to keep the value as it is."""

    name: str
    value: Any
    schema: dict[str, Any]
    uses: list[tuple[str, str]] = field(default_factory=list)
    accepted: bool = True


@dataclass
class WorkflowDraft:
    """A workflow in the making: the plan, the query, and the proposed lifts."""

    name: str
    query: str
    plan: Plan
    lifts: list[Lift]
    catalog_revision: str

    def to_workflow(self) -> Workflow:
        """The workflow with the accepted lifts as inputs (:class:`WorkflowError` when two
        accepted lifts share a name, or a name is not usable)."""
        names: dict[str, Lift] = {}
        for lift in self.lifts:
            if not lift.accepted:
                continue
            if not _INPUT_NAME.match(lift.name):
                raise WorkflowError(f"input name {lift.name!r} is not usable: a letter or '_' "
                                    "then letters, digits or '_'")
            if lift.name in names:
                raise WorkflowError(f"two inputs would be called {lift.name!r}; rename one")
            names[lift.name] = lift
        by_use = {use: lift for lift in names.values() for use in lift.uses}
        steps = []
        for step in self.plan.steps:
            params = dict(step.params)
            for key in params:
                used = by_use.get((step.id, key))
                if used is not None:
                    params[key] = "{{inputs." + used.name + "}}"
            steps.append({**step.model_dump(mode="json", exclude_none=True), "params": params})
        query = self.query
        for lift in names.values():
            query = _replace_once(query, lift.value, "{{inputs." + lift.name + "}}")
        upstream = {d for step in self.plan.steps for d in step.dependencies()}
        outputs = {s.id: "{{" + s.id + "}}" for s in self.plan.steps if s.id not in upstream}
        data = {"name": self.name, "description": f"Saved from the query: {self.query}",
                "query": query,
                "inputs": {lift.name: lift.schema for lift in names.values()},
                "steps": steps, "outputs": outputs, "catalog": self.catalog_revision}
        return Workflow.from_data(data, source=f"workflow {self.name!r}")


def draft_workflow(query: str, plan: ValidatedPlan | Plan, catalog: Catalog, *,
                   name: str) -> WorkflowDraft:
    """A draft of a workflow from ``query`` and the plan made for it (see the module
    docstring); every lift proposed, accepted."""
    if not re.match(NAME_PATTERN, name):
        raise WorkflowError(f"workflow name {name!r} is not usable: 1-100 letters, digits, "
                            "'_', '.' or '-', starting with a letter or digit")
    model = plan.plan if isinstance(plan, ValidatedPlan) else plan
    lifts: list[Lift] = []
    for step in model.steps:
        schema = (catalog.get(step.tool, step.capability).input_schema
                  if catalog.has(step.tool, step.capability) else {})
        properties = schema.get("properties") if isinstance(schema, dict) else None
        for key, value in step.params.items():
            if has_reference(value) or not _in_query(value, query):
                continue
            same = next((lift for lift in lifts if lift.value == value
                         and type(lift.value) is type(value)), None)
            if same is not None:
                same.uses.append((step.id, key))
                continue
            taken = {lift.name for lift in lifts}
            input_name = _input_name(key, step.id, taken)
            prop = properties.get(key) if isinstance(properties, dict) else None
            lifts.append(Lift(input_name, value, _input_schema(prop, value), [(step.id, key)]))
    return WorkflowDraft(name=name, query=query, plan=model, lifts=lifts,
                         catalog_revision=catalog.fingerprint)


def _text_of(value: Any) -> str | None:
    """How a value would be written in a query, or None for values never lifted."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, str) and len(value.strip()) >= _MIN_TEXT:
        return value
    return None


def _pattern(value: Any) -> re.Pattern[str] | None:
    text = _text_of(value)
    if text is None:
        return None
    if isinstance(value, int | float):  # a whole number token, not a digit inside another
        return re.compile(r"(?<![\d.])" + re.escape(text) + r"(?![\d]|\.\d)")
    return re.compile(re.escape(text), re.IGNORECASE)


def _in_query(value: Any, query: str) -> bool:
    pattern = _pattern(value)
    return pattern is not None and pattern.search(query) is not None


def _replace_once(query: str, value: Any, replacement: str) -> str:
    pattern = _pattern(value)
    return query if pattern is None else pattern.sub(replacement.replace("\\", "\\\\"), query,
                                                      count=1)


def _input_name(key: str, step_id: str, taken: set[str]) -> str:
    base = re.sub(r"[^A-Za-z0-9_]", "_", key) or "value"
    if not _INPUT_NAME.match(base):
        base = f"_{base}"
    if base not in taken:
        return base
    prefixed = re.sub(r"[^A-Za-z0-9_]", "_", f"{step_id}_{base}")
    name, number = prefixed, 2
    while name in taken:
        name, number = f"{prefixed}_{number}", number + 1
    return name


def _input_schema(prop: Any, value: Any) -> dict[str, Any]:
    """The parameter's own schema (what fits its capability), with the value as example."""
    schema: dict[str, Any] = {}
    if isinstance(prop, dict):
        schema = {k: prop[k] for k in _SCHEMA_KEYS if k in prop}
    if "type" not in schema and "enum" not in schema and "const" not in schema:
        schema["type"] = ("boolean" if isinstance(value, bool) else
                          "integer" if isinstance(value, int) else
                          "number" if isinstance(value, float) else "string")
    schema["examples"] = [value]
    return schema
