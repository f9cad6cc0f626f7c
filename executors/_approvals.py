"""Human approval: when a call must wait for a person, and how decisions are applied.

A step whose capability ``requires_approval`` stops right before its call is sent —
after binding and layer 2, so the person sees exactly the parameters that would go out —
and the run goes on with every step that does not depend on it. Its result is
``awaiting_approval`` and the run records a :class:`~orchestration.result.PendingApproval`.

Decisions arrive with ``resume(run_id, approvals=...)``:

* approved, as shown: the call is sent with those parameters (attempt layer
  ``approval``);
* approved with edited ``params``: the edit is merged onto the proposed parameters as a
  JSON Merge Patch (RFC 7396: a key given replaces that key, objects merge key by key,
  an explicit ``null`` removes the key, keys not named keep their proposed value), so
  ``{"amount": 200}`` changes the amount and keeps the rest. The merged parameters pass
  layer 2 and schema validation as a whole; an edit that does not validate is an
  :class:`~orchestration.errors.ApprovalError` and nothing changes;
* rejected: the step fails with ``REJECTED`` and the note; its descendants are skipped.

An approval is for the parameters approved: if a later attempt of the step would send
different ones (a layer corrected them), it waits for a person again. With
``ORCH_APPROVAL_TIMEOUT_S`` a pending approval older than that is rejected as expired.
"""

from __future__ import annotations

import time
from typing import Any

from executors._prepare import CapabilityCache
from orchestration._text import not_unicode
from orchestration.context import ApprovalCondition
from orchestration.errors import ApprovalError, CatalogError
from orchestration.plan import Plan, validate_plan
from orchestration.protocol import ErrorCategory, ErrorSource, StepError
from orchestration.result import PLAN_APPROVAL, Approval, PendingApproval, StepResult
from orchestration.services import RunServices
from orchestration.state import RunState

__all__ = ["AwaitApproval", "apply_decisions", "approval_reason", "expire_approvals",
           "merge_edit"]


class AwaitApproval(Exception):
    """Raised inside a step's attempt loop: stop before sending, wait for a person."""

    def __init__(self, params: dict[str, Any], reason: str) -> None:
        super().__init__(reason)
        self.params = params
        self.reason = reason


def approval_reason(requires_approval: bool | ApprovalCondition, params: dict[str, Any],
                    approved: dict[str, Any] | None,
                    context: dict[str, Any] | None = None) -> str | None:
    """Why a call with ``params`` (in a run of ``context``) must wait for a person, or
    None when it may go."""
    if isinstance(requires_approval, ApprovalCondition):
        if not requires_approval.requires(context, params):
            return None
        first = f"the capability requires approval {requires_approval.describe()}"
    elif not requires_approval:
        return None
    else:
        first = "the capability requires approval before each call"
    if approved is None:
        return first
    if approved != params:
        return "the parameters differ from the ones approved (a layer changed them)"
    return None


def _rejected(run: RunState, pending: PendingApproval, code: str, message: str) -> None:
    """Fail the waiting step with a rejection, in place of its waiting result."""
    waiting = run.steps.get(pending.step_id)
    run.record_step(StepResult(
        id=pending.step_id, tool=pending.tool or "", capability=pending.capability or "",
        status="failed", attempts=waiting.attempts if waiting is not None else [],
        error=StepError(category=ErrorCategory.REJECTED, code=code, message=message,
                        source=ErrorSource.ENGINE, retryable=False, request_sent=False,
                        step_id=pending.step_id, tool=pending.tool,
                        capability=pending.capability,
                        details={"params": pending.params, "reason": pending.reason})))


def expire_approvals(run: RunState, timeout_s: float | None, now: float | None = None) -> list[str]:
    """Reject the pending approvals older than ``timeout_s``; the ids rejected.

    An expired plan approval fails the run (nothing of it ran)."""
    if timeout_s is None or not run.pending_approvals:
        return []
    now = time.time() if now is None else now
    expired = [p for p in run.pending_approvals if now - p.requested_at > timeout_s]
    for pending in expired:
        message = (f"the approval expired: nobody decided within {timeout_s:g}s "
                   "(ORCH_APPROVAL_TIMEOUT_S)")
        if pending.step_id == PLAN_APPROVAL:
            run.pending_approvals = []
            run.fail(f"the plan was not approved: {message}", at=now)
            return [PLAN_APPROVAL]
        _rejected(run, pending, "APPROVAL_EXPIRED", message)
    run.pending_approvals = [p for p in run.pending_approvals if p not in expired]
    return [p.step_id for p in expired]


