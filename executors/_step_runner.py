"""The life of one step, top to bottom.

::

    bind      executors/_binding.py   {{references}} → values from upstream outputs
    prepare   executors/_prepare.py   layer 2 coercion, then schema validation
    ground    executors/_grounding.py a decision's claimed sources for the values it
                                      changed, checked against what layer 2 made of them
                                      (an unverifiable value is not sent)
    send      executors/_send.py      one call through the transport (timeout, trace
                                      context, idempotency key)
    classify  orchestration/protocol.py, orchestration/_transport.py
                                      whatever came back → data or a StepError with its
                                      source; executors/faults.py says what it means
    decide    executors/recovery.py   the recovery chain (resilience, layer 3, layer 4)
                                      → a Decision (try again with these parameters),
                                      a GiveUp, or nothing

A :class:`~executors.recovery.Decision` is passed whole from one attempt to the next, and
every attempt — sent, rejected by validation, or stopped by binding — is recorded by
:meth:`StepRunner._record`, so a failed step always carries its whole history. The step's
deadline (its own timeout or the run's, whichever comes first) bounds everything, LLM
calls and backoff waits included.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field, replace
from typing import Any

from executors._binding import bind
from executors._grounding import Evidence, refusal, ungrounded, verify
from executors._prepare import CapabilityCache, PreparedCall, PreparedCapability
from executors._send import key_for, send
from executors.recovery import (
    Decision,
    GiveUp,
    RecoveryHandler,
    StepState,
    ask_handlers,
    observe_attempt,
)
from orchestration.errors import StoreError
from orchestration.plan import Step, ValidatedPlan
from orchestration.protocol import ErrorCategory, ErrorSource, StepError
from orchestration.result import Attempt, AttemptOutcome, Provenance, StepResult
from orchestration.retry_policy import RetryPolicy
from orchestration.services import RunServices
from orchestration.state import RunState
from orchestration.store._base import CallMarker


@dataclass(frozen=True, slots=True)
class ResumePoint:
    """What a resumed run knows about steps that were in flight when its process stopped:
    their earlier attempts, and the side-effect calls to send again with the same
    parameters and idempotency key (capabilities that declare a key header)."""

    attempts: dict[str, list[Attempt]] = field(default_factory=dict)
    resend: dict[str, CallMarker] = field(default_factory=dict)


class StepRunner:
    """Runs the steps of one plan of one run; shared by all of its step tasks."""

    def __init__(
        self,
        plan: ValidatedPlan,
        run: RunState,
        services: RunServices,
        capabilities: CapabilityCache,
        handlers: list[RecoveryHandler],
        resume: ResumePoint | None = None,
    ) -> None:
        self.plan = plan
        self.run = run
        self.services = services
        self.capabilities = capabilities
        self.handlers = handlers
        self.resume = resume or ResumePoint()

    async def run_step(self, step_id: str) -> StepResult:
        """Run ``step_id`` to its end; a failure is a failed result, never an exception."""
        step = self.plan.steps[step_id]
        state = self._state(step)
        services = self.services
        loop = asyncio.get_running_loop()
        started, wall_started = loop.time(), time.time()
        deadline = min(started + services.config.step_timeout_s, services.deadline)
        with services.observer.step(self.run.run_id, step, state.capability) as observation:
            state.observation = observation
            try:
                async with asyncio.timeout_at(deadline):
                    output, error = await self._attempts(state, deadline)
            except TimeoutError:
                output, error = None, self._deadline_error(state, deadline)
            result = StepResult(
                id=step.id, tool=step.tool, capability=step.capability,
                status="succeeded" if error is None else "failed", output=output,
                error=None if error is None else error.model_copy(update={
                    "step_id": step.id, "tool": step.tool, "capability": step.capability}),
                attempts=state.attempts, started_at_s=wall_started,
                duration_s=loop.time() - started,
            )
            observation.finished(result)
        return result

    def _state(self, step: Step) -> StepState:
        """What the layers see of this step: its capability, settings and retry policy.

        The catalog and plan validated every override when they loaded, so resolving
        them here cannot fail on a well-formed run.
        """
        services = self.services
        capability = services.catalog.get(step.tool, step.capability)
        settings = services.layers.with_overrides(
            capability.layers, source=f"capability {capability.key!r} layers")
        policy = RetryPolicy.for_call(
            services.config,
            (capability.retry, f"capability {capability.key!r} retry overrides"),
            (step.retry, f"step {step.id!r} ({capability.key}) retry overrides"))
        return StepState(step=step, capability=capability, plan=self.plan, run=self.run,
                         services=services, settings=settings, retry_policy=policy,
                         attempts=list(self.resume.attempts.get(step.id, ())))

    # --- the attempt loop ---------------------------------------------------------------
    async def _attempts(self, state: StepState, deadline: float) -> tuple[Any, StepError | None]:
        """bind → prepare → send → classify → decide, until a call succeeds or the chain
        stops; returns ``(output, None)`` or ``(None, final error)``."""
        resend = self.resume.resend.get(state.step.id)
        if resend is not None:
            # the process stopped while this call was in flight: send exactly it again,
            # with the key the tool already saw, so the tool can tell it is a repeat
            decision = Decision(params=resend.params, layer=resend.layer,  # type: ignore[arg-type]
                                note="resumed: re-sent with the same idempotency key")
            attempt, output = await self._attempt(state, decision, deadline,
                                                  key=resend.idempotency_key)
        else:
            decision = Decision(params=dict(state.step.params), layer="plan")
            bound = bind(decision.params, self.run.outputs)
            if isinstance(bound, StepError):
                state.params = decision.params
                attempt, output = self._record(state, decision, "unbound", bound), None
            else:
                attempt, output = await self._attempt(state, replace(decision, params=bound),
                                                      deadline)
        cap = self.services.config.max_attempts_per_step
        while True:
            observe_attempt(self.handlers, state, attempt)
            if attempt.outcome == "succeeded":
                return output, None
            assert attempt.error is not None
            if len(state.attempts) >= cap:
                return None, _final_error(attempt.error,
                                          GiveUp(f"reached max_attempts_per_step={cap}"))
            verdict = await ask_handlers(self.handlers, state, attempt.error)
            if not isinstance(verdict, Decision):
                return None, _final_error(attempt.error, verdict)
            attempt, output = await self._attempt(state, verdict, deadline)

    async def _attempt(
        self, state: StepState, decision: Decision, deadline: float, *, key: str | None = None
    ) -> tuple[Attempt, Any]:
        """One attempt with the decision's parameters: prepare, and send if they are valid.

        A call with a side effect (a capability that is not idempotent) is recorded in the
        run store before it is sent and its outcome right after, so a process that stops
        in between leaves a marker that says the call may have happened.
        """
        if decision.delay_s > 0:
            await self.services.clock.sleep(decision.delay_s)
        number = len(state.attempts) + 1
        capability = self.capabilities.get(state.capability)
        prepared = capability.prepare(decision.params, coerce=state.settings.type_coercion_enabled)
        observation = state.observation
        assert observation is not None
        if prepared.coercions:
            observation.report("type_coercion_applied", {
                "dagwright.attempt": number, "coercion.count": len(prepared.coercions),
                "coercion.paths": ",".join(c.path for c in prepared.coercions)})
        provenance = self._ground(state, decision, prepared, capability, number)
        state.params = prepared.params
        if prepared.error is not None:
            observation.rejected(prepared.error)
            return self._record(state, decision, "invalid", prepared.error, prepared,
                                provenance=provenance), None
        if decision.grounding is not None and decision.grounding.enforce and ungrounded(provenance):
            # a value nobody can trace to the request or an upstream output is not sent
            return self._record(state, decision, "not_sent", refusal(provenance, decision.layer),
                                prepared, provenance=provenance), None
        key = key or key_for(state, prepared.params)
        side_effect = not state.capability.is_idempotent
        recorder = self.services.recorder
        if side_effect:
            try:
                await recorder.call_started(CallMarker(
                    state.step.id, number, decision.layer, prepared.params, key, time.time()))
            except StoreError as exc:
                error = StepError(
                    category=ErrorCategory.INTERNAL_ERROR, code="STORE_UNAVAILABLE",
                    message=f"not sent: the call has a side effect and the run store could not "
                            f"record it first ({exc})",
                    source=ErrorSource.ENGINE, request_sent=False)
                return self._record(state, decision, "not_sent", error, prepared), None
        result = await send(state, prepared.params, layer=decision.layer, number=number,
                            deadline=deadline, key=key)
        outcome: AttemptOutcome = "succeeded" if result.error is None else "failed"
        attempt = self._record(state, decision, outcome, result.error, prepared,
                               latency_s=result.latency_s, provenance=provenance)
        if side_effect:
            try:
                await recorder.call_finished(state.step.id, attempt, result.data)
            except StoreError as exc:  # the call happened: go on, the run reports the store
                recorder.failure = recorder.failure or exc
        return attempt, result.data

    @staticmethod
    def _ground(
        state: StepState, decision: Decision, prepared: PreparedCall,
        capability: PreparedCapability, number: int,
    ) -> dict[str, Provenance]:
        """The ground stage (between prepare and send): check every source a decision
        claims for its changed parameters against the value layer 2 made of it, and
        report each verdict (``correction_grounded`` / ``correction_ungrounded``)."""
        grounding = decision.grounding
        if grounding is None:
            return {}
        failed = state.last_attempt.error if state.last_attempt is not None else None
        evidence = Evidence(query=state.run.query, tool_error=_tool_error_text(failed),
                            upstream=state.dependency_outputs())
        coerce = state.settings.type_coercion_enabled

        def as_sent(param: str, value: Any) -> Any:
            if not coerce:
                return value
            trial = {**prepared.params, param: value}
            coerced = capability.coercer.coerce(trial).value
            return coerced.get(param, value) if isinstance(coerced, dict) else value

        verdicts = verify(grounding, prepared.params, evidence, as_sent)
        for param, verdict in verdicts.items():
            base = {"dagwright.attempt": number, "dagwright.layer": decision.layer,
                    "param": param, "provenance.kind": verdict.kind}
            if verdict.grounded:
                state.report("correction_grounded", base)
            else:
                # the reason only: the detail quotes values, which stay out of telemetry
                state.report("correction_ungrounded", {
                    **base, "reason": verdict.reason, "enforced": grounding.enforce})
        return verdicts

    @staticmethod
    def _record(
        state: StepState,
        decision: Decision,
        outcome: AttemptOutcome,
        error: StepError | None,
        prepared: PreparedCall | None = None,
        *,
        latency_s: float = 0.0,
        provenance: dict[str, Provenance] | None = None,
    ) -> Attempt:
        """Build the attempt of ``decision`` and add it to the step's history: the one
        place attempts are made."""
        attempt = Attempt(
            number=len(state.attempts) + 1, layer=decision.layer,
            params=prepared.params if prepared is not None else decision.params,
            outcome=outcome, error=error, latency_s=latency_s, delay_s=decision.delay_s,
            coercions=prepared.coercions if prepared is not None else [],
            validation_errors=[i.to_dict() for i in prepared.issues] if prepared else [],
            analysis=decision.analysis, note=decision.note, provenance=provenance or {},
        )
        state.attempts.append(attempt)
        return attempt

    def _deadline_error(self, state: StepState, deadline: float) -> StepError:
        config = self.services.config
        which = "run" if deadline == self.services.deadline else "step"
        limit = config.run_timeout_s if which == "run" else config.step_timeout_s
        return StepError(
            category=ErrorCategory.TIMEOUT, code=f"{which.upper()}_DEADLINE_EXCEEDED",
            message=f"the {which} deadline ({limit:g}s) passed after {len(state.attempts)} "
                    "attempt(s)",
            source=ErrorSource.ENGINE, retryable=False,
        )


def _tool_error_text(error: StepError | None) -> str:
    """The text of an error the tool itself sent (what a ``tool_hint`` may quote); empty
    for the engine's own errors (validation, binding), which only echo the parameters."""
    if error is None or error.source not in (ErrorSource.ENVELOPE, ErrorSource.HTTP_STATUS,
                                             ErrorSource.RAISED):
        return ""
    return f"{error.message}\n{json.dumps(error.details, ensure_ascii=False, default=str)}"


def _final_error(error: StepError, verdict: GiveUp | None) -> StepError:
    """The step's final error: the last attempt's, with why the retries stopped."""
    if verdict is None:
        return error
    return error.model_copy(update={"details": {**error.details, "gave_up": verdict.reason}})
