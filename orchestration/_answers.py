"""Answers without an LLM, and a workflow's named outputs.

Two synthesis strategies need no model (``llm``, the third, is
:mod:`orchestration._synthesis`):

* ``template`` — the workflow's answer template, rendered over its inputs, its named
  outputs and the step outputs; for a run without one (a planned run, a workflow that
  gives none), each succeeded step whose capability has an ``answer_template`` in the
  catalog contributes that template rendered over its own output, in plan order. With
  no template at all the answer falls back to ``raw`` and a warning says so.
* ``raw`` — the named outputs of the workflow as JSON, or the outputs of the steps that
  succeeded, by step id.

Templates are rendered by :mod:`orchestration._templates` (Jinja's immutable sandbox,
strict about missing values). What a template sees:

=============  ==================================================================
workflow       ``inputs``, ``outputs`` (the named outputs), ``steps`` (each
template       succeeded step's output by id, also at the top level when its id is
               a plain name), ``query``
capability     ``output`` (that step's output), ``params`` (what was sent),
template       ``step`` (its id), ``steps``, ``inputs``, ``query``
=============  ==================================================================
"""

from __future__ import annotations

import json
from typing import Any

from orchestration._resolve import BindingFailure, bind_value
from orchestration._templates import TemplateFailed, render
from orchestration.catalog import Catalog
from orchestration.errors import CatalogError
from orchestration.state import RunState

__all__ = ["TemplateFailed", "raw_answer", "resolve_named_outputs", "template_answer"]

RESERVED_NAMES = frozenset({"inputs", "outputs", "steps", "query"})
"""Names a workflow template sees whatever the steps are called (a step may not take one)."""


def resolve_named_outputs(run: RunState) -> None:
    """Resolve a workflow run's named outputs against its results, in place; an output
    whose reference cannot be resolved (its step failed or was skipped) is None, with a
    warning naming it and why."""
    workflow = run.workflow
    if workflow is None:
        return
    sources = {**run.outputs, "inputs": workflow.inputs}
    values: dict[str, Any] = {}
    for name, expression in workflow.output_refs.items():
        try:
            values[name] = bind_value(expression, sources, f"outputs.{name}", {})
        except BindingFailure as failure:
            values[name] = None
            run.warn(f"workflow output {name!r} has no value: {failure.reason} "
                     f"({failure.reference.text})")
    workflow.outputs = values


def _succeeded(run: RunState) -> dict[str, Any]:
    return {sid: s.output for sid, s in run.live_steps.items() if s.status == "succeeded"}


def raw_answer(run: RunState) -> str:
    """The named outputs (a workflow run) or the succeeded steps' outputs, as JSON."""
    values = run.workflow.outputs if run.workflow is not None else _succeeded(run)
    return json.dumps(values, indent=2, ensure_ascii=False, default=str)


def template_answer(run: RunState, catalog: Catalog) -> str | None:
    """The answer the templates make, or None when the run has no template to use (the
    caller falls back to ``raw``). Raises :class:`TemplateFailed` naming the template and
    what it could not render."""
    steps = _succeeded(run)
    inputs = run.workflow.inputs if run.workflow is not None else {}
    if run.answer_template is not None:
        context: dict[str, Any] = {
            sid: output for sid, output in steps.items()
            if sid.isidentifier() and sid not in RESERVED_NAMES}
        context.update(inputs=inputs, steps=steps, query=run.query,
                       outputs=run.workflow.outputs if run.workflow is not None else {})
        try:
            return render(run.answer_template, context)
        except TemplateFailed as exc:
            raise TemplateFailed(f"the workflow's answer template: {exc}") from None
    pieces: list[str] = []
    found = False
    for sid, output in steps.items():
        result = run.steps[sid]
        try:
            template = catalog.get(result.tool, result.capability).answer_template
        except CatalogError:
            template = None
        if template is None:
            continue
        found = True
        params = result.attempts[-1].params if result.attempts else {}
        try:
            text = render(template, {"output": output, "params": params, "step": sid,
                                     "steps": steps, "inputs": inputs, "query": run.query})
        except TemplateFailed as exc:
            raise TemplateFailed(f"the answer_template of {result.tool}.{result.capability} "
                                 f"(step {sid!r}): {exc}") from None
        if text:
            pieces.append(text)
    return "\n".join(pieces) if found else None
