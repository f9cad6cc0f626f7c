"""Which faults a run met and which defense layer recovered each, read from the run's own
records — nothing here guesses what the engine did.

The records are the :class:`~orchestration.result.RunResult`: each step's attempts, each
attempt's ``layer`` (who produced its parameters: the plan, resilience, layer 3, layer 4,
layer 4's transient override, a person), its ``outcome``, its classified ``error``
(``source``, ``category``, ``code``), the ``coercions`` layer 2 made and the
``provenance`` verdicts of the ground stage; the plan's repair rounds
(``plan["replans"]``); and the usage by purpose (LLM calls, tokens, cost).

The rules, per step, walking its attempts in order:

* a **coercion** (layer 2 changed values to fit the schema) is a fault of the values it
  changed, recovered by ``coercion`` when that attempt then passed validation;
* a failed attempt opens a **fault** (its error's source, category and code);
* the next attempt was produced by some layer. If it succeeded, or failed differently
  (it got past the fault and met another), that layer *handled* the open faults; if it
  failed with the same source and code, that layer *tried* and the fault stays open;
* a handled fault counts as **recovered** by its handler only if the step finally
  succeeded — or if the step failed for good and a repair round that made up for it
  succeeded, in which case ``replanning`` recovered its faults;
* a correction the ground stage refused (``not_sent`` with an ungrounded value) is a
  **grounding refusal**, counted on its own as well.

LLM spend per layer is the run's usage by purpose (``validation_feedback`` is layer 3,
``semantic_retry`` layer 4 — its transient overrides included, since they are the same
calls —, ``replan`` replanning, ``plan`` planning, ``synthesis`` the answer).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, Field

from orchestration.result import Attempt, RunResult, StepResult

__all__ = ["LAYERS", "LAYER_LABELS", "PURPOSE_OF_LAYER", "Attribution", "Fault", "GroundingRefusal",
           "LayerSpend", "attribute", "total_spend"]

LAYERS: tuple[str, ...] = ("coercion", "validation_feedback", "semantic_retry",
                           "transient_override", "resilience", "replanning", "approval")
"""The recovering layers, in the order reports list them."""

LAYER_LABELS: dict[str, str] = {
    "coercion": "coercion (layer 2)", "validation_feedback": "validation feedback (layer 3)",
    "semantic_retry": "semantic retry (layer 4)",
    "transient_override": "transient override (layer 4)", "resilience": "resilience",
    "replanning": "replanning", "approval": "a person's approval",
    "planning": "planning (layer 1)", "answer": "answer synthesis",
}
"""How reports name the layers (and the other LLM spenders)."""

PURPOSE_OF_LAYER: dict[str, str] = {
    "planning": "plan", "validation_feedback": "validation_feedback",
    "semantic_retry": "semantic_retry", "replanning": "replan", "answer": "synthesis",
}
"""Which LLM purpose each spending layer's calls are made for (``transient_override`` is a
verdict of ``semantic_retry`` calls; coercion and resilience make no LLM call)."""

_SENT = ("succeeded", "failed", "cancelled")


class Fault(BaseModel):
    """One fault a step met: a failed attempt's error, or values layer 2 had to coerce."""

    step: str | None
    """None for a fault of the run itself (planning failed)."""
    capability: str | None = None
    attempt: int = 0
    kind: Literal["error", "coercion", "planning"] = "error"
    source: str | None = None
    category: str | None = None
    code: str
    detail: str = ""
    handled_by: str | None = None
    """The layer whose attempt got past this fault (whether or not the step then succeeded)."""
    tried: list[str] = Field(default_factory=list)
    """Layers whose attempts met the same fault again."""
    recovered_by: str | None = None
    """The layer credited with the recovery; None when the fault stood (the step failed)."""

    @property
    def label(self) -> str:
        """``validation/VALIDATION_ERROR``: where the fault came from and its code."""
        return f"{self.source}/{self.code}" if self.source else self.code


class GroundingRefusal(BaseModel):
    """A correction the ground stage did not send: which values, and why each."""

    step: str
    attempt: int
    layer: str
    params: dict[str, str]
    """Parameter → the reason its claimed source did not hold (``quote_not_found``, ...)."""


