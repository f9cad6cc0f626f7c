"""Replanning: a repair plan for the part of a run that failed for good.

The repair plan holds only new steps. They may use the outputs of steps that already
succeeded (``{{step_id.field}}``, bound from the run's outputs) but not failed or
skipped ones, and their ids must not collide with any id the run has used. A repair
step may not repeat the call a failed step planned, and the re-send guard holds across
rounds: a repair step may not send again a non-idempotent call that may already have
been processed. Both compare calls *after* binding and coercion (``"100"`` and ``100``
are the same call), through the run's ``CallInspector`` (``RunServices.calls``), since a
planner cannot import the executor that knows coercion. The plan the
executor runs is a :class:`RepairPlan`: its graph holds only the new steps (so nothing
that already ran runs again), while :meth:`RepairPlan.dependencies` and
:meth:`RepairPlan.ancestors` still see the completed steps a new step builds on.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from orchestration._json import DEFAULT_MAX_DEPTH
from orchestration._text import data_block, to_json
from orchestration.catalog import Capability, Catalog
from orchestration.errors import PlanIssue, PlanValidationError
from orchestration.plan import Plan, Step, ValidatedPlan, validate_plan
from orchestration.result import StepResult
from orchestration.services import CallInspector
from planners._references import check_reference_paths

if TYPE_CHECKING:
    import networkx as nx

__all__ = ["RepairPlan", "RepairSituation", "validate_repair"]


@dataclass
class RepairSituation:
    """Where a run stands when it asks for a repair.

    ``steps``/``results``: every step so far (all rounds) and its result. ``open_ids``:
    the failed and skipped steps of the latest round, which the repair must make up for.
    ``round``: 1 for the first repair.
    """

    steps: dict[str, Step]
    results: dict[str, StepResult]
    open_ids: list[str]
    round: int = 1

    @property
    def succeeded(self) -> list[str]:
        return [sid for sid, r in self.results.items() if r.status == "succeeded"]

    @property
    def failed(self) -> list[str]:
        return [sid for sid, r in self.results.items() if r.status == "failed"]

    def prompt_blocks(self, outputs: dict[str, Any], *, value_limit: int,
                      total_limit: int) -> dict[str, str]:
        """The data blocks of the repair request, each size-limited and delimited."""
        plan = [
            {"id": s.id, "capability": f"{s.tool}.{s.capability}", "params": s.params,
             "status": self.results[sid].status if sid in self.results else "not run"}
            for sid, s in self.steps.items()
        ]
        completed = [
            {"step": sid, "capability": f"{self.steps[sid].tool}.{self.steps[sid].capability}",
             "output": _bounded(outputs.get(sid), value_limit)}
            for sid in self.succeeded if sid in self.steps
        ]
        failures = []
        for sid in self.failed:
            result = self.results[sid]
            tried = result.attempts[-1].params if result.attempts else self.steps[sid].params
            entry: dict[str, Any] = {
                "step": sid, "capability": f"{result.tool}.{result.capability}",
                "params_tried": tried, "attempts": len(result.attempts),
                "still_missing": sid in self.open_ids,
            }
            if result.error is not None:
                entry["error"] = {"category": result.error.category.value,
                                  "code": result.error.code,
                                  "message": result.error.message[:value_limit]}
            failures.append(entry)
        skipped = [
            f"- {sid} ({r.tool}.{r.capability}): {r.skipped_reason or 'did not run'}"
            for sid, r in self.results.items() if r.status == "skipped" and sid in self.open_ids
        ]
        return {
            "plan": data_block("plan", to_json(plan, total_limit)),
            "completed": data_block("outputs", to_json(completed, total_limit)),
            "failures": data_block("failures", to_json(failures, total_limit)),
            "skipped": "\n".join(skipped) or "(none)",
        }

    def search_text(self, query: str) -> str:
        """What catalog selection ranks against: the query and what went wrong."""
        parts = [query]
        for sid in self.open_ids:
            step = self.steps.get(sid)
            result = self.results.get(sid)
            if step is not None:
                parts.append(f"{step.tool} {step.capability}")
            if result is not None and result.error is not None:
                parts.append(result.error.message)
        return " ".join(parts)


def _bounded(value: Any, limit: int) -> Any:
    """``value`` itself when its JSON is short enough, else its JSON text cut to ``limit``."""
    text = json.dumps(value, default=str, ensure_ascii=False)
    return json.loads(text) if len(text) <= limit else to_json(value, limit)


class RepairPlan(ValidatedPlan):
    """The new steps of a repair; dependency queries also see the completed steps."""

    def __init__(self, plan: Plan, graph: nx.DiGraph, context: nx.DiGraph, round: int) -> None:
        super().__init__(plan, graph)
        self.context = context
        self.round = round

    def dependencies(self, step_id: str) -> list[str]:
        return list(self.context.predecessors(step_id))

    def ancestors(self, step_id: str) -> set[str]:
        import networkx as nx  # a rare repair needs it, not every run

        return set(nx.ancestors(self.context, step_id))


def validate_repair(
    plan: Plan,
    catalog: Catalog,
    situation: RepairSituation,
    outputs: dict[str, Any],
    *,
    max_steps: int,
    calls: CallInspector | None = None,
    max_depth: int = DEFAULT_MAX_DEPTH,
    earlier: Mapping[str, Any] | None = None,
) -> RepairPlan:
    """Check a repair plan against the catalog and the run so far; raise with every issue.

    ``calls`` compares calls after binding and coercion (without it, raw parameters are
    compared and the re-send guard is not applied); ``earlier``: the session's earlier
    outputs a ``{{run:N.step}}`` reference may name.
    """
    if len(plan.steps) > max_steps:
        raise PlanValidationError(
            [PlanIssue(None, f"the repair plan has {len(plan.steps)} steps; the limit is {max_steps}")])
    existing = situation.steps
    done = set(situation.succeeded)
    issues: list[PlanIssue] = []
    fresh: list[Step] = []
    for step in plan.steps:
        if step.id in existing:
            issues.append(PlanIssue(step.id, "this id is already used by a step of the run; "
                                             "give the new step a new id"))
        else:
            fresh.append(step)
        for dep in sorted(step.dependencies()):
            if dep in existing and dep not in done:
                status = situation.results[dep].status if dep in situation.results else "not run"
                issues.append(PlanIssue(
                    step.id, f"uses step {dep!r}, which {status}; only succeeded steps "
                             f"({', '.join(sorted(done)) or 'none'}) or new steps can be used"))
    # Structural checks on the run's steps plus the new ones: ids, catalog, references, cycles.
    combined = Plan(steps=[*existing.values(), *fresh])
    try:
        whole = validate_plan(combined, catalog, max_steps=len(combined.steps),
                              max_depth=max_depth, earlier=earlier or {})
    except PlanValidationError as exc:
        issues.extend(i for i in exc.issues if i.step_id is None or i.step_id not in existing)
        raise PlanValidationError(issues) from exc
    known = {k: outputs[k] for k in done if k in outputs}
    for step in fresh:
        repeat = _repeated_call(step, catalog.get(step.tool, step.capability), situation,
                                known, calls)
        if repeat is not None:
            issues.append(PlanIssue(step.id, repeat))
    issues.extend(check_reference_paths(fresh, catalog, known_steps=existing, outputs=known))
    if issues:
        raise PlanValidationError(issues)
    ids = [s.id for s in fresh]
    graph = whole.graph.subgraph(ids).copy()
    context = whole.graph.subgraph([*done, *ids]).copy()
    return RepairPlan(Plan(steps=fresh, reasoning=plan.reasoning), graph, context, situation.round)


def _repeated_call(
    step: Step, capability: Capability, situation: RepairSituation,
    outputs: dict[str, Any], calls: CallInspector | None,
) -> str | None:
    """Why ``step`` may not run: it makes the same call a failed step planned, or sends
    again a call that may already have been processed; None when it may."""
    mine = calls.fingerprint(capability, step.params, outputs) if calls is not None else None
    for failed_id in situation.failed:
        failed = situation.steps.get(failed_id)
        if failed is None or (failed.tool, failed.capability) != (step.tool, step.capability):
            continue
        if calls is not None and mine is not None:
            same = mine == calls.fingerprint(capability, failed.params, outputs)
        else:
            same = step.params == failed.params
        if same:
            return (f"repeats the call that failed in step {failed_id!r} (the same call once its "
                    "parameters are bound and coerced); change what made it fail, or leave "
                    "the step out")
    if calls is None:
        return None
    for sid, result in situation.results.items():
        if (result.tool, result.capability) != (step.tool, step.capability):
            continue
        blocked = calls.resend_blocked(capability, step.params, outputs, result.attempts)
        if blocked is not None:
            return (f"is the same call as one step {sid!r} already sent, which may have been "
                    f"processed, and {capability.key} is not idempotent ({blocked}); "
                    "use its result or leave the step out")
    return None
