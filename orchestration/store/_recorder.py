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
``lease_s`` after its last renewal by the *store's* clock, so two processes never run the
same run at once. A lease whose holder is a dead process on this machine is taken over at
once. Every write the recorder makes renews the lease and is fenced by its generation
(:class:`~orchestration.store._base.Lease`): a process that was paused past its lease and
lost the run finds out at its next write — at the latest the marker before a side-effect
call, so before sending — and stops.

A store failure stops the run: the first write that fails (or a fenced write that finds
the run taken over) calls ``on_failure``, which the orchestrator uses to stop the run's
work, and the run ends with that :class:`StoreError` instead of going on without a record.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import socket
import uuid
import weakref
from collections.abc import Callable
from typing import Any

from pydantic_core import to_json

from orchestration.errors import LeaseLost, RunLeased, StoreError
from orchestration.result import Attempt, StepResult
from orchestration.state import RunState
from orchestration.store._base import (
    CallFinished,
    CallMarker,
    CallStarted,
    Lease,
    ReleaseRun,
    RunStore,
    SaveAttempt,
    SaveEvent,
    SaveRun,
    SaveStep,
    StoredRun,
    Write,
)

__all__ = ["HOST", "RunChanged", "RunRecorder", "holder_is_dead"]

log = logging.getLogger("dagwright.store")

FLUSH_DELAY_S = 0.05
"""How long a buffered write may wait for others to join its batch."""
FLUSH_MAX = 512
"""A buffer this large is flushed at once."""

HOST = socket.gethostname()
"""This machine's name, the first part of every lease holder's name (``host:pid:token``)."""
_NONCE = uuid.uuid4().hex[:8]
"""Drawn once per process (a system call that costs ~10 us here, per run before): with
the pid and a counter it makes every recorder's owner token unique, a pid reused after a
restart included."""
_OWNERS = itertools.count(1)


class RunChanged(RunLeased):
    """A run changed between reading it and taking it over: read it again. (A
    :class:`RunLeased` to a caller it escapes: another process had the run meanwhile.)"""