class LayerSpend(BaseModel):
    """LLM calls, tokens and cost (None: a price is unknown) spent by one layer or in all."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float | None = None

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def add(self, other: LayerSpend) -> None:
        self.calls += other.calls
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        if other.cost is not None:
            self.cost = (self.cost or 0.0) + other.cost


class Attribution(BaseModel):
    """What one run met and who recovered it."""

    faults: list[Fault] = Field(default_factory=list)
    grounding_refusals: list[GroundingRefusal] = Field(default_factory=list)
    grounded_values: int = 0
    """Corrected values whose claimed source held (they were sent)."""
    ungrounded_sent: int = 0
    """Corrected values whose source did not hold but were sent anyway
    (``ORCH_GROUNDED_CORRECTIONS=false`` records the verdicts without enforcing them)."""
    replan_rounds: int = 0
    spend: dict[str, LayerSpend] = Field(default_factory=dict)
    """LLM spend by layer (keys of :data:`PURPOSE_OF_LAYER`; other purposes as they are)."""

    def recovered(self, layer: str) -> list[Fault]:
        return [f for f in self.faults if f.recovered_by == layer]

    def tried(self, layer: str) -> list[Fault]:
        """Faults ``layer`` acted on without recovering them."""
        return [f for f in self.faults if f.recovered_by != layer
                and (layer in f.tried or f.handled_by == layer)]

    @property
    def unrecovered(self) -> list[Fault]:
        return [f for f in self.faults if f.recovered_by is None]

    def recovering_layers(self) -> list[str]:
        """The layers that recovered something in this run, in :data:`LAYERS` order."""
        found = {f.recovered_by for f in self.faults if f.recovered_by}
        return [layer for layer in LAYERS if layer in found]


def attribute(result: RunResult) -> Attribution:
    """The faults of ``result`` and which layer recovered each (see the module docstring)."""
    out = Attribution(spend=_spend(result))
    if result.plan is None and result.status == "failed":
        out.faults.append(Fault(step=None, kind="planning", code="PLANNING_FAILED",
                                detail=_short(result.error or "no plan")))
    replaced = _replaced_by_successful_rounds(result)
    out.replan_rounds = len(_rounds(result))
    for step in result.steps.values():
        faults = _step_faults(step, out)
        if step.status != "succeeded" and step.id in replaced:
            for fault in faults:
                fault.recovered_by = "replanning"
        out.faults.extend(faults)
    return out


def _step_faults(step: StepResult, out: Attribution) -> list[Fault]:
    faults: list[Fault] = []
    open_faults: list[Fault] = []
    for index, attempt in enumerate(step.attempts):
        if attempt.coercions:
            faults.append(_coercion(step, attempt))
        _grounding(step, attempt, out)
        if index > 0 and open_faults:
            layer = str(attempt.layer)
            error = attempt.error
            if attempt.outcome != "succeeded" and error is not None and _same(open_faults[-1], attempt):
                open_faults[-1].tried.append(layer)
                continue
            for fault in open_faults:
                fault.handled_by = layer
            open_faults = []
        if attempt.outcome != "succeeded" and attempt.error is not None:
            fault = _error_fault(step, attempt)
            faults.append(fault)
            open_faults.append(fault)
    if step.status == "succeeded":
        for fault in faults:
            if fault.kind == "error":
                fault.recovered_by = fault.handled_by
    else:
        for fault in faults:
            if fault.kind == "error":
                fault.recovered_by = None
    return faults


def _coercion(step: StepResult, attempt: Attempt) -> Fault:
    changes = "; ".join(f"{c.path}: {_value(c.old)} → {_value(c.new)}" for c in attempt.coercions)
    passed = attempt.outcome not in ("invalid", "unbound")
    return Fault(step=step.id, capability=f"{step.tool}.{step.capability}", attempt=attempt.number,
                 kind="coercion", source=str(attempt.layer), category="TYPE_MISMATCH",
                 code="COERCED", detail=_short(changes), handled_by="coercion",
                 recovered_by="coercion" if passed else None,
                 tried=[] if passed else ["coercion"])


def _error_fault(step: StepResult, attempt: Attempt) -> Fault:
    error = attempt.error
    assert error is not None
    return Fault(step=step.id, capability=f"{step.tool}.{step.capability}", attempt=attempt.number,
                 source=error.source.value, category=error.category.value, code=error.code,
                 detail=_short(error.message))


def _same(fault: Fault, attempt: Attempt) -> bool:
    error = attempt.error
    return error is not None and (fault.source, fault.code) == (error.source.value, error.code)


def _grounding(step: StepResult, attempt: Attempt, out: Attribution) -> None:
    if not attempt.provenance:
        return
    ungrounded = {param: p.reason or "ungrounded" for param, p in attempt.provenance.items()
                  if not p.grounded}
    if attempt.outcome == "not_sent" and ungrounded:
        out.grounding_refusals.append(GroundingRefusal(
            step=step.id, attempt=attempt.number, layer=str(attempt.layer), params=ungrounded))
        return
    out.grounded_values += sum(1 for p in attempt.provenance.values() if p.grounded)
    if attempt.outcome in _SENT:
        out.ungrounded_sent += len(ungrounded)


def _rounds(result: RunResult) -> list[dict[str, Any]]:
    rounds = (result.plan or {}).get("replans") or []
    return [r for r in rounds if isinstance(r, dict)]


def _replaced_by_successful_rounds(result: RunResult) -> set[str]:
    """Step ids a repair round made up for, where every step of that round succeeded."""
    replaced: set[str] = set()
    for round_ in _rounds(result):
        steps = [result.steps.get(sid) for sid in round_.get("steps", [])]
        if steps and all(s is not None and s.status == "succeeded" for s in steps):
            replaced.update(str(sid) for sid in round_.get("replaces", []))
    return replaced


def _spend(result: RunResult) -> dict[str, LayerSpend]:
    usage = result.usage
    by_layer = {purpose: layer for layer, purpose in PURPOSE_OF_LAYER.items()}
    spend: dict[str, LayerSpend] = {}
    for purpose, slot in usage.by_purpose.items():
        spend[by_layer.get(purpose, purpose)] = LayerSpend(
            calls=slot.get("calls", 0), input_tokens=slot.get("input_tokens", 0),
            output_tokens=slot.get("output_tokens", 0),
            cost=usage.cost_by_purpose.get(purpose))
    return spend


def total_spend(spends: Iterable[LayerSpend]) -> LayerSpend:
    total = LayerSpend()
    for spend in spends:
        total.add(spend)
    return total


def _value(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _short(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"
