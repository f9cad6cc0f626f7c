"""Writing one run to its store while it runs.

Most writes are cheap to lose — a finished step of an idempotent capability is simply run
again after a crash — so they are buffered and flushed together shortly after (or when
the run ends), which keeps the store off the per-step path. Two kinds of write are made
durable before the engine goes on:

* the **call marker** of a call with a side effect, before the request leaves: after a
  crash, a marker without an outcome means "this request may have been processed";
* the **outcome** of that call, as soon as it is known (with its data when it
  succeeded), so a call that did happen is never mistaken for one that may have.

The recorder also holds the run's **lease**: a process owns the run it executes until
``lease_s`` after its last renewal, so two processes never run the same run at once.
A lease whose holder is a dead process on this machine is taken over at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from typing import Any

from pydantic_core import to_json

from orchestration.errors import RunLeased, StoreError
from orchestration.result import Attempt, StepResult
from orchestration.state import RunState
from orchestration.store._base import (
    CallFinished,
    CallMarker,
    CallStarted,
    RunStore,
    SaveAttempt,
    SaveEvent,
    SaveRun,
    SaveStep,
    StoredRun,
    Write,
)

__all__ = ["RunRecorder", "holder_is_dead"]

log = logging.getLogger("dagwright.store")

FLUSH_DELAY_S = 0.05
"""How long a buffered write may wait for others to join its batch."""
FLUSH_MAX = 512
"""A buffer this large is flushed at once."""

_HOST = socket.gethostname()


def holder_is_dead(owner: str | None) -> bool:
    """Whether a lease holder (``host:pid:token``) is a process of this machine that no
    longer exists; a holder elsewhere, or alive, is not known to be dead."""
    if not owner:
        return False
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    if host != _HOST or not pid_text.isdigit() or int(pid_text) == os.getpid():
        return False
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, someone else's
        return False
    return False


def snapshot(state: RunState, plan_json: str | None = None) -> SaveRun:
    """The run's own record as it is now (steps are written one by one).

    ``plan_json`` is ``state.plan`` already encoded (a run writes its record three times
    or more and its plan, the largest part, rarely changes: see :class:`_PlanText`).
    """
    counts: dict[str, int] = {}
    for step in state.steps.values():
        counts[step.status] = counts.get(step.status, 0) + 1
    rest = to_json({**state.model_dump(mode="json", exclude={"steps", "plan"}),
                    "step_order": list(state.steps)}).decode()
    if plan_json is None:
        plan_json = to_json(state.plan).decode()
    return SaveRun(
        run_id=state.run_id, query=state.query, status=state.status,
        started_at=state.started_at, finished_at=state.finished_at,
        state_json='{"plan": ' + plan_json + ", " + rest[1:],
        steps=counts, error=state.error,
    )


class _PlanText:
    """A run's plan encoded once: re-encoded only when the run holds another plan object
    (a replan), so the three or more records a run writes do not encode a 10,000-step plan
    each time. Holding the plan keeps its identity from being reused."""

    __slots__ = ("_plan", "_text")

    def __init__(self) -> None:
        self._plan: Any = None
        self._text = "null"

    def of(self, plan: Any) -> str:
        if plan is not self._plan:
            # pydantic-core's encoder: several times the standard library's speed on a
            # large plan, the same JSON value (compact, UTF-8 text)
            self._plan, self._text = plan, to_json(plan).decode()
        return self._text


class RunRecorder:
    """The run store as one run sees it. ``store`` None records nothing (plan-only calls)."""

    def __init__(self, store: RunStore | None, run_id: str, *, lease_s: float) -> None:
        self.store = store
        self.run_id = run_id
        self.lease_s = lease_s
        # a recorder without a store (a plan-only call, a Temporal workflow, whose store is
        # its history) holds no lease and so draws no random owner token
        self.owner = f"{_HOST}:{os.getpid()}:{uuid.uuid4().hex[:12]}" if store is not None else ""
        self.failure: StoreError | None = None
        self._pending: list[Write] = []
        self._flush_lock = asyncio.Lock()
        self._flusher: asyncio.Task[None] | None = None
        self._flush_soon = False  # an immediate flush (a full buffer) is scheduled
        self._renewer: asyncio.Task[None] | None = None
        self._steps_with_attempts: set[str] = set()
        self._plan_text = _PlanText()

    # --- holding the run --------------------------------------------------------------
    async def begin(self, state: RunState) -> None:
        """Record a new run, held by this process; :class:`RunLeased` if the id is taken."""
        if self.store is None:
            return
        now = time.time()
        created = await self.store.create_run(snapshot(state, self._plan_text.of(state.plan)),
                                              owner=self.owner,
                                              lease_until=now + self.lease_s)
        if not created:
            raise RunLeased(f"run {self.run_id!r} already exists in {self.store.url}: it was "
                            "started by another call at the same time; use resume or get_run")
        self._start_renewing()

    async def take_over(self, stored: StoredRun) -> None:
        """Hold a stored run to continue it; :class:`RunLeased` while a live process does."""
        if self.store is None:
            return
        self._steps_with_attempts.update(stored.attempts)
        now = time.time()
        dead = stored.lease_owner if holder_is_dead(stored.lease_owner) else None
        if not await self.store.acquire(self.run_id, owner=self.owner, now=now,
                                        until=now + self.lease_s, steal_from=dead):
            until = stored.lease_expires_at or now
            raise RunLeased(
                f"run {self.run_id!r} is being executed by another process "
                f"({stored.lease_owner}, lease until {time.strftime('%H:%M:%S', time.localtime(until))}"
                f"); it can be resumed once that process ends or its lease expires "
                f"(ORCH_STORE_LEASE_S={self.lease_s:g})")
        self._start_renewing()

    def _start_renewing(self) -> None:
        self._renewer = asyncio.get_running_loop().create_task(
            self._renew(), name=f"dagwright-lease-{self.run_id}")

    async def _renew(self) -> None:
        assert self.store is not None
        while True:
            await asyncio.sleep(self.lease_s / 3)
            now = time.time()
            try:
                held = await self.store.acquire(self.run_id, owner=self.owner, now=now,
                                                until=now + self.lease_s)
            except StoreError as exc:
                self.failure = self.failure or exc
                continue
            if not held:
                self.failure = self.failure or RunLeased(
                    f"run {self.run_id!r}: another process took the run over while this one "
                    "was executing it (its lease was not renewed in time)")
                return

    # --- buffered writes --------------------------------------------------------------
    def save_run(self, state: RunState) -> None:
        self._buffer(snapshot(state, self._plan_text.of(state.plan)))

    def save_step(self, result: StepResult) -> None:
        clears = result.id in self._steps_with_attempts
        self._buffer(SaveStep(self.run_id, result, clears_attempts=clears))

    def save_attempt(self, step_id: str, attempt: Attempt) -> None:
        self._steps_with_attempts.add(step_id)
        self._buffer(SaveAttempt(self.run_id, step_id, attempt))

    def save_event(self, event: SaveEvent) -> None:
        self._buffer(event)

    def _buffer(self, write: Write) -> None:
        if self.store is None:
            return
        pending = self._pending
        pending.append(write)
        if len(pending) >= FLUSH_MAX:
            if not self._flush_soon:  # one immediate flush at a time, not one per write
                self._schedule(0.0)
        elif self._flusher is None:
            self._schedule(FLUSH_DELAY_S)

    def _schedule(self, delay: float) -> None:
        if self._flusher is not None and not self._flusher.done() and delay > 0:
            return
        if delay == 0:
            self._flush_soon = True
        self._flusher = asyncio.get_running_loop().create_task(self._flush_later(delay))

    async def _flush_later(self, delay: float) -> None:
        if delay:
            await asyncio.sleep(delay)
        self._flusher = None
        try:
            await self.flush()
        except StoreError as exc:
            self.failure = self.failure or exc
            log.error("run %s: the run store failed: %s", self.run_id, exc)

    # --- durable writes ---------------------------------------------------------------
    async def call_started(self, marker: CallMarker) -> None:
        """Record that a call with a side effect is about to be sent; returns once the
        store has it (with everything buffered before it)."""
        if self.store is None:
            return
        self._pending.append(CallStarted(self.run_id, marker))
        await self.flush()

    async def call_finished(self, step_id: str, attempt: Attempt, output: Any) -> None:
        """Record the outcome of a call with a side effect, durably."""
        if self.store is None:
            return
        self._steps_with_attempts.add(step_id)
        self._pending.append(SaveAttempt(self.run_id, step_id, attempt, output))
        self._pending.append(CallFinished(self.run_id, step_id, attempt.number))
        await self.flush()

    async def flush(self) -> None:
        """Write everything buffered, in one transaction; :class:`StoreError` if it fails
        (the writes stay buffered for the next try)."""
        if self.store is None:
            return
        async with self._flush_lock:
            # the immediate flush that was asked for takes its batch now: only from here
            # on may a full buffer ask for another (while a slow write holds the lock,
            # writes keep coming; each must not schedule a flush of its own)
            self._flush_soon = False
            batch, self._pending = self._pending, []
            if not batch:
                return
            try:
                await self.store.write(batch)
            except StoreError:
                self._pending[:0] = batch
                raise

    async def finish(self, state: RunState | None) -> None:
        """The run ended (or stopped in this process): write its last state, let go of it.

        Raises :class:`StoreError` if any write of the run failed on the way, so a run
        is never silently left unrecorded.
        """
        if self.store is None:
            return
        for task in (self._flusher, self._renewer):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if state is not None:
            self.save_run(state)
        try:
            await self.flush()
        except StoreError as exc:
            self.failure = self.failure or exc
        with contextlib.suppress(StoreError):
            await self.store.release(self.run_id, owner=self.owner)
        if self.failure is not None:
            raise self.failure
