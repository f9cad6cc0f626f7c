"""The LLM planner: ask for a plan, parse it, validate it, feed errors back (bounded)."""

from __future__ import annotations

from opentelemetry.trace import Status, StatusCode

from orchestration.context import RunContext
from orchestration.errors import (
    LLMError,
    PlanningAttempt,
    PlanningError,
    PlanParseError,
    PlanValidationError,
)
from orchestration.llm.base import LLMRequest
from orchestration.plan import ValidatedPlan, validate_plan
from orchestration.telemetry import tracing as attr
from planners.parsing import PLAN_RESPONSE_SCHEMA, parse_plan
from planners.prompt import build_plan_messages, feedback_message


class Planner:
    """Turns a query into a :class:`ValidatedPlan` with the run's LLM.

    An answer that is not JSON, has the wrong shape or fails DAG validation is sent back
    with the exact error, up to ``planner_max_retries`` times; a :class:`PlanningError`
    then carries every attempt.
    """

    async def plan(self, query: str, ctx: RunContext) -> ValidatedPlan:
        messages = build_plan_messages(query, ctx.catalog)
        attempts: list[PlanningAttempt] = []
        tries = ctx.config.planner_max_retries + 1
        with ctx.telemetry.tracer.start_as_current_span(
            "plan", attributes={attr.RUN_ID: ctx.run_id}
        ) as span:
            for number in range(1, tries + 1):
                request = LLMRequest(
                    purpose="plan", messages=list(messages), response_schema=PLAN_RESPONSE_SCHEMA,
                    schema_name="plan",
                )
                try:
                    response = await ctx.llm.complete(request)
                except LLMError as exc:
                    attempts.append(PlanningAttempt(None, str(exc)))
                    span.set_status(Status(StatusCode.ERROR, str(exc)))
                    raise PlanningError("the planner LLM call failed", attempts) from exc
                truncated = response.finish_reason == "length"
                try:
                    plan = parse_plan(response.content)
                    validated = validate_plan(plan, ctx.catalog, max_steps=ctx.config.max_plan_steps)
                except (PlanParseError, PlanValidationError) as exc:
                    reason = "length" if truncated else (
                        "parse" if isinstance(exc, PlanParseError) else "validation")
                    attempts.append(PlanningAttempt(response.content, str(exc), response.finish_reason))
                    span.add_event("plan_rejected", {"attempt": number, "reason": reason,
                                                      "error": str(exc)[:500]})
                    if number < tries:
                        ctx.telemetry.metrics.planner_retries.labels(reason).inc()
                        messages += [
                            {"role": "assistant", "content": response.content},
                            feedback_message(str(exc), truncated=truncated),
                        ]
                    continue
                span.set_attribute("dagwright.plan.steps", len(validated.steps))
                span.set_attribute("dagwright.plan.attempts", number)
                return validated
            span.set_status(Status(StatusCode.ERROR, "no valid plan"))
        raise PlanningError(f"no valid plan after {tries} attempt(s)", attempts)
