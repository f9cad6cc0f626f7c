"""Sessions: follow-up questions that build on the runs before them.

``run("flights to Lisbon on Friday", session_id="trip-7")`` then
``run("and for next week?", session_id="trip-7")``: runs of one session are numbered 1,
2, 3... within the session's tenant (a session id of tenant A is not tenant B's), and the
planner of a later run is shown the earlier ones — their queries, their answers, and a
bounded, relevance-cut view of their step outputs (the rule and the budget are in
``planners/_session_view.py`` and docs/context.md) — so a plan may use an earlier run's
output directly: ``{{run:1.search.flights[0].id}}`` is step ``search`` of run 1 of this
session. Such a reference is checked like any other — it must name an output an earlier
run of the session has (among the :attr:`SessionHistory.runs` kept), its path is checked
against the data, it binds to that data, and a layer-4 correction may cite it — but it
makes no edge in the plan: the earlier run has finished.

Sessions live in the run store (a session row numbers its runs; each run records its
session id and number), on both backends: on Temporal, the client numbers the run and
hands the workflow the earlier runs it may use as input, so a replay sees the same.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from orchestration.errors import InvalidInput
from orchestration.store._base import RunSummary

if TYPE_CHECKING:
    from orchestration.store import RunStore

__all__ = ["SESSION_ID_PATTERN", "AnyEarlier", "EarlierRun", "Session", "SessionHistory", "check_session_id",
           "earlier_key", "load_history"]

SESSION_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$"
"""What a ``session_id`` may look like (it names URLs and log lines, like a run id)."""
_SESSION_ID = re.compile(SESSION_ID_PATTERN)


def check_session_id(session_id: str) -> None:
    """:class:`InvalidInput` for a session id that cannot name URLs and log lines."""
    if not isinstance(session_id, str) or not _SESSION_ID.match(session_id):
        raise InvalidInput(f"session_id {str(session_id)[:80]!r} is not usable: use 1-200 "
                           "letters, digits, '_', '.', ':' or '-', starting with a letter or "
                           "digit")


def earlier_key(number: int, step_id: str) -> str:
    """How a reference names step ``step_id`` of run ``number`` of the session: the key
    its output has in :attr:`SessionHistory.outputs` (``run:1.search``)."""
    return f"run:{number}.{step_id}"


class Session(BaseModel):
    """A session and its runs (``Orchestrator.get_session``), newest run first."""

    id: str
    tenant: str | None = None
    created_at: float
    updated_at: float
    runs: list[RunSummary] = Field(default_factory=list)


@dataclass(frozen=True, slots=True)
class EarlierRun:
    """What a later run of the session may use of an earlier one."""

    number: int
    run_id: str
    query: str
    status: str
    answer: str | None
    outputs: dict[str, Any] = field(default_factory=dict)
    """Data of its succeeded steps, by step id."""
    capabilities: dict[str, str] = field(default_factory=dict)
    """``tool.capability`` of each of those steps."""


@dataclass(frozen=True)
class SessionHistory:
    """The earlier runs of a run's session (at most ``ORCH_SESSION_HISTORY_RUNS``, the
    newest), oldest first; part of the run's services, rebuilt where the run continues
    (they are in the store already)."""

    session_id: str
    number: int
    runs: list[EarlierRun]
    tenant: str | None = None

    @functools.cached_property
    def outputs(self) -> dict[str, Any]:
        """Every earlier output a reference may name, by ``run:N.step`` key."""
        return {earlier_key(r.number, sid): out for r in self.runs for sid, out in r.outputs.items()}

    def to_payload(self) -> dict[str, Any]:
        """As JSON (the Temporal workflow's input)."""
        return {"session_id": self.session_id, "number": self.number, "tenant": self.tenant,
                "runs": [{"number": r.number, "run_id": r.run_id, "query": r.query,
                          "status": r.status, "answer": r.answer, "outputs": r.outputs,
                          "capabilities": r.capabilities} for r in self.runs]}

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> SessionHistory:
        return cls(session_id=payload["session_id"], number=int(payload["number"]),
                   tenant=payload.get("tenant"),
                   runs=[EarlierRun(**run) for run in payload.get("runs", [])])


class AnyEarlier:
    """A container that takes every ``run:N.step`` key: for checking a caller's plan
    before its run knows its session (the run checks it again with the real outputs)."""

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key.startswith("run:")


def _earlier(numbers: Iterable[int], loaded: Mapping[int, Any]) -> list[EarlierRun]:
    out: list[EarlierRun] = []
    for number in sorted(numbers):
        state = loaded[number]
        succeeded = {sid: s for sid, s in state.steps.items() if s.status == "succeeded"
                     and sid not in state.superseded}
        out.append(EarlierRun(
            number=number, run_id=state.run_id, query=state.query, status=state.status,
            answer=state.answer, outputs={sid: s.output for sid, s in succeeded.items()},
            capabilities={sid: f"{s.tool}.{s.capability}" for sid, s in succeeded.items()}))
    return out


async def load_history(store: RunStore, tenant: str | None, session_id: str, number: int,
                       max_runs: int) -> SessionHistory:
    """The session's runs numbered before ``number`` (the newest ``max_runs``) as a
    later run sees them; a run still going or lost to retention is left out."""
    summaries = await store.list_runs(status=None, limit=max_runs + 10, tenant=tenant or "",
                                      session_id=session_id)
    loaded: dict[int, Any] = {}
    for summary in summaries:
        run_number = summary.session_run
        if run_number is None or run_number >= number or len(loaded) >= max_runs:
            continue
        if summary.status in ("running", "awaiting_approval"):
            continue  # not finished: nothing of it is settled enough to build on
        stored = await store.load(summary.run_id)
        if stored is not None:
            loaded[run_number] = stored.state
    return SessionHistory(session_id=session_id, number=number, tenant=tenant,
                          runs=_earlier(loaded, loaded))
