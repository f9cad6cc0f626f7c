"""The activities a worker hosts: where a Temporal run touches the world.

* ``dagwright.call_tool`` — one attempt of one step: the real call through the worker's
  :class:`~orchestration._transport.ToolTransport` (HTTP, Python, MCP, OpenAPI), returned
  classified (data, or a :class:`~orchestration.protocol.StepError`). It heartbeats while
  the call is in flight, so a worker that dies is noticed within the heartbeat timeout.
* ``dagwright.llm_complete`` — one LLM call with the worker's client (planning, layers 3
  and 4, synthesis); a failure comes back classified as the :class:`LLMError` it was.
* ``dagwright.record_run`` — a settled run (paused or ended) written to the workers' run
  store, so ``get_run``/``list_runs``/``runs show`` read Temporal runs like local ones.
* ``dagwright.reconcile_call`` — what became of a side-effect call whose activity ended
  without an answer, from the run store (:mod:`orchestration.temporal._call_ledger`): the
  call is fenced there, and an answer the worker recorded is the call's outcome.

Neither call activity raises for a failed call: failures are data the engine decides on
in the workflow. An activity fails only when something is wrong with the worker itself.
Each call is observed here, on the worker that made it (spans, metrics, the LLM debug
store), because the workflow records nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import activity
from temporalio.api.workflowservice.v1 import RecordActivityTaskHeartbeatRequest
from temporalio.service import RPCError, RPCStatusCode

from orchestration._transport import CallResult, CallTrace, ToolTransport
from orchestration.catalog import Catalog
from orchestration.circuit import CircuitBreakers
from orchestration.config import OrchestratorConfig
from orchestration.debug_store import LLMDebugStore
from orchestration.errors import CatalogError, DagwrightError, LLMError, LLMErrorKind
from orchestration.events import RunEvent
from orchestration.llm.base import LLMClient
from orchestration.plan import Step
from orchestration.protocol import ErrorCategory, ErrorSource, StepError
from orchestration.state import RunState
from orchestration.store import RunStore
from orchestration.store._base import SaveEvent, SaveStep
from orchestration.store._recorder import snapshot
from orchestration.telemetry._observer import Observer
from orchestration.temporal._call_ledger import CallLedger, CallSlot, is_unknown_if_lost
from orchestration.temporal._payloads import (
    CALL_TOOL,
    LLM_COMPLETE,
    RECONCILE_CALL,
    RECORD_RUN,
    call_result_to_payload,
    llm_error_to_payload,
    llm_request_from_payload,
    llm_response_to_payload,
)

__all__ = ["RunActivities", "heartbeating"]

T = TypeVar("T")

log = logging.getLogger("dagwright.temporal")

_LEASE_FOREVER_S = 10 * 365 * 86400.0
"""A paused Temporal run holds its store lease while Temporal holds the run: no local
``resume`` may take it over and run it a second time."""


async def heartbeating(work: Awaitable[T]) -> T:
    """Await ``work`` while telling Temporal this worker is alive (a third of the
    heartbeat timeout apart); cancelling the activity cancels the work."""
    task = asyncio.ensure_future(work)
    timeout = activity.info().heartbeat_timeout
    interval = max(0.05, timeout.total_seconds() / 3) if timeout else 10.0
    try:
        while True:
            activity.heartbeat()
            done, _ = await asyncio.wait({task}, timeout=interval)
            if done:
                return task.result()
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


class RunActivities:
    """The activities of one worker, with what they use: the catalog, the LLM client
    (made on first use, so a worker of tool-only runs needs no LLM settings), the
    transport, the observer and the run store."""

    def __init__(
        self,
        catalog: Catalog,
        config: OrchestratorConfig,
        observer: Observer,
        *,
        llm: LLMClient | None = None,
        llm_factory: Callable[[], LLMClient] | None = None,
        store: RunStore | None = None,
        debug_store: LLMDebugStore | None = None,
        owner: str | None = None,
    ) -> None:
        self.catalog = catalog
        self.config = config
        self.observer = observer
        self._llm = llm
        self._llm_factory = llm_factory
        self.store = store
        self.debug_store = debug_store
        self.owner = owner or f"temporal:{socket.gethostname()}:{os.getpid()}"
        self._transport: ToolTransport | None = None
        self._store_opened = False

    # --- tool calls ------------------------------------------------------------------------
    @activity.defn(name=CALL_TOOL)
    async def call_tool(self, request: dict[str, Any]) -> dict[str, Any]:
        """One attempt of a step; the classified outcome as JSON."""
        try:
            capability = self.catalog.get(request["tool"], request["capability"])
        except CatalogError as exc:
            return call_result_to_payload(CallResult(error=StepError(
                category=ErrorCategory.INTERNAL_ERROR, code="CATALOG_MISMATCH",
                message=f"worker {self.owner}: {exc}; every worker "
                        "of a task queue must load the same catalog",
                source=ErrorSource.ENGINE, retryable=False, request_sent=False)))
        if self._transport is None:
            # the worker's circuit breakers: shared by every run this worker process
            # calls tools for (each worker keeps its own)
            self._transport = ToolTransport.for_config(self.config, CircuitBreakers(
                self.config, listener=self.observer.circuit_changed))
        transport, params = self._transport, request["params"]
        headers: dict[str, str] = dict(request.get("headers") or {})
        run_id = request.get("run_id") or activity.info().workflow_id or ""
        step = Step(id=request.get("step_id") or "call", tool=capability.tool,
                    capability=capability.name, params=params)
        # a call not safe to repeat leaves only once this attempt has proved it is still
        # the live one (a worker paused past its heartbeat timeout must not send late);
        # one that would be unknown if lost is claimed in the run store too, and its
        # answer kept there: the run reads it when Temporal could not deliver it
        slot = self._slot(run_id) if is_unknown_if_lost(capability) else None
        trace = None if capability.is_idempotent else CallTrace(
            gate=lambda: self._may_send(slot))
        with (self.observer.step(run_id, step, capability) as observation,
              observation.call(request.get("attempt") or 1, request.get("layer") or "plan",
                               headers) as call):
            result = await heartbeating(transport.call(
                capability, params, timeout_s=float(request["timeout_s"]), headers=headers,
                trace=trace))
            # the worker's catalog credentials echoed back never enter the history
            result = result.with_echoes_masked(self.observer.redactor)
            call.answered(result)
        answer = call_result_to_payload(result)
        if slot is not None and trace is not None and trace.dispatched:
            await self._keep_answer(slot, answer)
        return answer

    def _slot(self, run_id: str) -> CallSlot | None:
        info = activity.info()
        if self.store is None or not info.workflow_run_id:
            return None
        return CallSlot(run_id, info.workflow_run_id, info.activity_id)

    async def _may_send(self, slot: CallSlot | None) -> StepError | None:
        """The fence of a side effect on a worker, awaited right before its first byte
        leaves: the attempt proves to Temporal that it is the live one, then (a call that
        would be unknown if lost) claims it in the run store, where the run fences an
        attempt it has given up on. Refused: not sent."""
        why = await self._why_not_live()
        if why is None and slot is not None:
            why = await self._why_not_claimed(slot)
        if why is None:
            return None
        info = activity.info()
        log.warning("worker %s: %s attempt %s of run %s not sent: %s", self.owner,
                    info.activity_type, info.attempt, info.workflow_id, why)
        return StepError(
            category=ErrorCategory.CONNECTION_ERROR, code="ATTEMPT_FENCED",
            message=f"worker {self.owner} did not send the call: it could not prove its "
                    f"Temporal activity was still the live attempt ({why})",
            source=ErrorSource.ENGINE, retryable=True, request_sent=False)

    async def _why_not_live(self) -> str | None:
        """Why this attempt is not provably the live one (None: it is): a heartbeat sent
        now and acknowledged by the server proves Temporal still waits for it (and will
        for a full heartbeat timeout). An attempt the server has given up on — its worker
        was paused or cut off past the heartbeat timeout, and the run has gone on — is
        refused; so is one whose liveness cannot be proved (the server unreachable)."""
        info = activity.info()
        why: str | None = None
        if activity.is_cancelled():
            why = "the activity was cancelled"
        else:
            timeout = info.heartbeat_timeout.total_seconds() if info.heartbeat_timeout else 10.0
            try:
                answer = await activity.client().workflow_service.record_activity_task_heartbeat(
                    RecordActivityTaskHeartbeatRequest(
                        task_token=info.task_token, namespace=info.namespace,
                        identity=self.owner),
                    retry=False, timeout=timedelta(seconds=max(0.5, timeout / 2)))
            except RPCError as exc:
                why = (f"the Temporal server no longer holds this attempt ({exc.status.name}: "
                       f"{exc.message})" if exc.status is RPCStatusCode.NOT_FOUND else
                       f"the Temporal server did not confirm it ({exc.status.name}: "
                       f"{exc.message})")
            except Exception as exc:  # a connection failure: liveness cannot be proved
                why = f"the Temporal server did not confirm it ({exc})"
            else:
                if answer.cancel_requested:
                    why = "the run cancelled the activity"
        return why

    async def _why_not_claimed(self, slot: CallSlot) -> str | None:
        """Claim the attempt in the run store (None: claimed, it may leave). A run that
        gave up on it has fenced it there first; a store that cannot take the claim
        stops the call too, as a local run's call marker does."""
        try:
            held = await CallLedger(await self._opened_store()).claim(slot, self.owner)
        except Exception as exc:  # a StoreError: nothing may leave unrecorded
            return f"the run store could not record its claim ({exc})"
        return None if held is None else f"the run fenced this attempt in the run store: {held}"

    async def _keep_answer(self, slot: CallSlot, answer: dict[str, Any]) -> None:
        """The tool answered: keep the answer where the run can read it should Temporal
        no longer hold this attempt (the activity's own result would then be dropped)."""
        try:
            await CallLedger(await self._opened_store()).record(slot, answer)
        except Exception as exc:  # the answer still goes to Temporal
            log.warning("worker %s: the answer to run %s's call (activity %s) could not be "
                        "kept in the run store: %s", self.owner, slot.run_id,
                        slot.activity_id, exc)

    @activity.defn(name=RECONCILE_CALL)
    async def reconcile_call(self, payload: dict[str, Any]) -> dict[str, Any] | None:
        """What became of a side-effect call whose activity ended without an answer:
        fenced in the run store now, with the answer its worker recorded, if any (None:
        this worker has no run store)."""
        if self.store is None:
            return None
        slot = CallSlot.from_payload(payload)
        settled = await CallLedger(await self._opened_store()).settle(slot)
        if settled.answer is not None:
            log.warning("run %s: the answer to a call (activity %s) reached worker %s after "
                        "Temporal had given up on it; the run takes it from the run store",
                        slot.run_id, slot.activity_id, settled.claimed_by)
        return settled.to_payload()

    # --- LLM calls ---------------------------------------------------------------------------
    def _client(self) -> LLMClient:
        if self._llm is None:
            if self._llm_factory is None:
                raise DagwrightError("this worker was started without an LLM client")
            self._llm = self._llm_factory()
        return self._llm

    @activity.defn(name=LLM_COMPLETE)
    async def llm_complete(self, payload: dict[str, Any]) -> dict[str, Any]:
        """One LLM call; ``{"response": ...}`` or ``{"error": ...}`` (the classified
        :class:`LLMError`, as the workflow's gateway decides on it)."""
        request = llm_request_from_payload(payload)
        try:
            client = self._client()
        except DagwrightError as exc:  # the worker's LLM settings are incomplete
            return {"error": llm_error_to_payload(LLMError(
                LLMErrorKind.OTHER, f"worker {self.owner} has no "
                f"usable LLM client: {exc}"))}
        provider = str(getattr(client, "provider", "unknown"))
        model = getattr(client, "model", None) or "unknown"
        recorder = self.debug_store.recorder_for(self.observer.redactor) if self.debug_store else None
        loop = asyncio.get_running_loop()
        started = loop.time()
        with self.observer.llm_call(request, run_id=request.run_id or "", provider=provider,
                                    model=model) as call:
            try:
                response = await heartbeating(client.complete(request))
            except LLMError as exc:
                call.failed(exc)
                error = exc
            except Exception as exc:  # a client bug comes back classified, as the gateway would
                call.failed(exc)
                error = LLMError(LLMErrorKind.OTHER, f"LLM client raised {exc!r}")
            else:
                call.succeeded(response)
                if recorder is not None:
                    recorder(request, response, None, loop.time() - started)
                return {"response": llm_response_to_payload(response)}
        if recorder is not None:
            recorder(request, None, error, loop.time() - started)
        return {"error": llm_error_to_payload(error)}

    # --- the run store -------------------------------------------------------------------------
    @activity.defn(name=RECORD_RUN)
    async def record_run(self, payload: dict[str, Any]) -> None:
        """Write a paused or finished run (and its new events) to the workers' store."""
        if self.store is None:
            return
        store = await self._opened_store()
        state = RunState.model_validate(payload["state"])
        record = snapshot(state)
        await store.create_run(record, owner=self.owner, lease_s=_LEASE_FOREVER_S)
        await store.write([
            record, *(SaveStep(state.run_id, step) for step in state.steps.values()),
            *(SaveEvent.of(RunEvent.model_validate(e)) for e in payload["events"])])
        if state.status not in ("running", "awaiting_approval"):
            await store.release(state.run_id, owner=self.owner)

    async def _opened_store(self) -> RunStore:
        if self.store is None:
            raise DagwrightError("this worker has no run store")
        if not self._store_opened:
            await self.store.open()  # opening an open store is a no-op
            self._store_opened = True
        return self.store

    async def aclose(self) -> None:
        """Close the transport's pool, the LLM client and the store."""
        if self._transport is not None:
            await self._transport.aclose()
            self._transport = None
        if self._llm is not None:
            await self._llm.aclose()
        if self.store is not None and self._store_opened:
            await self.store.close()
            self._store_opened = False

    def activities(self) -> list[Callable[..., Any]]:
        return [self.call_tool, self.llm_complete, self.record_run, self.reconcile_call]
