"""The LLM planner: ask for a plan, read it, validate it, and recover from bad answers.

Every failure of a planner call is classified, and the class decides what happens:

==========================  ==================================================  =========
failure                     what the planner does                               reason
==========================  ==================================================  =========
unreadable answer           ask again, quoting the parse error                  malformed
(not JSON, wrong shape, a
broken tool call, a body
the client could not read)
``finish_reason=length``    ask again for a more concise plan                   length
invalid plan (catalog,      ask again, listing every issue                      validation
DAG, reference paths)
rate limit, timeout,        nothing more: the LLM gateway already retried with  —
connection, 5xx             backoff (``llm_max_retries``); the error is reported
content filter, auth,       not retried (asking again cannot help, or must not)  —
budget, anything else
==========================  ==================================================  =========

Retries are bounded by ``planner_max_retries``; their feedback text comes from a
:class:`~planners.feedback.FeedbackFormatter`. Every attempt is kept on the
:class:`PlanningError` and recorded as a ``plan_attempt`` event on the plan span, with
the catalog selection (what was left out of the prompt) as a ``catalog_selection`` event.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

from opentelemetry.trace import Span, Status, StatusCode

from orchestration.context import RunContext
from orchestration.errors import (
    LLMError,
    LLMErrorKind,
    PlanningAttempt,
    PlanningError,
    PlanParseError,
    PlanValidationError,
)
from orchestration.llm.base import LLMRequest
from orchestration.plan import ValidatedPlan, validate_plan
from orchestration.telemetry import _tracing as attr
from planners._references import check_reference_paths
from planners._selection import Selection
from planners.feedback import DefaultFeedbackFormatter, FeedbackFormatter, PlanFeedback
from planners.parsing import parse_plan, plan_response_schema
from planners.prompt import BuiltPrompt, PlannerTemplates, PromptBuilder
from planners.replan import RepairPlan, RepairSituation, validate_repair
from planners.signatures import SignatureRenderer

T = TypeVar("T")

_TRANSIENT = frozenset({LLMErrorKind.RATE_LIMIT, LLMErrorKind.TIMEOUT, LLMErrorKind.CONNECTION,
                        LLMErrorKind.SERVER})
_ECHO_LIMIT = 6000  # longest rejected answer quoted back to the LLM
_EVENT_TEXT_LIMIT = 500


class PlannerAttempt(PlanningAttempt):
    """One planner call: its number, purpose and ``kind`` (``accepted`` or why it failed).

    ``kind`` is ``malformed``, ``length`` or ``validation`` for a rejected answer, or the
    :class:`~orchestration.errors.LLMErrorKind` value of a failed call.
    """

    __slots__ = ("kind", "number", "purpose")

    def __init__(
        self,
        number: int,
        kind: str,
        raw_output: str | None,
        error: str,
        finish_reason: str | None = None,
        purpose: str = "plan",
    ) -> None:
        super().__init__(raw_output, error, finish_reason)
        self.number = number
        self.kind = kind
        self.purpose = purpose

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "number": self.number, "kind": self.kind,
                "purpose": self.purpose}


class _Rejected(Exception):
    """An answer the planner will not accept, with the feedback to send about it."""

    def __init__(self, feedback: PlanFeedback) -> None:
        super().__init__(feedback.error)
        self.feedback = feedback


class Planner:
    """Turns a query into a :class:`ValidatedPlan` with the run's LLM (layer 1 lives here).

    ``templates`` (or ``template_dir``, a directory of ``<name>.txt`` overrides) shape the
    prompts; ``feedback`` words the retry messages; ``renderer`` draws the typed
    signatures. ``structured_output``: send the plan's JSON Schema with the request (the
    client enforces it as far as its provider can); ``None`` follows
    ``llm_structured_output`` (on unless it is ``none``). ``check_references`` rejects
    ``{{step.field}}`` paths that the upstream output schema does not have.
    """

    def __init__(
        self,
        *,
        templates: PlannerTemplates | None = None,
        template_dir: str | os.PathLike[str] | None = None,
        feedback: FeedbackFormatter | None = None,
        renderer: SignatureRenderer | None = None,
        structured_output: bool | None = None,
        check_references: bool = True,
    ) -> None:
        if templates is not None and template_dir is not None:
            raise ValueError("give either templates or template_dir, not both")
        if template_dir is not None:
            templates = PlannerTemplates.from_dir(template_dir)
        self.prompts = PromptBuilder(templates, renderer)
        self.feedback: FeedbackFormatter = feedback or DefaultFeedbackFormatter()
        self.structured_output = structured_output
        self.check_references = check_references

    # --- public -----------------------------------------------------------------------
    def build_prompt(self, query: str, ctx: RunContext) -> BuiltPrompt:
        """The first plan request's messages and the catalog selection behind them."""
        return self.prompts.plan_prompt(query, ctx.catalog, ctx.config)

    def response_schema(self, ctx: RunContext, selection: Selection) -> dict[str, Any] | None:
        """The JSON Schema sent for constrained output, or None when it is switched off."""
        wanted = self.structured_output
        if wanted is None:
            wanted = ctx.config.llm_structured_output != "none"
        return plan_response_schema(selection.offered) if wanted else None

    async def plan(self, query: str, ctx: RunContext) -> ValidatedPlan:
        """A validated plan for ``query``; raises :class:`PlanningError` with every attempt."""

        def accept(text: str) -> ValidatedPlan:
            plan = _parse(text)
            validated = _validate(lambda: validate_plan(
                plan, ctx.catalog, max_steps=ctx.config.max_plan_steps))
            if self.check_references:
                issues = check_reference_paths(plan.steps, ctx.catalog)
                if issues:
                    raise _Rejected(PlanFeedback("validation", str(PlanValidationError(issues)),
                                                 0, "plan", [str(i) for i in issues]))
            return validated

        with ctx.telemetry.tracer.start_as_current_span(
            "plan", attributes={attr.RUN_ID: ctx.run_id}
        ) as span:
            prompt = self.build_prompt(query, ctx)
            validated = await self._converse(ctx, "plan", prompt, accept, span)
            span.set_attribute("dagwright.plan.steps", len(validated.steps))
            return validated

    async def replan(self, ctx: RunContext, situation: RepairSituation) -> RepairPlan | None:
        """A repair plan for the open steps of ``situation``; None if the LLM sees none.

        Raises :class:`PlanningError` (every attempt kept) when no valid repair plan
        comes back within ``planner_max_retries``.
        """
        limit = ctx.config.max_prompt_value_chars
        blocks = situation.prompt_blocks(
            ctx.outputs, value_limit=limit,
            total_limit=max(limit, ctx.config.planner_prompt_budget_chars // 4))

        def accept(text: str) -> RepairPlan | None:
            plan = _parse(text)
            if not plan.steps:
                return None
            return _validate(lambda: validate_repair(
                plan, ctx.catalog, situation, ctx.outputs, max_steps=ctx.config.max_plan_steps))

        with ctx.telemetry.tracer.start_as_current_span(
            "replan", attributes={attr.RUN_ID: ctx.run_id, "dagwright.replan.round": situation.round,
                                  "dagwright.replan.open_steps": ",".join(situation.open_ids)}
        ) as span:
            prompt = self.prompts.replan_prompt(
                ctx.query, ctx.catalog, ctx.config, search_text=situation.search_text(ctx.query),
                taken_ids=sorted(situation.steps), blocks=blocks)
            repair = await self._converse(ctx, "replan", prompt, accept, span)
            span.set_attribute("dagwright.plan.steps", len(repair.steps) if repair else 0)
            return repair

    # --- the attempt loop ---------------------------------------------------------------
    async def _converse(
        self,
        ctx: RunContext,
        purpose: str,
        prompt: BuiltPrompt,
        accept: Callable[[str], T],
        span: Span,
    ) -> T:
        selection = prompt.selection
        for key, value in selection.trace_attributes().items():
            span.set_attribute(f"dagwright.{key}", value)
        span.set_attribute("dagwright.prompt.chars", prompt.chars)
        attr.add_event(span, "catalog_selection", {
            **selection.trace_attributes(), "prompt.chars": prompt.chars})
        schema = self.response_schema(ctx, selection)
        messages = list(prompt.messages)
        attempts: list[PlanningAttempt] = []
        tries = ctx.config.planner_max_retries + 1
        metrics = ctx.telemetry.metrics
        for number in range(1, tries + 1):
            request = LLMRequest(purpose=purpose, messages=list(messages),
                                 response_schema=schema, schema_name="plan")
            try:
                response = await ctx.llm.complete(request)
            except LLMError as exc:
                feedback = _llm_error_feedback(exc, number, purpose)
                retry = feedback is not None and number < tries
                attempts.append(PlannerAttempt(number, exc.kind.value, None, str(exc), None, purpose))
                _attempt_event(span, number, purpose, "llm_error", exc.kind.value, str(exc), None,
                               retry)
                if feedback is None:
                    span.set_status(Status(StatusCode.ERROR, str(exc)))
                    raise PlanningError(_llm_failure(exc, ctx, purpose), attempts) from exc
                if not retry:
                    continue  # the last attempt: ends as "no valid plan" below
                metrics.planner_retries.labels(feedback.kind).inc()
                messages.append({"role": "user", "content": self.feedback.format(feedback)})
                continue

            try:
                if response.finish_reason == "length":
                    raise _Rejected(PlanFeedback(
                        "length", "the answer was cut off at the output length limit "
                        "(finish_reason=length)", number, purpose))
                result = accept(response.content)
            except _Rejected as rejected:
                feedback = rejected.feedback
                feedback = PlanFeedback(feedback.kind, feedback.error, number, purpose,
                                        feedback.issues)
            else:
                attempts.append(PlannerAttempt(number, "accepted", response.content, "",
                                               response.finish_reason, purpose))
                _attempt_event(span, number, purpose, "accepted", "accepted", None,
                               response.finish_reason, False)
                span.set_attribute("dagwright.plan.attempts", number)
                return result
            retry = number < tries
            attempts.append(PlannerAttempt(number, feedback.kind, response.content, feedback.error,
                                           response.finish_reason, purpose))
            _attempt_event(span, number, purpose, "rejected", feedback.kind, feedback.error,
                           response.finish_reason, retry)
            if retry:
                metrics.planner_retries.labels(feedback.kind).inc()
                if feedback.kind != "length":  # a cut-off answer is not worth quoting back
                    messages.append({"role": "assistant",
                                     "content": response.content[:_ECHO_LIMIT]})
                messages.append({"role": "user", "content": self.feedback.format(feedback)})
        span.set_attribute("dagwright.plan.attempts", tries)
        span.set_status(Status(StatusCode.ERROR, f"no valid {purpose}"))
        what = "repair plan" if purpose == "replan" else "plan"
        raise PlanningError(f"no valid {what} after {tries} attempt(s)", attempts)


def _parse(text: str) -> Any:
    try:
        return parse_plan(text)
    except PlanParseError as exc:
        raise _Rejected(PlanFeedback("malformed", str(exc), 0)) from exc


def _validate(check: Callable[[], T]) -> T:
    try:
        return check()
    except PlanValidationError as exc:
        raise _Rejected(PlanFeedback("validation", str(exc), 0, "plan",
                                     [str(i) for i in exc.issues])) from exc


def _llm_error_feedback(exc: LLMError, number: int, purpose: str) -> PlanFeedback | None:
    """Feedback for an LLM error worth another planner call, else None (not retried)."""
    if exc.kind is LLMErrorKind.MALFORMED:
        return PlanFeedback("malformed", str(exc), number, purpose)
    if exc.kind is LLMErrorKind.LENGTH:
        return PlanFeedback("length", str(exc), number, purpose)
    return None


def _llm_failure(exc: LLMError, ctx: RunContext, purpose: str) -> str:
    """The PlanningError message for an LLM error the planner does not retry."""
    who = "the planner's" if purpose == "plan" else "the replanner's"
    if exc.kind in _TRANSIENT:
        return (f"{who} LLM call failed ({exc.kind.value}) after the gateway's retries with "
                f"backoff (up to {ctx.llm.max_retries} retries): {exc}")
    if exc.kind is LLMErrorKind.CONTENT_FILTER:
        return f"the provider's content filter stopped {who} answer (not retried): {exc}"
    if exc.kind is LLMErrorKind.BUDGET:
        return f"the run's LLM call budget is spent: {exc}"
    return f"{who} LLM call failed ({exc.kind.value}, not retried): {exc}"


def _attempt_event(
    span: Span,
    number: int,
    purpose: str,
    outcome: str,
    kind: str,
    error: str | None,
    finish_reason: str | None,
    retry: bool,
) -> None:
    attr.add_event(span, "plan_attempt", {
        attr.ATTEMPT: number,
        attr.PURPOSE: purpose,
        "outcome": outcome,
        "reason": kind,
        "error": error[:_EVENT_TEXT_LIMIT] if error else None,
        "finish_reason": finish_reason,
        "will_retry": retry,
    })
