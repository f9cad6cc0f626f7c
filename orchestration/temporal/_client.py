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
import os
import socket
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, timedelta
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
from orchestration._facade.inputs import RunInputs
from orchestration.config import OrchestratorConfig
from orchestration.context import context_text
from orchestration.errors import (
    ApprovalError,
    BackendUnavailable,
    ConfigError,
    DagwrightError,
    RunNotFound,
)
from orchestration.events import RunEvent
from orchestration.plan import Plan
from orchestration.result import Approval, RunResult
from orchestration.sessions import load_history
from orchestration.state import RunSetup, RunState
from orchestration.store import RunStore
from orchestration.store._recorder import snapshot
from orchestration.temporal._payload_store import PayloadMissing, with_payload_store
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
            try:
                client = await connect(self.config)
            except ConfigError as exc:  # unreachable: for a run, an outage
                raise ConnectionError(str(exc)) from exc
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
                  on_event: EventCallback | None, inputs: RunInputs | None = None,
                  setup: RunSetup | None = None) -> RunResult:
        """Start the run's workflow (its id is the run id), or attach to the run of that
        id; the result once it has ended or paused. ``inputs``: its context, session and
        limits (never credentials: the facade refuses those on Temporal); ``setup`` goes
        with the request (how the run answers, the workflow it is made from)."""
        run_id = run_id or uuid.uuid4().hex
        with self._answering(run_id, "starting or following the run"):
            return await self._run(query, plan, run_id, on_event, inputs or RunInputs(), setup)

    async def _in_context(self, inputs: RunInputs) -> dict[str, Any]:
        """What the workflow's input carries of the run's context and session: the
        session's number for the run and the earlier runs it may build on, read here from
        the run store (the workflow must see the same on every replay)."""
        payload: dict[str, Any] = {
            "context": inputs.context,
            "limits": inputs.limits.model_dump(mode="json") if inputs.limits else None}
        if inputs.session_id is not None:
            if self.store is None:
                raise ConfigError("sessions on the Temporal backend need the run store the "
                                  "workers record runs in (ORCH_STORE_URL)")
            await self.store.open()
            tenant = context_text(inputs.context, "tenant")
            number = await self.store.next_session_run(tenant, inputs.session_id)
            history = await load_history(self.store, tenant, inputs.session_id, number,
                                         self.config.session_history_runs)
            payload["session"] = history.to_payload()
        return payload

    async def _run(self, query: str, plan: Plan | dict[str, Any] | None, run_id: str,
                   on_event: EventCallback | None, inputs: RunInputs,
                   setup: RunSetup | None) -> RunResult:
        client = await self.client()
        plan_payload = (plan.model_dump(mode="json", exclude_none=True) if isinstance(plan, Plan)
                        else plan)
        request = {"query": query, "plan": plan_payload, "config": config_to_payload(self.config),
                   **await self._in_context(inputs)}
        if setup is not None:
            request["setup"] = setup.model_dump(mode="json", exclude_none=True)
        try:
            handle: WorkflowHandle[Any, Any] = await client.start_workflow(
                WORKFLOW, request, id=run_id, task_queue=self.config.temporal_task_queue,
                task_timeout=timedelta(seconds=self.config.temporal_workflow_task_timeout_s),
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
                static_summary=query[:200])
        except WorkflowAlreadyStartedError:
            handle = client.get_workflow_handle(run_id)
            if await self._status(handle) is not WorkflowExecutionStatus.RUNNING:
                ended = await self._result(handle)  # from its history (or the store)
                _check_same_query(run_id, ended.query, query)
                return ended.to_result()
            if await self._failing_tasks(handle):
                # it cannot be queried (a query would wait in vain): the query it was
                # started with says whether it is this run; follow it to its next
                # settle, or until it is ended as stuck
                _check_same_query(run_id, await self._query_of(handle), query)
                return await self._follow(handle, 0, on_event, 0)
            existing = await self._query_run(handle)
            _check_same_query(run_id, existing["state"]["query"], query)
            if existing["state"]["status"] not in ("running",):
                return RunState.model_validate(existing["state"]).to_result()
            return await self._follow(handle, existing["settled"], on_event, 0)
        return await self._follow(handle, 0, on_event, 0)

    async def resume(self, run_id: str, *, approvals: dict[str, Approval] | None,
                     on_event: EventCallback | None) -> RunResult:
        """Decide on a paused run (the ``decide`` update) and follow it to its next
        settle; without decisions, the run as it is (a running one: once it settles)."""
        with self._answering(run_id, "resuming the run"):
            return await self._resume(run_id, approvals, on_event)

    async def _resume(self, run_id: str, approvals: dict[str, Approval] | None,
                      on_event: EventCallback | None) -> RunResult:
        client = await self.client()
        handle = client.get_workflow_handle(run_id)
        status = await self._status(handle)
        if status is not WorkflowExecutionStatus.RUNNING:
            state = await self._result(handle)
            if approvals:
                raise ApprovalError(f"run {run_id!r} is not waiting for approval (it is "
                                    f"{state.status}); there is nothing to decide")
            return state.to_result()
        if not approvals and await self._failing_tasks(handle):
            # its workflow task keeps failing, so a query would wait in vain: follow it to
            # its next settle, or until it is ended as stuck
            return await self._follow(handle, 0, on_event, 0)
        if not approvals:
            try:
                current = await self._query_run(handle)
            except RPCError as exc:
                if _is_outage(exc):
                    raise
                # it cannot be queried (its workflow task is failing): follow it to its
                # next settle, or until it is ended as stuck
                return await self._follow(handle, 0, on_event, 0)
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
        """The run as its workflow has it now (None: Temporal has no run of that id).

        A workflow that cannot be queried (the server unreachable, its workflow task
        failing) is answered from the run store, as the workers last recorded it, with a
        warning saying why; with nothing in the store either, :class:`BackendUnavailable`.
        A run whose workflow task keeps failing past the run's deadline is ended here
        (``failed``, ``WORKFLOW_STUCK``), as a client following it would: nobody may be."""
        try:
            with self._answering(run_id, "reading the run"):
                handle = (await self.client()).get_workflow_handle(run_id)
                try:
                    raw = (await handle.describe()).raw_description
                except RPCError as exc:
                    if exc.status is RPCStatusCode.NOT_FOUND:
                        return None
                    raise
                failing = _failed_attempts(raw)
                if self._past_saving(raw):  # nobody else may be following it: end it
                    state = await self._end_stuck(handle, raw.pending_workflow_task.attempt,
                                                   _started(raw))
                    return state.to_result()
                if failing:  # a query would wait for a task that keeps failing
                    raise BackendUnavailable(
                        f"run {run_id!r}: its workflow task has failed {failing} time(s) "
                        "in a row (the workers' logs say why), so it cannot be queried; "
                        f"look with `dagwright runs show {run_id}`",
                        run_id=run_id, reason=f"its workflow task failed {failing} "
                                              "time(s) in a row")
                current = await self._query_run(handle)
                return RunState.model_validate(current["state"]).to_result()
        except BackendUnavailable as exc:
            stored = await self._stored(run_id)
            if stored is None:
                raise
            stored.warn(f"the live run could not be read from Temporal ({exc.reason}); this "
                        "is the run as the workers last recorded it in the run store")
            return stored.to_result()

    async def get_events(self, run_id: str, *, after: int) -> list[RunEvent] | None:
        """The run's events with ``seq > after`` (None: Temporal has no run of that id, or
        it cannot be queried: the caller reads the store's)."""
        try:
            with self._answering(run_id, "reading the run's events"):
                handle = (await self.client()).get_workflow_handle(run_id)
                try:
                    events = await handle.query("events", after)
                except RPCError as exc:
                    if exc.status is RPCStatusCode.NOT_FOUND:
                        return None
                    raise
                return [RunEvent.model_validate(e) for e in events]
        except BackendUnavailable:
            if self.store is None:
                raise
            return None

    # --- when Temporal does not answer ------------------------------------------------------
    @contextlib.contextmanager
    def _answering(self, run_id: str, doing: str) -> Iterator[None]:
        """Every Temporal SDK error that reaches here leaves as a :class:`DagwrightError`:
        :class:`RunNotFound`, or :class:`BackendUnavailable` saying how to look."""
        try:
            yield
        except PayloadMissing as exc:  # this client's run store is not the workers'
            raise PayloadMissing(
                f"{exc} The run itself is the workers' and goes on without this caller (it "
                f"may have finished): read it with `dagwright runs show {run_id}` where "
                "ORCH_STORE_URL is the workers'.") from exc
        except DagwrightError:
            raise
        except RPCError as exc:
            if exc.status is RPCStatusCode.NOT_FOUND:
                raise RunNotFound(self._not_found(run_id)) from None
            raise self._unavailable(run_id, doing, exc) from exc
        except Exception as exc:  # connection failures, timeouts, SDK errors
            raise self._unavailable(run_id, doing, exc) from exc

    def _unavailable(self, run_id: str, doing: str, exc: BaseException) -> BackendUnavailable:
        reason = f"{type(exc).__name__}: {str(exc).strip() or 'no detail'}"
        error = BackendUnavailable(
            f"run {run_id!r}: {doing} failed: the Temporal server at "
            f"{self.config.temporal_address} (namespace {self.config.temporal_namespace!r}) "
            f"did not answer ({reason}). The run may still be going on: its workers carry on "
            f"without this caller. Look with `dagwright runs show {run_id}` (the run as the "
            f"workers last recorded it in the run store), or follow it again with "
            f"`dagwright resume {run_id}` once the server answers.",
            run_id=run_id, may_be_running=True, reason=reason)
        return error

    async def _stored(self, run_id: str) -> RunState | None:
        if self.store is None:
            return None
        await self.store.open()
        stored = await self.store.load(run_id)
        return stored.state if stored is not None else None

    # --- following a run -----------------------------------------------------------------------
    async def _follow(self, handle: WorkflowHandle[Any, Any], after: int,
                      on_event: EventCallback | None, seq: int) -> RunResult:
        """Wait until the run settles for the ``after+1``-th time (pauses or ends), handing
        its events past ``seq`` to ``on_event`` as they come; the run's result."""
        deliver = _Delivery(on_event, seq) if on_event is not None else None
        loop = asyncio.get_running_loop()
        give_up_at = loop.time() + self.config.run_timeout_s
        pause = 0.2
        while True:
            try:
                state = await self._follow_once(handle, after, deliver)
                break
            except Exception as exc:
                # the server is down or restarting: the run goes on on its workers (or
                # waits for the server); follow it again, until the run's own deadline
                if not _is_outage(exc) or loop.time() + pause > give_up_at:
                    raise
                log.warning("run %s: the Temporal server did not answer (%s); following the "
                            "run again in %.1f s", handle.id, exc, pause)
                await asyncio.sleep(pause)
                pause = min(pause * 2, 5.0)
        return state.to_result()

    async def _follow_once(self, handle: WorkflowHandle[Any, Any], after: int,
                           deliver: _Delivery | None) -> RunState:
        settled = asyncio.ensure_future(self._settled(handle, after))
        stuck = asyncio.ensure_future(self._unless_stuck(handle))
        try:
            while not settled.done() and not stuck.done():
                if deliver is not None:
                    # a query on a workflow whose task keeps failing waits (30 s): the
                    # stuck guard may end the run meanwhile
                    more = asyncio.ensure_future(deliver.more(handle))
                    await asyncio.wait({more, stuck}, return_when=asyncio.FIRST_COMPLETED)
                    if not more.done():
                        more.cancel()
                        with contextlib.suppress(asyncio.CancelledError, Exception):
                            await more
                        break
                    failed = more.exception()
                    if failed is not None and not _not_queryable(failed):
                        raise failed
                await asyncio.wait({settled, stuck}, return_when=asyncio.FIRST_COMPLETED,
                                   timeout=(self.config.temporal_event_poll_s
                                            if deliver is not None else None))
            if stuck.done() and not settled.done():
                return await stuck
            state = await settled
        finally:
            for task in (settled, stuck):
                if not task.done():
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task
        if deliver is not None:
            try:
                await deliver.more(handle)
            except RPCError as exc:
                if not _not_queryable(exc):
                    raise
        return state

    async def _unless_stuck(self, handle: WorkflowHandle[Any, Any]) -> RunState:
        """Returns only if the run cannot make progress: its workflow task has failed
        ``_STUCK_ATTEMPTS`` times in a row (a payload over Temporal's limits, a
        non-determinism error, a bug on the workers — Temporal retries such a task
        forever) and the run's deadline has passed. The workflow is then terminated and
        the run ends ``failed`` with a ``WORKFLOW_STUCK`` error, recorded in the store."""
        interval = max(0.5, self.config.temporal_workflow_task_timeout_s / 2)
        while True:
            await asyncio.sleep(interval)
            raw = (await handle.describe()).raw_description
            if self._past_saving(raw):
                return await self._end_stuck(handle, raw.pending_workflow_task.attempt,
                                             _started(raw))

    def _past_saving(self, raw: Any) -> bool:
        """Whether a run (its workflow's raw description) cannot make progress: still
        running, its workflow task failed ``_STUCK_ATTEMPTS`` times in a row, and past
        its deadline by two workflow task timeouts (a healthy run has ended itself by
        then)."""
        if raw.workflow_execution_info.status != WorkflowExecutionStatus.RUNNING.value:
            return False  # it ended: whoever reads it learns how
        age = time.time() - _started(raw)
        grace = 2 * self.config.temporal_workflow_task_timeout_s
        return bool(raw.pending_workflow_task.attempt >= _STUCK_ATTEMPTS
                    and age > self.config.run_timeout_s + grace)

    async def _end_stuck(self, handle: WorkflowHandle[Any, Any], attempts: int,
                         started_at: float) -> RunState:
        last = await self._last_task_failure(handle)
        why = (f"the last failure, as the worker reported it: {last}" if last else
               "a payload over Temporal's limits, a non-determinism error or a bug on the "
               "workers; the workers' logs say which")
        reason = (f"WORKFLOW_STUCK: the run's Temporal workflow task failed {attempts} times "
                  f"in a row ({why}) and the run's deadline "
                  f"(ORCH_RUN_TIMEOUT_S={self.config.run_timeout_s:g}) passed, so the run was "
                  "ended; steps that ran are in the workers' logs and the run store")
        log.error("run %s: %s", handle.id, reason)
        state = await self._stored(handle.id)
        if state is None:
            state = RunState(run_id=handle.id, query=await self._query_of(handle),
                             started_at=started_at)
        state.status, state.error, state.finished_at = "failed", reason, time.time()
        if self.store is not None:
            record = snapshot(state)
            owner = f"temporal-client:{socket.gethostname()}:{os.getpid()}"
            await self.store.create_run(record, owner=owner, lease_s=60)
            await self.store.write([record])
            await self.store.release(state.run_id, owner=owner)
        # recorded first: whoever waits on the workflow's result reads why from the store
        with contextlib.suppress(RPCError):  # already ended by someone else: fine
            await handle.terminate(reason=reason[:1000])
        return state

    async def _last_task_failure(self, handle: WorkflowHandle[Any, Any]) -> str:
        """The message of the run's last failed workflow task, from its history (Temporal
        keeps the first of a streak of failures there), at most 1,000 characters."""
        last = ""
        try:
            async for event in handle.fetch_history_events():
                if event.HasField("workflow_task_failed_event_attributes"):
                    last = event.workflow_task_failed_event_attributes.failure.message
        except RPCError as exc:
            log.warning("run %s: its history could not be read (%s)", handle.id, exc)
        return last[:1000]

    async def _query_of(self, handle: WorkflowHandle[Any, Any]) -> str:
        """The run's query, from the input its workflow was started with."""
        async for event in handle.fetch_history_events():
            payloads = event.workflow_execution_started_event_attributes.input.payloads
            [request] = await (await self.client()).data_converter.decode(payloads)
            return str(request.get("query") or "")
        return ""

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
            stored = await self._stored(handle.id)
            if stored is not None and stored.status == "failed":
                return stored  # ended as stuck: the store has why
            raise DagwrightError(f"run {handle.id!r}: its Temporal workflow did not complete: "
                                 f"{exc.cause}") from exc

    async def _status(self, handle: WorkflowHandle[Any, Any]) -> WorkflowExecutionStatus | None:
        try:
            return (await handle.describe()).status
        except RPCError as exc:
            if exc.status is RPCStatusCode.NOT_FOUND:
                raise RunNotFound(self._not_found(handle.id)) from None
            raise

    async def _failing_tasks(self, handle: WorkflowHandle[Any, Any]) -> int:
        return _failed_attempts((await handle.describe()).raw_description)

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


