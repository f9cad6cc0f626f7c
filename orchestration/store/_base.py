"""What every run store keeps and the one interface the engine writes through.

A store holds, per run: the run's own record (query, plan, status, usage, timestamps —
the :class:`~orchestration.state.RunState` without its steps), one record per finished
step (its :class:`~orchestration.result.StepResult`, attempts included), the attempts of
steps still in flight, and a **call marker** written — durably, before the request
leaves — for every call that has a side effect. A marker without an outcome is how a
resumed run tells "the call may have happened" from "it was never sent".

A process holds the run it executes through a **lease** (:class:`Lease`) whose time is
the store's own clock (PostgreSQL's ``clock_timestamp()``; for SQLite, which one machine
shares, that machine's boot-time clock), never the caller's wall clock. Each new holder
gets the next **generation** of the lease, a fencing token: a write made with a lease is
applied only if that generation still holds the run, in the same transaction, so a
process that was paused past its lease learns it has lost the run before it sends
anything, instead of after.

Writes arrive as a batch of :data:`Write` operations applied in one transaction, so the
engine can buffer cheap writes and flush them together while still making the writes
that guard side effects durable at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from orchestration.context import context_text
from orchestration.events import EventType, RunEvent
from orchestration.result import Attempt, StepResult
from orchestration.state import RunState

if TYPE_CHECKING:
    from orchestration.store._requests import HeldRun, RequestKind, RunRequest

__all__ = [
    "CachedPlan",
    "CallFinished",
    "CallMarker",
    "CallStarted",
    "Lease",
    "PlanCacheStore",
    "ReleaseRun",
    "RunStore",
    "RunSummary",
    "SaveAttempt",
    "SaveEvent",
    "SaveRun",
    "SaveStep",
    "SessionRecord",
    "StoredRun",
    "Write",
]

SCHEMA_VERSION = 7
"""Bumped when the stored layout changes; stores migrate older layouts on open."""


class RunSummary(BaseModel):
    """One line of run history (``list_runs``): newest first."""

    run_id: str
    query: str
    status: str
    started_at: float
    finished_at: float | None = None
    steps: dict[str, int] = Field(default_factory=dict)
    """Finished steps by status, e.g. ``{"succeeded": 3, "failed": 1}``."""
    error: str | None = None
    context: dict[str, Any] | None = None
    """Who the run is for (``tenant``, ``user``, ...)."""
    session: str | None = None
    session_run: int | None = None


class SessionRecord(BaseModel):
    """A session as the store keeps it: its id within its tenant, how many runs it has
    numbered, when it began and when its last run was numbered."""

    session_id: str
    tenant: str | None = None
    runs: int = 0
    created_at: float
    updated_at: float


@dataclass(frozen=True, slots=True)
class CallMarker:
    """A call with a side effect that was about to be sent (``finished`` once its outcome
    is recorded). ``params`` are exactly what was sent; ``idempotency_key`` the key sent
    with them, if the capability declares a header for one."""

    step_id: str
    attempt: int
    layer: str
    params: dict[str, Any]
    idempotency_key: str | None
    started_at: float
    finished: bool = False


@dataclass(frozen=True, slots=True)
class Lease:
    """A process's hold on one run. ``generation`` grows by one with every new holder:
    the fencing token every write of the holder is checked against."""

    run_id: str
    owner: str
    generation: int


@dataclass
class StoredRun:
    """A run as the store has it: its state (finished steps included), the attempts of
    steps that had not finished, the side-effect calls that were started but have no
    recorded outcome, and who holds the run."""

    state: RunState
    attempts: dict[str, list[Attempt]] = field(default_factory=dict)
    outputs: dict[tuple[str, int], Any] = field(default_factory=dict)
    """Data of succeeded attempts of unfinished steps, by (step id, attempt number)."""
    open_calls: list[CallMarker] = field(default_factory=list)
    lease_owner: str | None = None
    lease_remaining_s: float | None = None
    """Seconds the holder's lease still runs by the store's clock (negative: expired;
    None: nobody holds it, or the lease was taken under another clock — a reboot)."""
    lease_generation: int = 0
    lease_expires_at: float | None = None
    """The lease as read (its expiry on the store's clock, renewed by every write of its
    holder and cleared when it lets go): a takeover made from this reading passes it to
    :meth:`RunStore.acquire`, which refuses if the run has changed since."""

    def lease_as_read(self) -> tuple[str | None, int, float | None]:
        return (self.lease_owner, self.lease_generation, self.lease_expires_at)


# --- the write operations -------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class SaveRun:
    """The run's own record, serialised when the write is made (the state moves on)."""

    run_id: str
    query: str
    status: str
    started_at: float
    finished_at: float | None
    state_json: str
    steps: dict[str, int]
    error: str | None
    context: dict[str, Any] | None = None
    """Set when the run is created and never changed (the record's columns for
    filtering: tenant, user, session)."""
    session_id: str | None = None
    session_run: int | None = None

    @property
    def tenant(self) -> str | None:
        return context_text(self.context, "tenant")

    @property
    def user(self) -> str | None:
        return context_text(self.context, "user")


