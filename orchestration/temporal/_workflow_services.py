"""The services a run gets inside its Temporal workflow: the engine's side effects become
activities, its time becomes workflow time.

The engine (:class:`~orchestration._engine.RunEngine`) is the same code as on the local
backend; only its :class:`~orchestration.services.RunServices` differ:

===============  ================================================================
service          inside a workflow
===============  ================================================================
transport        :class:`ActivityTransport`: each call is a ``dagwright.call_tool``
                 activity; the worker makes the real call and returns it classified
LLM client       :class:`ActivityLLM`: each call is a ``dagwright.llm_complete``
                 activity (the gateway's budget and retries stay in the workflow)
clock            :class:`WorkflowClock`: waits are durable timers, timestamps are
                 the workflow's (the same on every replay)
observer         :class:`WorkflowObserver`: records nothing (a replay would record it
                 all again); the activities are observed on the workers instead
recorder         no store: the workflow's history is the run's record
events           kept in the workflow, read through its ``events`` query
===============  ================================================================

Activities are never retried by Temporal (``maximum_attempts=1``): whether to send a call
again is the engine's decision — the resilience layer under the step's retry policy, the
LLM gateway under its own — made in workflow code, so every attempt is in the step's
history exactly as on the local backend. A call whose worker was lost (no heartbeat
within ``ORCH_TEMPORAL_HEARTBEAT_TIMEOUT_S``) comes back as a classified error: a
transport fault the resilience layer may repeat when the capability is idempotent or
sends an idempotency key, and ``OUTCOME_UNKNOWN`` when it has a side effect and no key —
never a second send — unless its worker recorded the tool's answer in the run store
(a late answer: the ``dagwright.reconcile_call`` activity reads it,
:mod:`orchestration.temporal._call_ledger`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from contextvars import ContextVar, Token
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy as TemporalRetryPolicy
from temporalio.exceptions import ActivityError, TimeoutError, TimeoutType

from orchestration._budget import RunBudget
from orchestration._events import EventSink
from orchestration._transport import CallResult, CallTrace, ToolTransport
from orchestration.capability import Capability
from orchestration.catalog import Catalog
from orchestration.clock import Clock
from orchestration.config import OrchestratorConfig
from orchestration.errors import ConfigError, LLMError, LLMErrorKind
from orchestration.events import RunEvent
from orchestration.layer_settings import LayerSettings
from orchestration.llm._gateway import LLMGateway
from orchestration.llm.base import LLMRequest, LLMResponse
from orchestration.plan import Step
from orchestration.protocol import OUTCOME_UNKNOWN, ErrorCategory, ErrorSource, StepError
from orchestration.retry_policy import RetryPolicy
from orchestration.services import CallInspector, RunServices
from orchestration.sessions import SessionHistory
from orchestration.state import RunState
from orchestration.store._recorder import RunRecorder
from orchestration.telemetry._observer import (
    CallObservation,
    NullCallObservation,
    NullObserver,
    NullStepObservation,
    StepObservation,
)
from orchestration.temporal._call_ledger import CallSlot, Settled, is_unknown_if_lost
from orchestration.temporal._payloads import (
    CALL_TOOL,
    LLM_COMPLETE,
    RECONCILE_CALL,
    call_result_from_payload,
    llm_error_from_payload,
    llm_request_to_payload,
    llm_response_from_payload,
)

__all__ = [
    "NO_TEMPORAL_RETRY",
    "ActivityLLM",
    "ActivityTransport",
    "WorkflowClock",
    "WorkflowObserver",
    "lost_call_error",
    "run_services",
]

NO_TEMPORAL_RETRY = TemporalRetryPolicy(maximum_attempts=1)
"""Every call activity runs at most once per decision: the engine decides on repeats."""

RECONCILING = "dagwright-reconcile-lost-calls"
"""The patch id of reconciling lost side-effect calls with the run store: a history
recorded before it replays without the ``dagwright.reconcile_call`` activity."""
_RECONCILE_RETRY = TemporalRetryPolicy(maximum_attempts=3, initial_interval=timedelta(seconds=1))
"""Reading the run store is harmless to repeat; a store that stays down leaves the call
``OUTCOME_UNKNOWN``."""

CALL_GRACE_S = 10.0
"""Time an activity gets beyond its call's own timeout (scheduling, the worker's work)."""
LLM_GRACE_S = 30.0


@dataclass(frozen=True, slots=True)
class CallLabel:
    """Which step and attempt a call belongs to (the transport's signature does not say)."""

    run_id: str
    step_id: str
    attempt: int
    layer: str


_CURRENT_CALL: ContextVar[CallLabel | None] = ContextVar("dagwright_temporal_call", default=None)


class WorkflowClock(Clock):
    """Workflow time: deterministic, the same on every replay; sleeps are durable timers."""

    def now(self) -> float:
        return workflow.time()

    def time(self) -> float:
        return workflow.now().timestamp()

    async def sleep(self, seconds: float) -> None:
        if seconds > 0:
            await workflow.sleep(seconds)

    def deadline(self, when: float) -> AbstractAsyncContextManager[object]:
        # a workflow's timers are commands in its history: each scope keeps its own
        # durable timer, as the run workflow always had
        return asyncio.timeout_at(when)


class WorkflowObserver(NullObserver):
    """Records nothing, but labels each tool call with its step and attempt, which the
    activity carries to the worker (for its spans and Temporal's activity summary)."""

    def step(self, run_id: str, step: Step, capability: Capability) -> StepObservation:
        return _LabellingStep(run_id, step, capability)


class _LabellingStep(NullStepObservation):
    def call(self, number: int, layer: str, headers: dict[str, str]) -> CallObservation:
        return _LabellingCall(CallLabel(self.run_id, self.step.id, number, layer))


class _LabellingCall(NullCallObservation):
    """Sets the call's label while the call runs: each step runs in a task of its own,
    whose context the variable lives in."""

    def __init__(self, label: CallLabel) -> None:
        super().__init__()
        self._label = label
        self._token: Token[CallLabel | None] | None = None

    def __enter__(self) -> CallObservation:
        self._token = _CURRENT_CALL.set(self._label)
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if self._token is not None:
            _CURRENT_CALL.reset(self._token)


class ActivityTransport(ToolTransport):
    """Sends each call as a ``dagwright.call_tool`` activity (never an HTTP client here)."""

    def __init__(self, config: OrchestratorConfig) -> None:
        super().__init__()
        self.config = config

    async def call(
        self,
        capability: Capability,
        params: dict[str, Any],
        *,
        timeout_s: float,
        headers: dict[str, str] | None = None,
        trace: CallTrace | None = None,
        credentials: dict[str, str] | None = None,
    ) -> CallResult:
        if credentials:  # the facade refuses them on Temporal: never into the history
            raise ConfigError("per-run credentials cannot reach a Temporal activity")
        label = _CURRENT_CALL.get()
        if trace is not None:
            trace.dispatched = True  # once scheduled, a worker may make the call
        payload = {"tool": capability.tool, "capability": capability.name, "params": params,
                   "timeout_s": timeout_s, "headers": dict(headers or {}),
                   "run_id": label.run_id if label else None,
                   "step_id": label.step_id if label else None,
                   "attempt": label.attempt if label else None,
                   "layer": label.layer if label else None}
        summary = capability.key if label is None else f"{label.step_id}#{label.attempt} {capability.key}"
        try:
            answer = await workflow.execute_activity(
                CALL_TOOL, payload,
                start_to_close_timeout=timedelta(seconds=timeout_s + CALL_GRACE_S),
                heartbeat_timeout=timedelta(seconds=self.config.temporal_heartbeat_timeout_s),
                retry_policy=NO_TEMPORAL_RETRY, summary=summary)
        except ActivityError as exc:
            settled = None
            if is_unknown_if_lost(capability) and workflow.patched(RECONCILING):
                settled = await _reconcile(exc)
                if settled is not None and settled.answer is not None:
                    return call_result_from_payload(settled.answer)  # a late answer
            return CallResult(error=lost_call_error(capability, params, exc, label, settled))
        return call_result_from_payload(answer)


async def _reconcile(lost: ActivityError) -> Settled | None:
    """Fence the lost call in the run store and read what its worker recorded there
    (None: the store could not be read, or the worker has none)."""
    info = workflow.info()
    slot = CallSlot(info.workflow_id, info.run_id, lost.activity_id)
    try:
        settled = await workflow.execute_activity(
            RECONCILE_CALL, slot.to_payload(), start_to_close_timeout=timedelta(seconds=30),
            retry_policy=_RECONCILE_RETRY, summary=f"reconcile call {lost.activity_id}")
    except ActivityError:
        return None
    return Settled.from_payload(settled) if settled is not None else None


def _how_lost(exc: ActivityError) -> tuple[str, bool]:
    """What became of the activity, and whether its worker was lost (versus failed)."""
    cause = exc.cause
    if isinstance(cause, TimeoutError):
        kind = cause.type
        if kind is TimeoutType.HEARTBEAT:
            return "its worker sent no heartbeat in time: the worker was lost", True
        if kind is TimeoutType.START_TO_CLOSE:
            return "it did not finish within its start-to-close timeout", True
        name = kind.name if kind is not None else "unknown"
        return f"it timed out ({name.lower()})", True
    return f"the activity failed: {cause or exc}", False


def lost_call_error(capability: Capability, params: dict[str, Any], exc: ActivityError,
                    label: CallLabel | None, settled: Settled | None = None) -> StepError:
    """The classified error of a call whose activity did not come back with an answer.

    The request may have left before the worker was lost. A capability that is
    idempotent, or sends an idempotency key, may be sent again: that is a transport fault
    for the resilience layer (which repeats it under the step's retry policy, with the
    same key). One with a side effect and no key must not be: ``OUTCOME_UNKNOWN``, the
    same verdict a local resume gives a call that was in flight when its process died
    (``settled``: what the run store knew of it — no answer).
    """
    how, lost = _how_lost(exc)
    details: dict[str, Any] = {"request": params, "activity": how}
    if label is not None:
        details.update(attempt=label.attempt, layer=label.layer)
    if settled is not None:
        details["run_store"] = (
            f"claimed by worker {settled.claimed_by}, which recorded no answer"
            if settled.claimed_by is not None else
            "no worker had claimed the call; it is fenced now, so no worker sharing the "
            "run store will send it")
    if is_unknown_if_lost(capability):
        return StepError(
            category=ErrorCategory.INTERNAL_ERROR, code=OUTCOME_UNKNOWN,
            message=f"the call's Temporal activity ended without an answer ({how}); the tool "
                    "may have processed the request, and the capability declares no "
                    "idempotency key, so it is not sent again. Check with the tool whether it "
                    "happened (the request is in details.request).",
            source=ErrorSource.ENGINE, retryable=False, request_sent=True, details=details)
    if not lost:
        return StepError(category=ErrorCategory.INTERNAL_ERROR, code="WORKER_ERROR",
                         message=f"the call's Temporal activity failed: {how}",
                         source=ErrorSource.ENGINE, retryable=False, request_sent=True,
                         details=details)
    safe = "idempotent" if capability.is_idempotent else "sent with an idempotency key"
    return StepError(
        category=ErrorCategory.CONNECTION_ERROR, code="WORKER_LOST",
        message=f"the call's Temporal activity ended without an answer ({how}); the "
                f"capability is {safe}, so it may be sent again",
        source=ErrorSource.TRANSPORT, retryable=True, request_sent=True, details=details)


class ActivityLLM:
    """An :class:`~orchestration.llm.base.LLMClient` whose every call is a
    ``dagwright.llm_complete`` activity on a worker (which holds the real client)."""

    provider = "temporal"
    model: str | None = None

    def __init__(self, config: OrchestratorConfig) -> None:
        self.config = config

    async def complete(self, request: LLMRequest) -> LLMResponse:
        try:
            answer = await workflow.execute_activity(
                LLM_COMPLETE, llm_request_to_payload(request),
                start_to_close_timeout=timedelta(seconds=self.config.llm_timeout_s + LLM_GRACE_S),
                heartbeat_timeout=timedelta(seconds=self.config.temporal_heartbeat_timeout_s),
                retry_policy=NO_TEMPORAL_RETRY, summary=f"llm {request.purpose}")
        except ActivityError as exc:
            how, _ = _how_lost(exc)
            # retryable: the gateway tries again under its policy, within the run's budget
            raise LLMError(LLMErrorKind.CONNECTION, f"the LLM call's activity ended without "
                           f"an answer ({how})", provider=self.provider) from exc
        if answer.get("error") is not None:
            raise llm_error_from_payload(answer["error"])
        return llm_response_from_payload(answer["response"])

    async def aclose(self) -> None:
        return None


def run_services(
    run: RunState,
    config: OrchestratorConfig,
    catalog: Catalog,
    on_event: Callable[[RunEvent], None],
    calls: CallInspector | None = None,
    session: SessionHistory | None = None,
) -> RunServices:
    """The services of one stretch of a run inside its workflow (a run that waited for a
    person gets new ones when it goes on, with a new deadline, as a local resume does).
    Never per-run credentials: they cannot cross the workflow's history."""
    clock = WorkflowClock()
    observer = WorkflowObserver()
    recorder = RunRecorder(None, run.run_id, lease_s=1.0)
    events = EventSink(run, None, clock)
    events.subscribe(on_event)
    budget = RunBudget(run, config, observer)
    return RunServices(
        catalog=catalog, config=config, layers=LayerSettings.from_config(config),
        llm=LLMGateway(ActivityLLM(config), observer=observer, usage=run.usage,
                       run_id=run.run_id, budget=budget,
                       policy=RetryPolicy.for_llm(config), clock=clock),
        transport=ActivityTransport(config), observer=observer, recorder=recorder,
        events=events, clock=clock,
        deadline=asyncio.get_running_loop().time() + config.run_timeout_s,
        budget=budget, calls=calls, session=session,
        # the answer comes back whole from one activity: deltas cannot leave the workflow
        stream_answer=False,
    )
