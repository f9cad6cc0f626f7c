"""Runs one step to its end: bind → coerce → validate → invoke → classify → recover.

Every attempt is recorded, whatever happens, so a failed step always carries its whole
history. The step's deadline (its own timeout or the run's, whichever comes first)
bounds everything, LLM calls and backoff waits included.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from executors._binding import BindingFailure, bind_params
from executors._prepare import CapabilityCache
from executors.recovery import Decision, GiveUp, RecoveryHandler, StepState, observe_attempt
from orchestration.catalog import Capability
from orchestration.context import RunContext
from orchestration.plan import ValidatedPlan
from orchestration.protocol import ErrorCategory, StepError
from orchestration.result import Attempt, CoercionRecord, Layer, StepResult
from orchestration.telemetry import _tracing as attr


def layer_setting(capability: Capability, ctx: RunContext, name: str) -> Any:
    """A layer setting, with the capability's catalog override winning over the config."""
    if name in capability.layers:
        return capability.layers[name]
    return getattr(ctx.config, name)


def idempotency_key(run_id: str, step_id: str, params: dict[str, Any]) -> str:
    """Stable per run, step and parameters, so every re-send of the same call matches."""
    canonical = json.dumps(params, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(f"{run_id}\x00{step_id}\x00{canonical}".encode()).hexdigest()[:32]


class StepRunner:
    """Executes steps of one run; shared by all of that run's step tasks."""

    def __init__(
        self,
        ctx: RunContext,
        plan: ValidatedPlan,
        capabilities: CapabilityCache,
        handlers: list[RecoveryHandler],
    ) -> None:
        self.ctx = ctx
        self.plan = plan
        self.capabilities = capabilities
        self.handlers = handlers

    async def run(self, step_id: str) -> StepResult:
        step = self.plan.steps[step_id]
        capability = self.ctx.catalog.get(step.tool, step.capability)
        state = StepState(step, capability, self.ctx, self.plan)
        loop = asyncio.get_running_loop()
        started = loop.time()
        wall_started = time.time()
        deadline = min(started + self.ctx.config.step_timeout_s, self.ctx.run_deadline)
        tracer = self.ctx.telemetry.tracer
        span_attrs = {
            attr.GEN_AI_OPERATION: "execute_tool",
            attr.GEN_AI_TOOL_NAME: capability.key,
            attr.GEN_AI_TOOL_CALL_ID: f"{self.ctx.run_id}:{step_id}",
            attr.RUN_ID: self.ctx.run_id,
            attr.STEP_ID: step_id,
            attr.CAPABILITY: capability.key,
            attr.TOOL: capability.tool,
            attr.GEN_AI_TOOL_TYPE: "function" if capability.function is not None else "extension",
        }
        with tracer.start_as_current_span(
            f"execute_tool {capability.key}", attributes=span_attrs
        ) as span:
            try:
                async with asyncio.timeout_at(deadline):
                    output, error = await self._run(state, deadline)
            except TimeoutError:
                which = "run" if deadline == self.ctx.run_deadline else "step"
                limit = (self.ctx.config.run_timeout_s if which == "run"
                         else self.ctx.config.step_timeout_s)
                output, error = None, StepError(
                    category=ErrorCategory.TIMEOUT,
                    code=f"{which.upper()}_DEADLINE_EXCEEDED",
                    message=f"the {which} deadline ({limit:g}s) passed "
                    f"after {len(state.attempts)} attempt(s)",
                    retryable=False,
                )
            if error is not None:
                error = error.model_copy(
                    update={"step_id": step_id, "tool": step.tool, "capability": step.capability}
                )
                span.set_status(Status(StatusCode.ERROR, error.describe()))
                span.set_attribute("error.type", error.category.value)
            span.set_attribute(attr.ATTEMPT, len(state.attempts))
            span.set_attribute(attr.STEP_STATUS, "succeeded" if error is None else "failed")
            if state.attempts:
                span.set_attribute(attr.LAYER, state.attempts[-1].layer)
        duration = loop.time() - started
        status = "succeeded" if error is None else "failed"
        metrics = self.ctx.telemetry.metrics
        metrics.child(metrics.steps, step.tool, step.capability, status).inc()
        metrics.child(metrics.step_duration, step.tool, step.capability).observe(duration)
        if error is None:
            self.ctx.outputs[step_id] = output
        return StepResult(
            id=step_id,
            tool=step.tool,
            capability=step.capability,
            status=status,
            output=output,
            error=error,
            attempts=state.attempts,
            started_at_s=wall_started,
            duration_s=duration,
        )

    async def _run(self, state: StepState, deadline: float) -> tuple[Any, StepError | None]:
        """The attempt loop; returns (output, None) or (None, final error)."""
        layer: Layer = "plan"
        delay = 0.0
        analysis: str | None = None
        note: str | None = None
        try:
            params = bind_params(state.step.params, self.ctx.outputs)
        except BindingFailure as failure:
            error = StepError(
                category=ErrorCategory.BINDING_ERROR,
                code="UNRESOLVED_REFERENCE",
                message=str(failure),
                retryable=True,
                request_sent=False,
                details={"param": failure.param_path, "reference": failure.reference.text,
                         "reason": failure.reason},
            )
            state.attempts.append(
                Attempt(number=1, layer="plan", params=dict(state.step.params),
                        outcome="unbound", error=error)
            )
            state.params = dict(state.step.params)
            decision = await self._recover(state, error)
            if not isinstance(decision, Decision):
                return None, self._final_error(error, decision)
            params, layer, delay = decision.params, decision.layer, decision.delay_s
            analysis, note = decision.analysis, decision.note

        while True:
            attempt, output = await self._attempt(
                state, params, layer, delay, analysis, note, deadline
            )
            observe_attempt(self.handlers, state, attempt)
            if attempt.outcome == "succeeded":
                return output, None
            assert attempt.error is not None
            if len(state.attempts) >= self.ctx.config.max_attempts_per_step:
                return None, self._final_error(
                    attempt.error,
                    GiveUp(f"reached max_attempts_per_step={self.ctx.config.max_attempts_per_step}"),
                )
            decision = await self._recover(state, attempt.error)
            if not isinstance(decision, Decision):
                return None, self._final_error(attempt.error, decision)
            params, layer, delay = decision.params, decision.layer, decision.delay_s
            analysis, note = decision.analysis, decision.note

    async def _recover(self, state: StepState, error: StepError) -> Decision | GiveUp | None:
        """Ask each handler in order; the first answer wins."""
        for handler in self.handlers:
            decision = await handler.decide(state, error)
            if decision is not None:
                return decision
        return None

    @staticmethod
    def _final_error(error: StepError, decision: GiveUp | None) -> StepError:
        if decision is None:
            return error
        return error.model_copy(update={"details": {**error.details, "gave_up": decision.reason}})

    async def _attempt(
        self,
        state: StepState,
        params: dict[str, Any],
        layer: Layer,
        delay: float,
        analysis: str | None,
        note: str | None,
        deadline: float,
    ) -> tuple[Attempt, Any]:
        ctx, cap = self.ctx, state.capability
        metrics = ctx.telemetry.metrics
        number = len(state.attempts) + 1
        if delay > 0:
            await ctx.clock.sleep(delay)
        prepared = self.capabilities.get(cap)
        coercions: list[CoercionRecord] = []
        known_valid = False
        if layer_setting(cap, ctx, "type_coercion_enabled"):
            coerced = prepared.coercer.coerce(params)
            known_valid = coerced.known_valid  # same validator: no need to check twice
            if coerced.changes:
                params = coerced.value
                coercions = [
                    CoercionRecord(path=c.path, old=c.old, new=c.new, rule=c.rule)
                    for c in coerced.changes
                ]
                metrics.child(metrics.type_coercion_applied, cap.tool, cap.name).inc()
                attr.add_event(trace.get_current_span(), "type_coercion_applied", {
                    attr.STEP_ID: state.step.id, attr.CAPABILITY: cap.key, attr.ATTEMPT: number,
                    "coercion.count": len(coercions),
                    "coercion.paths": ",".join(c.path for c in coercions),
                })
        state.params = params
        issues = [] if known_valid else prepared.validate(params)
        if issues:
            error = StepError(
                category=ErrorCategory.VALIDATION_ERROR,
                code="INVALID_PARAMETERS",
                message="; ".join(f"{i.path}: {i.message}" for i in issues[:10]),
                retryable=True,
                request_sent=False,
                details={"errors": [i.to_dict() for i in issues]},
            )
            metrics.child(metrics.tool_errors, cap.tool, cap.name, error.category.value).inc()
            attempt = Attempt(
                number=number, layer=layer, params=params, outcome="invalid", error=error,
                delay_s=delay, coercions=coercions,
                validation_errors=[i.to_dict() for i in issues], analysis=analysis, note=note,
            )
            state.attempts.append(attempt)
            return attempt, None

        loop = asyncio.get_running_loop()
        timeout = min(cap.timeout_s or ctx.config.tool_timeout_s, max(0.001, deadline - loop.time()))
        with ctx.telemetry.tracer.start_as_current_span(
            f"tool_call {cap.key}",
            kind=SpanKind.CLIENT,
            attributes={attr.GEN_AI_TOOL_NAME: cap.key, attr.RUN_ID: ctx.run_id,
                        attr.STEP_ID: state.step.id, attr.CAPABILITY: cap.key,
                        attr.LAYER: layer, attr.ATTEMPT: number, **attr.endpoint_attributes(cap)},
        ) as span:
            headers: dict[str, str] = {}
            if cap.function is None:
                propagate.inject(headers)
                if cap.idempotency_key_header:
                    headers[cap.idempotency_key_header] = idempotency_key(
                        ctx.run_id, state.step.id, params
                    )
            result = await ctx.transport.call(cap, params, timeout_s=timeout, headers=headers)
            if result.error is not None:
                span.set_status(Status(StatusCode.ERROR, result.error.message[:200]))
                span.set_attribute("error.type", result.error.category.value)
                if result.error.http_status is not None:
                    span.set_attribute("http.response.status_code", result.error.http_status)
        metrics.child(metrics.tool_call_duration, cap.tool, cap.name).observe(result.latency_s)
        outcome = "succeeded" if result.ok else "failed"
        metrics.child(metrics.tool_calls, cap.tool, cap.name, outcome).inc()
        if result.error is not None:
            metrics.child(metrics.tool_errors, cap.tool, cap.name, result.error.category.value).inc()
        attempt = Attempt(
            number=number, layer=layer, params=params, outcome=outcome, error=result.error,
            latency_s=result.latency_s, delay_s=delay, coercions=coercions, analysis=analysis,
            note=note,
        )
        state.attempts.append(attempt)
        return attempt, result.data
