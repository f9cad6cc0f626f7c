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
every attempt — sent, rejected by validation, stopped by binding or by the re-send guard,
cut by the deadline or by the run's cancellation — is recorded by
:meth:`StepRunner._record`, so a failed step always carries its whole history. A cut
attempt is ``cancelled`` when its request may have reached the tool, ``not_sent`` when it
cannot have. The step's deadline (its own timeout or the run's, whichever comes first)
bounds everything, LLM calls and backoff waits included.

Before anything is sent, the re-send guard (:mod:`executors._resend`) compares the
prepared call with the step's earlier attempts: whichever layer produced the parameters,
a non-idempotent call that may already have been processed is not sent again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import ChainMap
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from executors._approvals import AwaitApproval, approval_reason
from executors._binding import bind
from executors._grounding import Evidence, refusal, ungrounded, verify
from executors._prepare import CapabilityCache, PreparedCall, PreparedCapability
from executors._resend import resend_blocked
from executors._send import key_for, send
from executors.recovery import (
    Decision,
    GiveUp,
    RecoveryHandler,
    StepState,
    ask_handlers,
    observe_attempt,
)
from orchestration._transport import CallTrace
from orchestration.errors import StoreError
from orchestration.plan import Step, ValidatedPlan
from orchestration.protocol import OUTCOME_UNKNOWN, ErrorCategory, ErrorSource, StepError
from orchestration.result import (
    Attempt,
    AttemptOutcome,
    PendingApproval,
    Provenance,
    StepResult,
    StepStatus,
)
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
        self._stopped: dict[str, StepResult] = {}  # steps their run's cancellation stopped
        # the run's outputs dict (filled in place as steps finish): read here once, not
        # through the model's private-attribute lookup at every bind
        # (with a session, the earlier runs' outputs behind them: ``run:N.step``)
        earlier = services.earlier_outputs
        self._outputs: Mapping[str, Any] = (ChainMap(run.outputs, earlier) if earlier
                                            else run.outputs)

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
        state.deadline = deadline
        with services.observer.step(self.run.run_id, step, state.capability) as observation:
            state.observation = observation
            try:
                async with services.clock.deadline(deadline):
                    output, error = await self._attempts(state, deadline)
            except TimeoutError:
                output, error = None, self._deadline_error(state, deadline)
            except AwaitApproval as paused:
                return self._paused(state, paused, wall_started, loop.time() - started)
            except asyncio.CancelledError:
                # the run's task was cancelled. On purpose (Orchestrator.acancel) the step
                # ends here — cancelled, or unknown if a side-effect call was in flight —
                # and the executor records it; on a shutdown it stays unfinished in the
                # store, so a resume runs it again (this process's run state still says
                # what happened to it)
                result = self._stopped_result(step, state, wall_started, loop.time() - started)
                self._stopped[step_id] = result
                if not services.cancellation.requested:
                    self.run.record_step(result)
                observation.finished(result)
                raise
            result = self._result(step, state, output, error, wall_started,
                                  loop.time() - started)
            observation.finished(result)
        return result

    def cancelled(self, step_id: str, reason: str) -> StepResult:
        """The result of a step stopped because the run was cancelled on purpose
        (``reason``): its finished attempts kept; ``unknown`` (``OUTCOME_UNKNOWN``, the
        request in its details) when its call with a side effect was in flight, since the
        tool may have processed it; ``cancelled`` otherwise."""
        result = self._stopped.get(step_id)
        if result is None:  # cancelled before it started
            step = self.plan.steps[step_id]
            result = StepResult(id=step.id, tool=step.tool, capability=step.capability,
                                status="cancelled", error=StepError(
                                    category=ErrorCategory.CANCELLED, code="RUN_CANCELLED",
                                    message="the run was cancelled before this step ran",
                                    source=ErrorSource.ENGINE, request_sent=False,
                                    step_id=step.id, tool=step.tool,
                                    capability=step.capability))
        assert result.error is not None
        return result.model_copy(update={"error": result.error.model_copy(update={
            "message": f"{result.error.message} ({reason})",
            "details": {**result.error.details, "cancelled": reason}})})

    def _stopped_result(self, step: Step, state: StepState, wall_started: float,
                        duration_s: float) -> StepResult:
        """A step whose run's task was cancelled while it ran."""
        last = state.last_attempt
        in_flight = last is not None and last.outcome == "cancelled"
        status: StepStatus = "cancelled"
        error = self._cancelled_error(state)
        store_failure = self.services.recorder.failure
        if store_failure is not None and not in_flight:
            # the run store failed (or another process took the run over): the run
            # stopped itself, and this step with it, before anything more was sent
            status = "failed"
            error = StepError(
                category=ErrorCategory.INTERNAL_ERROR, code="STORE_UNAVAILABLE",
                message=f"stopped after {len(state.attempts)} attempt(s), nothing more sent: "
                        f"{store_failure}",
                source=ErrorSource.ENGINE, retryable=False, request_sent=False)
        elif in_flight and not state.capability.is_idempotent:
            assert last is not None
            status = "unknown"
            error = StepError(
                category=ErrorCategory.INTERNAL_ERROR, code=OUTCOME_UNKNOWN,
                message="the run was cancelled while this step's call, which has a side "
                        "effect, was in flight; the tool may have processed it (the request "
                        "is in details.request)",
                source=ErrorSource.ENGINE, retryable=False, request_sent=True,
                details={"request": last.params})
        return StepResult(
            id=step.id, tool=step.tool, capability=step.capability, status=status,
            error=error.model_copy(update={"step_id": step.id, "tool": step.tool,
                                           "capability": step.capability}),
            attempts=state.attempts, started_at_s=wall_started, duration_s=duration_s)

    @staticmethod
    def _result(
        step: Step, state: StepState, output: Any, error: StepError | None,
        wall_started: float, duration_s: float,
    ) -> StepResult:
        return StepResult(
            id=step.id, tool=step.tool, capability=step.capability,
            status=_status(error), output=output,
            error=None if error is None else error.model_copy(update={
                "step_id": step.id, "tool": step.tool, "capability": step.capability}),
            attempts=state.attempts, started_at_s=wall_started, duration_s=duration_s,
        )

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
        prepared = self.capabilities.get(capability)
        settings = prepared.layer_settings(services.layers)
        policy = prepared.retry_policy(services.config)
        if step.retry:
            policy = policy.with_overrides(
                step.retry, source=f"step {step.id!r} ({capability.key}) retry overrides")
        return StepState(step=step, capability=capability, plan=self.plan, run=self.run,
                         services=services, settings=settings, retry_policy=policy,
                         prepared=prepared,
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
            note = self.run.approval_notes.pop(state.step.id, None)
            decision = Decision(params=approved, layer="approval",
                                note="approved by a person" + (f": {note}" if note else ""))
            attempt, output = await self._attempt(state, decision, deadline)
        elif resend is not None:
            # the process stopped while this call was in flight: send exactly it again,
            # with the key the tool already saw, so the tool can tell it is a repeat
            decision = Decision(params=resend.params, layer=resend.layer,  # type: ignore[arg-type]
                                note="resumed: re-sent with the same idempotency key")
            attempt, output = await self._attempt(state, decision, deadline,
                                                  key=resend.idempotency_key)
        else:
            bound = bind(state.step.params, self._outputs, self.plan.parsed)
            if isinstance(bound, StepError):
                decision = Decision(params=dict(state.step.params), layer="plan")
                state.params = decision.params
                attempt, output = self._record(state, decision, "unbound", bound), None
            else:
                attempt, output = await self._attempt(state, Decision(params=bound, layer="plan"),
                                                      deadline)
        cap = self.services.config.max_attempts_per_step
        previous: StepError | None = None  # the failure the current attempt answers
        while True:
            observe_attempt(self.handlers, state, attempt)
            if attempt.outcome == "succeeded":
                return output, None
            assert attempt.error is not None
            if attempt.error.code == "RESEND_BLOCKED" and previous is not None:
                # the re-send guard stopped it: the step fails with the failure that
                # made the call ambiguous, and why it was not sent again
                return None, _final_error(previous, GiveUp(attempt.error.message))
            if len(state.attempts) >= cap:
                return None, _final_error(attempt.error,
                                          GiveUp(f"reached max_attempts_per_step={cap}"))
            verdict = await ask_handlers(self.handlers, state, attempt.error)
            if not isinstance(verdict, Decision):
                return None, _final_error(attempt.error, verdict)
            previous = attempt.error
            attempt, output = await self._attempt(state, verdict, deadline)

    async def _attempt(
        self, state: StepState, decision: Decision, deadline: float, *, key: str | None = None
    ) -> tuple[Attempt, Any]:
        """One attempt with the decision's parameters: prepare, and send if they are valid,
        no person has to approve them first, and the re-send guard lets them go.

        A call with a side effect (a capability that is not idempotent) is recorded in the
        run store at the last moment before it can be sent (the transport's gate: once a
        connection is ready) and its outcome right after, so a process that stops in
        between leaves a marker that says the call may have happened, and one that stops
        before leaves none. An attempt cut
        by the deadline or by the run's cancellation is recorded before the cancellation
        goes on (its marker stays open when the request may have gone out).
        """
        loop = asyncio.get_running_loop()
        started = loop.time()
        trace = CallTrace()
        prepared: PreparedCall | None = None
        provenance: dict[str, Provenance] = {}
        side_effect = not state.capability.is_idempotent
        recorder = self.services.recorder
        marked: list[bool] = []  # the marker gate appends once the marker is committed
        resending = key is not None  # a resumed run's open call, sent again with its key
        try:
            if decision.delay_s > 0:
                await self.services.clock.sleep(decision.delay_s)
            prepared = self._prepare(state, decision)
            if decision.grounding is not None:
                provenance = self._ground(state, decision, prepared, self._compiled(state),
                                          len(state.attempts) + 1)
            if prepared.error is not None:
                assert state.observation is not None
                state.observation.rejected(prepared.error)
                return self._record(state, decision, "invalid", prepared.error, prepared,
                                    provenance=provenance), None
            grounding = decision.grounding
            if grounding is not None and grounding.enforce and ungrounded(provenance):
                # a value nobody can trace to the request or an upstream output is not sent:
                # a person decides (ORCH_UNGROUNDED_NEEDS_APPROVAL), or the step fails
                refused = refusal(provenance, decision.layer)
                if self.services.config.ungrounded_needs_approval:
                    raise AwaitApproval(prepared.params, refused.message)
                return self._record(state, decision, "not_sent", refused, prepared,
                                    provenance=provenance), None
            # a workflow step's own requires_approval asks before every call; it never
            # lifts the capability's (unconditional or a condition on the context)
            required = (True if state.step.requires_approval
                        else state.capability.requires_approval)
            reason = approval_reason(required, prepared.params,
                                     self.resume.approved.get(state.step.id), self.run.context)
            if reason is not None:
                raise AwaitApproval(prepared.params, reason)
            blocked = self._blocked(state, prepared)
            if blocked is not None:
                return self._record(state, decision, "not_sent", blocked, prepared,
                                    provenance=provenance), None
            number = len(state.attempts) + 1
            key = key or key_for(state, prepared.params)
            if side_effect:  # committed at the last moment before the request can leave
                trace.gate = self._marker_gate(CallMarker(
                    state.step.id, number, decision.layer, prepared.params, key, 0.0), marked,
                    repeat=resending)
            result = await send(state, prepared.params, layer=decision.layer, number=number,
                                deadline=deadline, key=key, trace=trace)
        except asyncio.CancelledError:
            sent = trace.dispatched
            self._record(state, decision, "cancelled" if sent else "not_sent",
                         self._interrupted_error(deadline, sent=sent), prepared,
                         latency_s=loop.time() - started, provenance=provenance)
            raise
        outcome: AttemptOutcome = "succeeded" if result.error is None else "failed"
        if (result.error is not None and result.error.source is ErrorSource.ENGINE
                and not result.error.request_sent):
            # a guard of the engine (a run budget, an open breaker) stopped the call; an
            # engine error about a call that did leave (a Temporal worker lost with it in
            # flight: WORKER_LOST, OUTCOME_UNKNOWN) is a failure of a sent call
            outcome = "not_sent"
        attempt = self._record(state, decision, outcome, result.error, prepared,
                               latency_s=result.latency_s, provenance=provenance)
        if marked:
            # the outcome of a call whose marker was committed; a failure to record it
            # stops the run (the recorder says so), and a resume reports it as unknown
            with contextlib.suppress(StoreError):
                await recorder.call_finished(state.step.id, attempt, result.data)
        return attempt, result.data

    def _marker_gate(
        self, marker: CallMarker, marked: list[bool], *, repeat: bool
    ) -> Callable[[], Awaitable[StepError | None]]:
        """The transport's gate for a call with a side effect: commit its marker (durably,
        fenced by the run's lease) right before the request can leave; when that fails
        the call is not sent."""
        recorder, clock = self.services.recorder, self.services.clock

        async def commit_marker() -> StepError | None:
            try:
                await recorder.call_started(replace(marker, started_at=clock.time()),
                                            repeat=repeat)
            except StoreError as exc:
                return StepError(
                    category=ErrorCategory.INTERNAL_ERROR, code="STORE_UNAVAILABLE",
                    message=f"not sent: the call has a side effect and the run store "
                            f"could not record it first ({exc})",
                    source=ErrorSource.ENGINE, request_sent=False)
            marked.append(True)
            return None

        return commit_marker

    def _prepare(self, state: StepState, decision: Decision) -> PreparedCall:
        """The prepare stage (layer 2, validation), with what it changed reported."""
        number = len(state.attempts) + 1
        prepared = self._compiled(state).prepare(
            decision.params, coerce=state.settings.type_coercion_enabled,
            max_depth=self.services.config.max_json_depth)
        observation = state.observation
        assert observation is not None
        if prepared.coercions:
            observation.report("type_coercion_applied", {
                "dagwright.attempt": number, "coercion.count": len(prepared.coercions),
                "coercion.paths": ",".join(c.path for c in prepared.coercions)})
        state.params = prepared.params
        return prepared

    @staticmethod
    def _compiled(state: StepState) -> PreparedCapability:
        """The step's capability with its compiled checks (looked up once, in _state)."""
        assert state.prepared is not None, "_state gives every step its compiled capability"
        return state.prepared

    @staticmethod
    def _blocked(state: StepState, prepared: PreparedCall) -> StepError | None:
        """The re-send guard's refusal of this call, as the not-sent attempt's error."""
        if not state.attempts:  # nothing sent before: nothing to send again
            return None
        reason = resend_blocked(state.capability, prepared.params, state.attempts)
        if reason is None:
            return None
        earlier = state.last_attempt.error if state.last_attempt else None
        return StepError(
            category=earlier.category if earlier is not None else ErrorCategory.SERVICE_ERROR,
            code="RESEND_BLOCKED", message=reason, source=ErrorSource.ENGINE,
            retryable=False, request_sent=False,
        )

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

    def _record(
        self,
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
        self.services.events.emit(
            "attempt_finished", step_id=state.step.id, attempt=attempt.number,
            layer=attempt.layer, outcome=attempt.outcome,
            error_code=error.code if error is not None else None)
        return attempt

    def _which_deadline(self, deadline: float) -> tuple[str, float]:
        config = self.services.config
        which = "run" if deadline == self.services.deadline else "step"
        return which, config.run_timeout_s if which == "run" else config.step_timeout_s

    def _deadline_error(self, state: StepState, deadline: float) -> StepError:
        """The step's final error when its deadline passed; ``request_sent`` says whether
        the attempt the deadline cut may have reached the tool."""
        which, limit = self._which_deadline(deadline)
        last = state.last_attempt
        cut_sent = last is not None and last.outcome == "cancelled"
        return StepError(
            category=ErrorCategory.TIMEOUT, code=f"{which.upper()}_DEADLINE_EXCEEDED",
            message=f"the {which} deadline ({limit:g}s) passed after {len(state.attempts)} "
                    "attempt(s)",
            source=ErrorSource.ENGINE, retryable=False, request_sent=cut_sent,
        )

    def _interrupted_error(self, deadline: float, *, sent: bool) -> StepError:
        """The error of an attempt cut short: by the deadline, or by the run's cancellation."""
        when = ("while its request was in flight (the tool may have acted on it)" if sent
                else "before its request was sent")
        # the timeout fires within the loop's clock resolution of the deadline
        if asyncio.get_running_loop().time() >= deadline - 0.001:
            which, limit = self._which_deadline(deadline)
            return StepError(
                category=ErrorCategory.TIMEOUT, code=f"{which.upper()}_DEADLINE_EXCEEDED",
                message=f"the {which} deadline ({limit:g}s) passed {when}",
                source=ErrorSource.ENGINE, retryable=False, request_sent=sent)
        return StepError(
            category=ErrorCategory.CANCELLED, code="RUN_CANCELLED",
            message=f"the run was cancelled {when}", source=ErrorSource.ENGINE,
            retryable=False, request_sent=sent)

    @staticmethod
    def _cancelled_error(state: StepState) -> StepError:
        """The final error of a step whose run was cancelled while it ran."""
        last = state.last_attempt
        sent = last is not None and last.outcome == "cancelled"
        return StepError(
            category=ErrorCategory.CANCELLED, code="RUN_CANCELLED",
            message=f"the run was cancelled after {len(state.attempts)} attempt(s)",
            source=ErrorSource.ENGINE, retryable=False, request_sent=sent)


def _tool_error_text(error: StepError | None) -> str:
    """The text of an error the tool itself sent (what a ``tool_hint`` may quote); empty
    for the engine's own errors (validation, binding), which only echo the parameters."""
    if error is None or error.source not in (ErrorSource.ENVELOPE, ErrorSource.HTTP_STATUS,
                                             ErrorSource.RAISED):
        return ""
    return f"{error.message}\n{json.dumps(error.details, ensure_ascii=False, default=str)}"


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
