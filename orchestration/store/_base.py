"""What every run store keeps and the one interface the engine writes through.

A store holds, per run: the run's own record (query, plan, status, usage, timestamps —
the :class:`~orchestration.state.RunState` without its steps), one record per finished
step (its :class:`~orchestration.result.StepResult`, attempts included), the attempts of
steps still in flight, and a **call marker** written — durably, before the request
leaves — for every call that has a side effect. A marker without an outcome is how a
resumed run tells "the call may have happened" from "it was never sent".

Writes arrive as a batch of :data:`Write` operations applied in one transaction, so the
engine can buffer cheap writes and flush them together while still making the writes
that guard side effects durable at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import BaseModel, Field

from orchestration.events import EventType, RunEvent
from orchestration.result import Attempt, StepResult
from orchestration.state import RunState

__all__ = [
    "CallFinished",
    "CallMarker",
    "CallStarted",
    "RunStore",
    "RunSummary",
    "SaveAttempt",
    "SaveEvent",
    "SaveRun",
    "SaveStep",
    "StoredRun",
    "Write",
]

SCHEMA_VERSION = 2
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
    lease_expires_at: float | None = None


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

    @classmethod
    def of(cls, event: RunEvent) -> SaveEvent:
        return cls(event.run_id, event.seq, event.type, event.at, event.data)

    def to_event(self) -> RunEvent:
        return RunEvent(run_id=self.run_id, seq=self.seq, type=self.type, at=self.at,
                        data=self.data)


Write = SaveRun | SaveStep | SaveAttempt | CallStarted | CallFinished | SaveEvent


class RunStore(Protocol):
    """Where runs are recorded. Every method raises
    :class:`~orchestration.errors.StoreError` (naming the store) when the store fails.

    ``url`` is the store's address with any password masked.
    """

    url: str

    async def open(self) -> None:
        """Connect, and create or migrate the layout (refusing a foreign database)."""

    async def close(self) -> None: ...

    async def create_run(self, write: SaveRun, *, owner: str, lease_until: float) -> bool:
        """Record a new run held by ``owner``; False if a run with that id exists."""

    async def write(self, batch: list[Write]) -> None:
        """Apply ``batch`` in one transaction."""

    async def load(self, run_id: str) -> StoredRun | None: ...

    async def load_events(self, run_id: str, *, after: int = 0) -> list[RunEvent]:
        """The run's stored events with ``seq > after``, in order."""

    async def acquire(self, run_id: str, *, owner: str, now: float, until: float,
                      steal_from: str | None = None) -> bool:
        """Take the run's lease if it is free, expired, ours, or held by ``steal_from``
        (a holder known to be dead); False if another live process holds it."""

    async def release(self, run_id: str, *, owner: str) -> None: ...

    async def list_runs(self, *, status: str | None, limit: int) -> list[RunSummary]: ...

    async def delete_finished_before(self, cutoff: float) -> int:
        """Delete finished runs that ended before ``cutoff``; how many were deleted."""
