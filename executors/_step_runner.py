"""The life of one step, top to bottom.

::

    bind      executors/_binding.py   {{references}} → values from upstream outputs
    prepare   executors/_prepare.py   layer 2 coercion, then schema validation
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
from dataclasses import dataclass, field, replace
from typing import Any

from executors._approvals import AwaitApproval, approval_reason
from executors._binding import bind
from executors._prepare import CapabilityCache, PreparedCall
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
from orchestration.protocol import OUTCOME_UNKNOWN, ErrorCategory, ErrorSource, StepError
from orchestration.result import Attempt, AttemptOutcome, PendingApproval, StepResult, StepStatus
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
    approved: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Steps a person approved, with the (coerced) parameters they approved."""


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
        started, wall_started = loop.time(), services.clock.time()
        deadline = min(started + services.config.step_timeout_s, services.deadline)
        services.events.emit("step_started", step_id=step.id, tool=step.tool,
                             capability=step.capability)
        with services.observer.step(self.run.run_id, step, state.capability) as observation:
            state.observation = observation
            try:
                async with asyncio.timeout_at(deadline):
                    output, error = await self._attempts(state, deadline)
            except TimeoutError:
                output, error = None, self._deadline_error(state, deadline)
            except AwaitApproval as paused:
                return self._paused(state, paused, wall_started, loop.time() - started)
            result = StepResult(
                id=step.id, tool=step.tool, capability=step.capability,
                status=_status(error), output=output,
                error=None if error is None else error.model_copy(update={
                    "step_id": step.id, "tool": step.tool, "capability": step.capability}),
                attempts=state.attempts, started_at_s=wall_started,
                duration_s=loop.time() - started,
            )
            observation.finished(result)
        return result

    def _paused(self, state: StepState, paused: AwaitApproval, started_at: float,
                duration: float) -> StepResult:
        """The step stops before its call until a person decides; the run records it."""
        step = state.step
        pending = PendingApproval(step_id=step.id, tool=step.tool, capability=step.capability,
                                  params=paused.params, reason=paused.reason,
                                  requested_at=self.services.clock.time())
        self.run.pending_approvals.append(pending)
        self.services.events.emit("approval_required", **pending.model_dump(
            include={"step_id", "tool", "capability", "params", "reason"}))
        return StepResult(id=step.id, tool=step.tool, capability=step.capability,
                          status="awaiting_approval", attempts=state.attempts,
                          started_at_s=started_at, duration_s=duration)

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
        approved = self.resume.approved.get(state.step.id)
        if approved is not None:
            # a person approved exactly this call: send it (it passes layer 2 and
            # validation again like any parameters)
            decision = Decision(params=approved, layer="approval", note="approved by a person")
            attempt, output = await self._attempt(state, decision, deadline)
        elif resend is not None:
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
        prepared = self.capabilities.get(state.capability).prepare(
            decision.params, coerce=state.settings.type_coercion_enabled)
        observation = state.observation
        assert observation is not None
        if prepared.coercions:
            observation.report("type_coercion_applied", {
                "dagwright.attempt": number, "coercion.count": len(prepared.coercions),
                "coercion.paths": ",".join(c.path for c in prepared.coercions)})
        state.params = prepared.params
        if prepared.error is not None:
            observation.rejected(prepared.error)
            return self._record(state, decision, "invalid", prepared.error, prepared), None
        reason = approval_reason(state.capability.requires_approval, prepared.params,
                                 self.resume.approved.get(state.step.id))
        if reason is not None:
            raise AwaitApproval(prepared.params, reason)
        key = key or key_for(state, prepared.params)
        side_effect = not state.capability.is_idempotent
        recorder = self.services.recorder
        if side_effect:
            try:
                await recorder.call_started(CallMarker(
                    state.step.id, number, decision.layer, prepared.params, key,
                    self.services.clock.time()))
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
                               latency_s=result.latency_s)
        if side_effect:
            try:
                await recorder.call_finished(state.step.id, attempt, result.data)
            except StoreError as exc:  # the call happened: go on, the run reports the store
                recorder.failure = recorder.failure or exc
        return attempt, result.data

    def _record(
        self,
        state: StepState,
        decision: Decision,
        outcome: AttemptOutcome,
        error: StepError | None,
        prepared: PreparedCall | None = None,
        *,
        latency_s: float = 0.0,
    ) -> Attempt:
        """Build the attempt of ``decision`` and add it to the step's history: the one
        place attempts are made."""
        attempt = Attempt(
            number=len(state.attempts) + 1, layer=decision.layer,
            params=prepared.params if prepared is not None else decision.params,
            outcome=outcome, error=error, latency_s=latency_s, delay_s=decision.delay_s,
            coercions=prepared.coercions if prepared is not None else [],
            validation_errors=[i.to_dict() for i in prepared.issues] if prepared else [],
            analysis=decision.analysis, note=decision.note,
        )
        state.attempts.append(attempt)
        self.services.events.emit(
            "attempt_finished", step_id=state.step.id, attempt=attempt.number,
            layer=attempt.layer, outcome=attempt.outcome,
            error_code=error.code if error is not None else None)
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


def _status(error: StepError | None) -> StepStatus:
    """A step's status from its final error: an outcome nobody knows (the transport lost
    the call with a side effect in flight) is ``unknown``, not ``failed``: it may have
    happened, so nothing that depends on it runs and it is never sent again."""
    if error is None:
        return "succeeded"
    lost = error.code == OUTCOME_UNKNOWN and error.source is ErrorSource.ENGINE
    return "unknown" if lost else "failed"


def _final_error(error: StepError, verdict: GiveUp | None) -> StepError:
    """The step's final error: the last attempt's, with why the retries stopped."""
    if verdict is None:
        return error
    return error.model_copy(update={"details": {**error.details, "gave_up": verdict.reason}})