_STUCK_ATTEMPTS = 3
"""Workflow task attempts in a row after which a run past its deadline is ended."""


def _started(raw: Any) -> float:
    """When the workflow (its raw description) started, as a timestamp."""
    return float(raw.workflow_execution_info.start_time.ToDatetime(UTC).timestamp())


def _check_same_query(run_id: str, existing: str, query: str) -> None:
    if existing != query:
        raise DagwrightError(
            f"run {run_id!r} already exists for another query ({existing[:200]!r}); "
            "choose another run_id, or resume it")


def _failed_attempts(raw: Any) -> int:
    """How many times in a row the workflow's pending task has failed (0: none pending, or
    its first attempt)."""
    return max(0, int(raw.pending_workflow_task.attempt) - 1)


def _not_queryable(exc: BaseException) -> bool:
    """A workflow whose task is failing (or that ended before its first task) cannot be
    queried: it has no events to give now, which is not an error of the caller's."""
    return isinstance(exc, RPCError) and exc.status is RPCStatusCode.FAILED_PRECONDITION


_OUTAGE = frozenset({RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED})


def _is_outage(exc: BaseException) -> bool:
    """Whether ``exc`` says the server could not be reached (worth trying again), rather
    than that it refused something."""
    if isinstance(exc, RPCError):
        return exc.status in _OUTAGE
    return isinstance(exc, ConnectionError | TimeoutError)


class _Delivery:
    """Hands a run's events to the caller's callback, in order; a callback that raises is
    logged once and gets no more (the run goes on), as on the local backend."""

    def __init__(self, callback: EventCallback, seq: int) -> None:
        self.callback = callback
        self.broken = False
        self.seq = seq
        """The last event delivered."""

    async def more(self, handle: WorkflowHandle[Any, Any]) -> int:
        """Deliver the events past the last one delivered; the last number delivered."""
        for raw in await handle.query("events", self.seq):
            event = RunEvent.model_validate(raw)
            self.seq = event.seq
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
        return self.seq