def apply_decisions(
    run: RunState,
    decisions: dict[str, Approval],
    services: RunServices,
    capabilities: CapabilityCache,
) -> dict[str, dict[str, Any]]:
    """Apply a person's decisions to a paused run; the approved parameters by step id.

    Everything is checked before anything changes: a decision for a step that is not
    pending, or edited parameters that do not validate, raise :class:`ApprovalError`
    and leave ``run`` as it was.
    """
    if run.status != "awaiting_approval":
        raise ApprovalError(f"run {run.run_id!r} is not waiting for approval (it is "
                            f"{run.status}); there is nothing to decide")
    pending = {p.step_id: p for p in run.pending_approvals}
    unknown = sorted(set(decisions) - set(pending))
    if unknown:
        raise ApprovalError(
            f"run {run.run_id!r}: {', '.join(map(repr, unknown))} "
            f"{'is' if len(unknown) == 1 else 'are'} not waiting for approval; pending: "
            f"{', '.join(map(repr, pending)) or 'none'}")
    for step_id, decision in decisions.items():
        problem = None if decision.note is None else not_unicode("its note", decision.note)
        if problem is not None:  # the note is recorded with the run, which must stay JSON
            raise ApprovalError(f"run {run.run_id!r} step {step_id!r}: {problem}; nothing "
                                "was decided and the step still waits")
    approved: dict[str, dict[str, Any]] = {}
    new_plan: dict[str, Any] | None = None
    for step_id, decision in decisions.items():
        if not decision.approved or decision.params is None:
            if decision.approved:
                approved[step_id] = pending[step_id].params
            continue
        if step_id == PLAN_APPROVAL:
            new_plan = _checked_plan(run, decision.params, services)
        else:
            approved[step_id] = _checked_params(run, pending[step_id], decision.params,
                                                services, capabilities)
    # checked: now change the run
    for step_id, decision in decisions.items():
        item = pending[step_id]
        if step_id == PLAN_APPROVAL:
            if decision.approved:
                run.approved_plan = True
                if new_plan is not None:
                    run.plan = new_plan
            else:
                run.pending_approvals = []
                run.fail(f"the plan was rejected by a person: {decision.note or 'no note'}",
                         at=services.clock.time())
                return {}
        elif decision.approved:
            run.steps.pop(step_id, None)  # it runs again, from the approved call
            if decision.note:
                run.approval_notes[step_id] = decision.note
        else:
            _rejected(run, item, "REJECTED",
                      f"rejected by a person: {decision.note or 'no note given'}")
    run.pending_approvals = [p for p in run.pending_approvals if p.step_id not in decisions]
    approved.pop(PLAN_APPROVAL, None)
    return approved


def merge_edit(proposed: Any, edit: Any) -> Any:
    """``edit`` applied to ``proposed`` as a JSON Merge Patch (RFC 7396).

    A person edits the one value they disagree with; re-typing every other parameter
    (and getting one wrong) is what a partial edit spares them. ``proposed`` is not
    changed."""
    if not isinstance(edit, dict):
        return edit
    merged = dict(proposed) if isinstance(proposed, dict) else {}
    for key, value in edit.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_edit(merged.get(key), value)
    return merged


def _checked_params(run: RunState, pending: PendingApproval, params: dict[str, Any],
                    services: RunServices, capabilities: CapabilityCache) -> dict[str, Any]:
    """The edit merged onto the proposed parameters, after layer 2 and validation of the
    whole, or :class:`ApprovalError`."""
    try:
        capability = services.catalog.get(pending.tool or "", pending.capability or "")
    except CatalogError as exc:
        raise ApprovalError(f"step {pending.step_id!r}: {exc}") from exc
    settings = services.layers.with_overrides(capability.layers,
                                              source=f"capability {capability.key!r} layers")
    merged = merge_edit(pending.params, params)
    prepared = capabilities.get(capability).prepare(
        merged, coerce=settings.type_coercion_enabled)
    if prepared.error is not None:
        raise ApprovalError(
            f"run {run.run_id!r} step {pending.step_id!r}: the edited parameters, merged onto "
            f"the proposed ones (keys: {', '.join(sorted(merged)) or 'none'}), do not fit "
            f"{capability.key}'s input schema: {prepared.error.message}; nothing was sent and "
            "the step still waits for a decision (an edit names only the keys it changes; "
            "null removes a key)")
    return prepared.params


def _checked_plan(run: RunState, plan: dict[str, Any], services: RunServices) -> dict[str, Any]:
    """An edited plan, validated against the catalog, as a dict; or :class:`ApprovalError`."""
    try:
        model = Plan.model_validate(plan)
        validated = validate_plan(model, services.catalog,
                                  max_steps=services.config.max_plan_steps,
                                  earlier=services.earlier_outputs)
    except Exception as exc:  # pydantic's ValidationError or PlanValidationError
        raise ApprovalError(f"run {run.run_id!r}: the edited plan is not valid: {exc}") from exc
    return validated.to_dict()
