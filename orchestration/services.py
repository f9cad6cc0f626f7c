"""What a run *uses*: the catalog, settings, LLM gateway, transport, observer and clock.

:class:`RunServices` is the run's dependencies, kept apart from the
:class:`~orchestration.state.RunState` (what the run *is*). Services are never stored:
they are built by the orchestrator for each run (the gateway holds the run's LLM budget,
the deadline is the run's own) and rebuilt where a stored run continues.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from orchestration._budget import RunBudget
from orchestration._cancellation import Cancellation
from orchestration._events import EventSink
from orchestration._plan_cache import PlanCache
from orchestration._transport import ToolTransport
from orchestration.catalog import Capability, Catalog
from orchestration.clock import Clock
from orchestration.config import OrchestratorConfig
from orchestration.credentials import RunCredentials
from orchestration.layer_settings import LayerSettings
from orchestration.llm._gateway import LLMGateway
from orchestration.result import Attempt
from orchestration.sessions import SessionHistory
from orchestration.store._recorder import RunRecorder
from orchestration.telemetry._observer import Observer

__all__ = ["AnswerDeltaConsumer", "CallInspector", "RunServices"]

AnswerDeltaConsumer = Callable[[str], Awaitable[None] | None]
"""Receives each piece of a streamed answer as it is written, in order; sync or async."""


class CallInspector(Protocol):
    """"The same call?" and "may it be sent again?", for code that cannot import the
    executor (planners checking a repair plan). The executor's implementation binds and
    coerces parameters exactly as a step would before comparing, so a call that differs
    only in form (``"100"`` for ``100``) is the same call (see ``executors._resend``)."""

    def fingerprint(
        self, capability: Capability, params: Mapping[str, Any], outputs: Mapping[str, Any]
    ) -> str | None:
        """The identity of the call ``params`` make once bound to ``outputs`` and
        coerced; None when a reference cannot be bound."""
        ...

    def resend_blocked(
        self, capability: Capability, params: Mapping[str, Any], outputs: Mapping[str, Any],
        history: Iterable[Attempt],
    ) -> str | None:
        """Why sending this call is unsafe given the attempts in ``history``, or None."""
        ...


@dataclass(frozen=True, slots=True)
class RunServices:
    """The dependencies of one run.

    ``catalog`` is the snapshot the run planned with; ``layers`` the global layer
    settings (a capability's overrides are applied per step); ``recorder`` writes the run
    to its store; ``events`` numbers and delivers its events; ``deadline`` is event-loop
    time after which nothing new starts; ``budget`` the run's budgets (LLM calls, tokens,
    cost, calls per capability), asked before every LLM and tool call. ``on_answer_delta``,
    when set, receives the answer as it is streamed (the text of ``answer_delta`` events);
    without it the answer is asked for whole. ``calls`` compares calls for the re-send
    guard where the executor cannot be imported (None: compare raw parameters).
    ``stream_answer`` False asks for the answer whole even when someone watches (a
    Temporal workflow: deltas cannot leave it as they are written). ``cancellation`` says
    whether a cancellation of the run's task is deliberate (the run ends ``cancelled``)
    or a shutdown (it stays resumable). ``credentials`` are the run's per-run
    credentials (handed only to the transport: never to anything that records);
    ``session`` the earlier runs of its session (what ``{{run:N.step}}`` binds to).
    ``plans``: the plan cache, when ``ORCH_PLAN_CACHE`` is on (local backend).
    """

    catalog: Catalog
    config: OrchestratorConfig
    layers: LayerSettings
    llm: LLMGateway
    transport: ToolTransport
    observer: Observer
    recorder: RunRecorder
    events: EventSink
    clock: Clock
    deadline: float
    budget: RunBudget
    on_answer_delta: AnswerDeltaConsumer | None = None
    calls: CallInspector | None = None
    cancellation: Cancellation = field(default_factory=Cancellation)
    stream_answer: bool = True
    plans: PlanCache | None = None
    credentials: RunCredentials | None = None
    session: SessionHistory | None = None

    @property
    def earlier_outputs(self) -> dict[str, Any]:
        """The outputs of the session's earlier runs a reference may name (empty
        without a session)."""
        return self.session.outputs if self.session is not None else {}