@dataclass(frozen=True, slots=True)
class SaveStep:
    """A finished step; ``clears_attempts`` when in-flight attempt rows of it exist."""

    run_id: str
    result: StepResult
    clears_attempts: bool = False


@dataclass(frozen=True, slots=True)
class SaveAttempt:
    run_id: str
    step_id: str
    attempt: Attempt
    output: Any = None


@dataclass(frozen=True, slots=True)
class CallStarted:
    run_id: str
    marker: CallMarker
    repeat: bool = False
    """The call of an open marker sent again with its idempotency key by the process that
    took the run over: the marker is refreshed instead of refused as a second writer's."""


@dataclass(frozen=True, slots=True)
class CallFinished:
    run_id: str
    step_id: str
    attempt: int


@dataclass(slots=True)
class SaveEvent:
    """One run event as the engine records it: plain fields, one object. The
    :class:`~orchestration.events.RunEvent` model is built only where one is read
    (:meth:`to_event`) — a 10,000-step run emits 30,000 events, and most are only written."""

    run_id: str
    seq: int
    type: EventType
    at: float
    data: dict[str, Any]
    context: dict[str, Any] | None = None
    """The run's context (stored with the run, not with each event)."""

    @classmethod
    def of(cls, event: RunEvent) -> SaveEvent:
        return cls(event.run_id, event.seq, event.type, event.at, event.data, event.context)

    def to_event(self) -> RunEvent:
        return RunEvent(run_id=self.run_id, seq=self.seq, type=self.type, at=self.at,
                        data=self.data, context=self.context)


@dataclass(frozen=True, slots=True)
class ReleaseRun:
    """The holder lets go of the run once the rest of its batch is written: a run that
    ends in this process writes its last state and lets go in one transaction, not two
    (:meth:`RunStore.release` as a write)."""

    run_id: str
    owner: str


Write = SaveRun | SaveStep | SaveAttempt | CallStarted | CallFinished | SaveEvent | ReleaseRun


