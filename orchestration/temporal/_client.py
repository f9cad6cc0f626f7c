"""The Orchestrator's Temporal backend (``ORCH_BACKEND=temporal``): start, attach to,
decide on and read runs that execute as workflows on ``dagwright worker`` processes.

The caller sees what the local backend gives: ``run``/``resume`` return the
:class:`~orchestration.result.RunResult` once the run has ended or paused for a person,
``on_event`` receives its events in order, a finished run id returns its result without
running anything, and a decision that does not fit raises
:class:`~orchestration.errors.ApprovalError` and changes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import uuid
from datetime import timedelta
from typing import Any

from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from orchestration._events import EventCallback
from orchestration.config import OrchestratorConfig
from orchestration.errors import ApprovalError, DagwrightError, RunNotFound
from orchestration.events import RunEvent
from orchestration.plan import Plan
from orchestration.result import Approval, RunResult
from orchestration.state import RunState
from orchestration.store import RunStore
from orchestration.temporal._payload_store import with_payload_store
from orchestration.temporal._payloads import WORKFLOW, config_to_payload
from orchestration.temporal._worker import connect

__all__ = ["TemporalRuns"]

log = logging.getLogger("dagwright.temporal")


class TemporalRuns:
    """Runs on Temporal, as one :class:`~orchestration.orchestrator.Orchestrator` sees
    them. One Temporal client per event loop (its connection belongs to the loop)."""

    def __init__(self, config: OrchestratorConfig, *, store: RunStore | None = None) -> None:
        self.config = config
        self.store = store
        """The run store the workers record runs in and keep large payloads in."""
        self._clients: dict[int, Client] = {}

    async def client(self) -> Client:
        key = id(asyncio.get_running_loop())
        client = self._clients.get(key)
        if client is None:
            client = await connect(self.config)
            if self.store is not None:
                client = with_payload_store(client, self.store,
                                            self.config.temporal_payload_offload_bytes)
            self._clients[key] = client
        return client

    def forget_loop(self) -> None:
        """The current event loop is closing: drop its client."""
        with contextlib.suppress(RuntimeError):
            self._clients.pop(id(asyncio.get_running_loop()), None)

    # --- running ------------------------------------------------------------------------------
    async def run(self, query: str, *, plan: Plan | dict[str, Any] | None, run_id: str | None,
                  on_event: EventCallback | None) -> RunResult:
        """Start the run's workflow (its id is the run id), or attach to the run of that
        id; the result once it has ended or paused."""
        client = await self.client()
        run_id = run_id or uuid.uuid4().hex
        plan_payload = (plan.model_dump(mode="json", exclude_none=True) if isinstance(plan, Plan)
                        else plan)
        request = {"query": query, "plan": plan_payload, "config": config_to_payload(self.config)}
        try:
            handle: WorkflowHandle[Any, Any] = await client.start_workflow(
                WORKFLOW, request, id=run_id, task_queue=self.config.temporal_task_queue,
                task_timeout=timedelta(seconds=self.config.temporal_workflow_task_timeout_s),
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
                static_summary=query[:200])
        except WorkflowAlreadyStartedError:
            handle = client.get_workflow_handle(run_id)
            existing = await self._query_run(handle)
            if existing["state"]["query"] != query:
                raise DagwrightError(
                    f"run {run_id!r} already exists for another query "
                    f"({existing['state']['query'][:200]!r}); choose another run_id, or resume it"
                ) from None
            if existing["state"]["status"] not in ("running",):
                return RunState.model_validate(existing["state"]).to_result()
            return await self._follow(handle, existing["settled"], on_event, 0)
        return await self._follow(handle, 0, on_event, 0)

    async def resume(self, run_id: str, *, approvals: dict[str, Approval] | None,
                     on_event: EventCallback | None) -> RunResult:
        """Decide on a paused run (the ``decide`` update) and follow it to its next
        settle; without decisions, the run as it is (a running one: once it settles)."""
        client = await self.client()
        handle = client.get_workflow_handle(run_id)
        status = await self._status(handle)
        if status is not WorkflowExecutionStatus.RUNNING:
            state = await self._result(handle)
            if approvals:
                raise ApprovalError(f"run {run_id!r} is not waiting for approval (it is "
                                    f"{state.status}); there is nothing to decide")
            return state.to_result()
        if not approvals:
            current = await self._query_run(handle)
            state = RunState.model_validate(current["state"])
            if state.status == "awaiting_approval":
                return state.to_result()  # nothing decided: it keeps waiting
            return await self._follow(handle, current["settled"], on_event, state.event_seq)
        decisions = {step_id: a.model_dump(mode="json") for step_id, a in approvals.items()}
        try:
            ack = await handle.execute_update("decide", decisions)
        except WorkflowUpdateFailedError as exc:
            cause = exc.cause
            if isinstance(cause, ApplicationError) and cause.type == "ApprovalError":
                raise ApprovalError(cause.message) from None
            raise DagwrightError(f"run {run_id!r}: the decision failed: {cause}") from exc
        return await self._follow(handle, ack["settled"], on_event, ack["event_seq"])

    # --- reading --------------------------------------------------------------------------------
    async def get_run(self, run_id: str) -> RunResult | None:
        """The run as its workflow has it now (None: Temporal has no run of that id)."""
        handle = (await self.client()).get_workflow_handle(run_id)
        try:
            current = await self._query_run(handle)
        except RunNotFound:
            return None
        return RunState.model_validate(current["state"]).to_result()

    async def get_events(self, run_id: str, *, after: int) -> list[RunEvent] | None:
        """The run's events with ``seq > after`` (None: Temporal has no run of that id)."""
        handle = (await self.client()).get_workflow_handle(run_id)
        try:
            events = await handle.query("events", after)
        except RPCError as exc:
            if exc.status is RPCStatusCode.NOT_FOUND:
                return None
            raise
        return [RunEvent.model_validate(e) for e in events]

    # --- following a run -----------------------------------------------------------------------
    async def _follow(self, handle: WorkflowHandle[Any, Any], after: int,
                      on_event: EventCallback | None, seq: int) -> RunResult:
        """Wait until the run settles for the ``after+1``-th time (pauses or ends), handing
        its events past ``seq`` to ``on_event`` as they come; the run's result."""
        deliver = _Delivery(on_event) if on_event is not None else None
        waiter = asyncio.ensure_future(self._settled(handle, after))
        try:
            while deliver is not None and not waiter.done():
                seq = await deliver.more(handle, seq)
                await asyncio.wait({waiter}, timeout=self.config.temporal_event_poll_s)
            state = await waiter
        finally:
            if not waiter.done():
                waiter.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await waiter
        if deliver is not None:
            await deliver.more(handle, seq)
        return state.to_result()

    async def _settled(self, handle: WorkflowHandle[Any, Any], after: int) -> RunState:
        """The run once it has settled more than ``after`` times: the ``settled`` update,
        or the workflow's result when it ended before the update could reach it."""
        result = asyncio.ensure_future(self._result(handle))
        update = asyncio.ensure_future(handle.execute_update("settled", after))
        try:
            done, _ = await asyncio.wait({result, update}, return_when=asyncio.FIRST_COMPLETED)
            if update in done and update.exception() is None:
                return RunState.model_validate(update.result()["state"])
            return await result  # the run ended first (the update found it closed)
        finally:
            for task in (result, update):
                if not task.done():
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task

    async def _result(self, handle: WorkflowHandle[Any, Any]) -> RunState:
        try:
            return RunState.model_validate(await handle.result())
        except WorkflowFailureError as exc:
            raise DagwrightError(f"run {handle.id!r}: its Temporal workflow did not complete: "
                                 f"{exc.cause}") from exc

    async def _status(self, handle: WorkflowHandle[Any, Any]) -> WorkflowExecutionStatus | None:
        try:
            return (await handle.describe()).status
        except RPCError as exc:
            if exc.status is RPCStatusCode.NOT_FOUND:
                raise RunNotFound(self._not_found(handle.id)) from None
            raise

    async def _query_run(self, handle: WorkflowHandle[Any, Any]) -> dict[str, Any]:
        try:
            current: dict[str, Any] = await handle.query("run")
        except RPCError as exc:
            if exc.status is RPCStatusCode.NOT_FOUND:
                raise RunNotFound(self._not_found(handle.id)) from None
            raise
        return current

    def _not_found(self, run_id: str) -> str:
        return (f"no run {run_id!r} on Temporal at {self.config.temporal_address} "
                f"(namespace {self.config.temporal_namespace!r})")


class _Delivery:
    """Hands a run's events to the caller's callback, in order; a callback that raises is
    logged once and gets no more (the run goes on), as on the local backend."""

    def __init__(self, callback: EventCallback) -> None:
        self.callback = callback
        self.broken = False

    async def more(self, handle: WorkflowHandle[Any, Any], seq: int) -> int:
        """Deliver the events past ``seq``; the last number delivered."""
        for raw in await handle.query("events", seq):
            event = RunEvent.model_validate(raw)
            seq = event.seq
            if self.broken:
                continue
            try:
                result = self.callback(event)
                if inspect.isawaitable(result):
                    await result
            except Exception:
                self.broken = True
                log.exception("run %s: the on_event callback raised; it gets no more events "
                              "(the run goes on)", event.run_id)
        return seq