def holder_is_dead(owner: str | None) -> bool:
    """Whether a lease holder (``host:pid:token``) is a process of this machine that no
    longer exists; a holder elsewhere, or alive, is not known to be dead."""
    if not owner:
        return False
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    if host != HOST or not pid_text.isdigit() or int(pid_text) == os.getpid():
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
        steps=counts, error=state.error, context=state.context,
        session_id=state.session, session_run=state.session_run,
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
        # the lease's owner token: this execution of the run and no other, in any process
        # (a recorder without a store — a plan-only call, a Temporal workflow, whose store
        # is its history — holds no lease)
        self.owner = (f"{HOST}:{os.getpid()}:{_NONCE}-{next(_OWNERS)}" if store is not None
                      else "")
        self.lease: Lease | None = None
        self.failure: StoreError | None = None
        self.on_failure: Callable[[StoreError], None] | None = None
        """Called once, with the first store failure: the orchestrator stops the run."""
        self._held_until = 0.0  # loop time until which the lease surely holds
        self._pending: list[Write] = []
        self._flush_lock = asyncio.Lock()
        self._flusher: asyncio.Task[None] | None = None
        self._flush_soon = False  # an immediate flush (a full buffer) is scheduled
        self._steps_with_attempts: set[str] = set()
        self._plan_text = _PlanText()
        # finish() lets go of the run with its last writes: the next flush to write
        # carries the release, and from then on there is no lease to renew
        self._letting_go = False
        self._released = False

    @property
    def lease_lost(self) -> bool:
        """Whether another process took the run over from this one."""
        return isinstance(self.failure, LeaseLost)

    def fail(self, error: StoreError) -> None:
        """Record the first store failure and stop the run (``on_failure``)."""
        if self.failure is not None:
            return
        self.failure = error
        log.error("run %s: %s", self.run_id, error)
        if self.on_failure is not None:
            self.on_failure(error)

    # --- holding the run --------------------------------------------------------------
    async def begin(self, state: RunState) -> None:
        """Record a new run, held by this process; :class:`RunLeased` if the id is taken."""
        if self.store is None:
            return
        started = asyncio.get_running_loop().time()
        lease = await self.store.create_run(snapshot(state, self._plan_text.of(state.plan)),
                                            owner=self.owner, lease_s=self.lease_s)
        if lease is None:
            raise RunLeased(f"run {self.run_id!r} already exists in {self.store.url}: it was "
                            "started by another call at the same time; use resume or get_run")
        self._hold(lease, started)

    async def take_over(self, stored: StoredRun) -> None:
        """Hold a stored run to continue it from ``stored``, as it was read;
        :class:`RunLeased` while a live process holds it, :class:`RunChanged` when it is
        no longer as read (then it must be read again: continuing from the old reading
        would repeat what another process did since, a payment included)."""
        if self.store is None:
            return
        self._steps_with_attempts.update(stored.attempts)
        dead = stored.lease_owner if holder_is_dead(stored.lease_owner) else None
        started = asyncio.get_running_loop().time()
        lease = await self.store.acquire(self.run_id, owner=self.owner, lease_s=self.lease_s,
                                         steal_from=dead, read=stored)
        if lease is None:
            now = await self.store.load(self.run_id)
            if now is None or now.lease_as_read() != stored.lease_as_read():
                raise RunChanged(
                    f"run {self.run_id!r} changed while this process was reading it: "
                    "another process took it over, finished it or let it go since")
            remaining = stored.lease_remaining_s
            runs = (f"its lease runs {remaining:.0f} s more by the store's clock"
                    if remaining is not None and remaining > 0 else "its lease was just renewed")
            raise RunLeased(
                f"run {self.run_id!r} is being executed by another process "
                f"({stored.lease_owner}; {runs}); it can be resumed once that process ends "
                f"or its lease expires (ORCH_STORE_LEASE_S={self.lease_s:g})")
        self._hold(lease, started)

    def _hold(self, lease: Lease, started: float) -> None:
        self.lease = lease
        self._held_until = started + self.lease_s
        _LeaseKeeper.of(asyncio.get_running_loop()).add(self)

    @property
    def renewal_due(self) -> bool:
        """Whether a third of the lease has passed since it was last renewed (every flush
        renews it): the :class:`_LeaseKeeper` renews it then."""
        return (self.failure is None and self.lease is not None
                and asyncio.get_running_loop().time() >= self._held_until - self.lease_s * 2 / 3)

    async def renew(self) -> None:
        """Renew the lease (with whatever is buffered); a failure stops the run
        (:meth:`fail`, inside :meth:`flush`)."""
        with contextlib.suppress(StoreError):
            await self.flush()

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
        with contextlib.suppress(StoreError):  # flush() has recorded it and stopped the run
            await self.flush()

    # --- durable writes ---------------------------------------------------------------
    async def call_started(self, marker: CallMarker, *, repeat: bool = False) -> None:
        """Record that a call with a side effect is about to be sent; returns once the
        store has it durably (with everything buffered before it), fenced by the lease.

        Raises :class:`StoreError` — and the call must not be sent — when the store cannot
        commit it, when another process holds the run (:class:`LeaseLost`), or when the
        commit took so long (a pause) that the lease may lapse before the request leaves.
        """
        if self.store is None:
            return
        self._pending.append(CallStarted(self.run_id, marker, repeat))
        await self.flush(durable=True)
        margin = self.lease_s / 3
        if asyncio.get_running_loop().time() > self._held_until - margin:
            error = LeaseLost(
                f"run {self.run_id!r}: recording the call of step {marker.step_id!r} took "
                f"longer than ORCH_STORE_LEASE_S={self.lease_s:g} allows (this process was "
                "paused or the store was slow), so its lease may lapse before the request "
                "leaves; it was not sent, and a resume reports it as an unknown outcome")
            self.fail(error)
            raise error

    async def call_finished(self, step_id: str, attempt: Attempt, output: Any) -> None:
        """Record the outcome of a call with a side effect, at once.

        Committed as the store commits by default (it survives this process; a database
        server's or machine's crash may lose it): what guards the side effect is its
        marker, and an outcome that is lost leaves the marker open, which a resume reports
        as an unknown outcome — never as a call to send again. One synchronous flush per
        side effect instead of two."""
        if self.store is None:
            return
        self._steps_with_attempts.add(step_id)
        self._pending.append(SaveAttempt(self.run_id, step_id, attempt, output))
        self._pending.append(CallFinished(self.run_id, step_id, attempt.number))
        await self.flush()

    async def flush(self, *, durable: bool = False) -> None:
        """Write everything buffered in one transaction, renewing (and fenced by) the
        lease; :class:`StoreError` if it fails (the writes stay buffered, and the run is
        stopped: :meth:`fail`)."""
        if self.store is None:
            return
        async with self._flush_lock:
            # the immediate flush that was asked for takes its batch now: only from here
            # on may a full buffer ask for another (while a slow write holds the lock,
            # writes keep coming; each must not schedule a flush of its own)
            self._flush_soon = False
            if self.failure is not None:
                raise self.failure  # the run stopped: nothing more is written
            batch, self._pending = self._pending, []
            if not batch and (self.lease is None or self._released):
                return  # nothing to write, and no lease to renew (a renewal that was due
                # as the run let go of it would find the lease gone)
            release = self._letting_go and not self._released
            if release:  # after the rest, in the same transaction
                batch.append(ReleaseRun(self.run_id, self.owner))
            started = asyncio.get_running_loop().time()
            try:
                await self.store.write(batch, lease=self.lease, lease_s=self.lease_s,
                                       durable=durable)
            except StoreError as exc:
                self._pending[:0] = batch[:-1] if release else batch
                self.fail(exc)
                raise
            if self.lease is not None:
                self._held_until = started + self.lease_s
            if release:
                self._released = True

    async def finish(self, state: RunState | None) -> None:
        """The run ended (or stopped in this process): write its last state, let go of it.

        Raises :class:`StoreError` if any write of the run failed on the way, so a run
        is never silently left unrecorded.
        """
        if self.store is None:
            return
        if self.lease is not None:
            _LeaseKeeper.of(asyncio.get_running_loop()).discard(self)
        if self.failure is None and state is not None:
            # buffered before the flusher is stopped: on a recorder that never flushed (one
            # that took a run over only to mark it), buffering schedules a delayed flush,
            # which would otherwise write after the release below and find the lease gone
            self.save_run(state)
        for task in (self._flusher,):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self.failure is None:
            # the last writes and the release in one transaction: one round trip to the
            # store and one commit per run fewer (a flush already waiting for the lock
            # may be the one that carries them)
            self._letting_go = True
            with contextlib.suppress(StoreError):  # recorded in self.failure
                await self.flush()
        # a run another process took over is not ours to release
        if not self._released and not self.lease_lost:
            with contextlib.suppress(StoreError):
                await self.store.release(self.run_id, owner=self.owner)
        if self.failure is not None:
            raise self.failure