class RunStore(Protocol):
    """Where runs are recorded. Every method raises
    :class:`~orchestration.errors.StoreError` (naming the store) when the store fails.

    ``url`` is the store's address with any password masked.
    """

    url: str

    async def open(self) -> None:
        """Connect, and create or migrate the layout (refusing a foreign database)."""

    async def close(self) -> None: ...

    async def create_run(self, write: SaveRun, *, owner: str, lease_s: float) -> Lease | None:
        """Record a new run held by ``owner`` for ``lease_s`` (the store's clock); None if
        a run with that id exists."""

    async def write(self, batch: list[Write], *, lease: Lease | None = None,
                    lease_s: float = 0.0, durable: bool = False) -> None:
        """Apply ``batch`` in one transaction.

        With ``lease``, the transaction first renews it for ``lease_s`` — and applies
        nothing, raising :class:`~orchestration.errors.LeaseLost`, unless that generation
        still holds the run (the batch may be empty: a renewal alone). ``durable`` commits
        so that the write survives a crash of the database server or machine whatever the
        server's default (PostgreSQL ``synchronous_commit = on``, SQLite
        ``synchronous = FULL``): the call markers that guard side effects.
        """

    async def load(self, run_id: str) -> StoredRun | None: ...

    async def load_events(self, run_id: str, *, after: int = 0) -> list[RunEvent]:
        """The run's stored events with ``seq > after``, in order."""

    async def acquire(self, run_id: str, *, owner: str, lease_s: float,
                      steal_from: str | None = None,
                      read: StoredRun | None = None) -> Lease | None:
        """Take the run's lease (the next generation) if it is free, expired by the
        store's clock, or held by ``steal_from`` (a holder known to be dead); None if
        another live process holds it — or, given the ``read`` the takeover was decided
        from, if the run's lease is no longer as read: a holder wrote, finished or let go
        since (the caller acts on what it read, so it must read again)."""

    async def release(self, run_id: str, *, owner: str) -> None:
        """Let go of the run if ``owner`` still holds it."""

    async def list_runs(self, *, status: str | None, limit: int, tenant: str | None = None,
                        user: str | None = None,
                        session_id: str | None = None) -> list[RunSummary]:
        """Recent runs, newest first; each filter given narrows the list (``tenant`` and
        ``user`` are the context's; ``session_id`` lists a session's runs)."""

    async def next_session_run(self, tenant: str | None, session_id: str) -> int:
        """Number the next run of the session ``(tenant, session_id)`` — 1 for a new
        session, which this creates — atomically, so two runs never share a number."""

    async def get_session(self, tenant: str | None, session_id: str) -> SessionRecord | None:
        """The session ``(tenant, session_id)``; None if it has numbered no run."""

    async def delete_finished_before(self, cutoff: float) -> int:
        """Delete finished runs that ended before ``cutoff``; how many were deleted."""

    async def put_payloads(self, run_id: str, payloads: dict[str, bytes]) -> None:
        """Keep values of a run by key, committed durably; the first value written for a
        key is kept (a later one is a no-op). The Temporal backend's history refers to its
        large values here (the claim-check pattern), and its workers keep the claims and
        answers of side-effect calls here, where the first claim of an attempt must hold
        (``orchestration/temporal/_call_ledger.py``; see docs/scale-out.md). Deleted with
        their run."""

    async def get_payloads(self, run_id: str, keys: list[str]) -> dict[str, bytes]:
        """The values of ``keys`` kept for ``run_id`` (a key not kept is absent)."""

    # --- requests to runs another process executes (orchestration/store/_requests.py) --
    async def put_request(self, request: RunRequest) -> None:
        """Record ``request`` (replacing one of the same run, kind and key)."""

    async def list_requests(self, *, kind: RequestKind | None = None,
                            run_id: str | None = None) -> list[RunRequest]:
        """Requests waiting, oldest first (of one kind, of one run)."""

    async def drop_requests(self, run_id: str, kind: RequestKind,
                            keys: Sequence[str] | None = None) -> None:
        """Forget requests of ``run_id`` of ``kind`` (only those of ``keys`` when given)."""

    async def list_unheld(self, *, host: str, limit: int) -> list[HeldRun]:
        """``running`` runs whose lease is free (or expired by the store's clock), and
        those held by processes of ``host``, oldest first: what a process that takes
        over orphaned runs looks at."""


# --- the plan cache (ORCH_PLAN_CACHE) --------------------------------------------------------
@dataclass(frozen=True, slots=True)
class CachedPlan:
    """A validated plan kept for reuse (see ``orchestration/_plan_cache.py``): ``key`` is
    the digest of what it is valid for (normalised query, catalog fingerprint, planner
    model, prompt version, tenant), the other fields say the same in the clear, for
    people reading the table. Times are wall-clock seconds (processes share the store)."""

    key: str
    plan_json: str
    query: str
    catalog: str
    model: str
    prompt_version: str
    tenant: str | None
    created_at: float
    expires_at: float


@runtime_checkable
class PlanCacheStore(Protocol):
    """A run store that also keeps plans (the three built-in stores do)."""

    async def get_cached_plan(self, key: str, *, now: float) -> CachedPlan | None:
        """The plan kept under ``key``, unless it expired by ``now``."""

    async def put_cached_plan(self, entry: CachedPlan, *, now: float) -> None:
        """Keep ``entry`` (replacing what ``key`` held), and drop plans expired by ``now``."""

    async def clear_cached_plans(self) -> int:
        """Drop every kept plan; how many there were."""