class _LeaseKeeper:
    """Renews the leases of every run an event loop holds, from one task.

    A task per run that sleeps and renews would keep a task, its coroutine, its context
    and a timer alive for the whole run — objects the garbage collector walks again and
    again while thousands of runs are in flight — to do something needed once every
    ``lease_s / 3``. Here one task wakes every sixth of the shortest lease and renews
    the runs whose lease was last renewed (by any write) a third of a lease ago or more,
    so a lease never has less than half of it left; the renewals of many runs go to the
    store together."""

    _by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LeaseKeeper] = (
        weakref.WeakKeyDictionary())

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._held: set[RunRecorder] = set()
        self._task: asyncio.Task[None] | None = None
        self._interval = 0.0  # how long the keeper sleeps between rounds
        self._renewing: set[asyncio.Task[None]] = set()

    @classmethod
    def of(cls, loop: asyncio.AbstractEventLoop) -> _LeaseKeeper:
        keeper = cls._by_loop.get(loop)
        if keeper is None:
            keeper = cls._by_loop[loop] = cls(loop)
        return keeper

    def add(self, recorder: RunRecorder) -> None:
        self._held.add(recorder)
        if self._task is not None and not self._task.done():
            if recorder.lease_s / 6 >= self._interval:
                return
            self._task.cancel()  # asleep for longer than this lease allows: start anew
        self._task = self._loop.create_task(self._keep(), name="dagwright-leases")

    def discard(self, recorder: RunRecorder) -> None:
        self._held.discard(recorder)

    async def _keep(self) -> None:
        while self._held:
            self._interval = min(r.lease_s for r in self._held) / 6
            await asyncio.sleep(self._interval)
            for recorder in [r for r in self._held if r.renewal_due]:
                task = self._loop.create_task(recorder.renew(),
                                              name=f"dagwright-lease-{recorder.run_id}")
                self._renewing.add(task)  # held until done: the loop keeps tasks weakly
                task.add_done_callback(self._renewing.discard)
