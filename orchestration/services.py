"""What a run *uses*: the catalog, settings, LLM gateway, transport, observer and clock.

:class:`RunServices` is the run's dependencies, kept apart from the
:class:`~orchestration.state.RunState` (what the run *is*). Services are never stored:
they are built by the orchestrator for each run (the gateway holds the run's LLM budget,
the deadline is the run's own) and rebuilt where a stored run continues.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from orchestration._budget import RunBudget
from orchestration._events import EventSink
from orchestration._transport import ToolTransport
from orchestration.catalog import Catalog
from orchestration.clock import Clock
from orchestration.config import OrchestratorConfig
from orchestration.layer_settings import LayerSettings
from orchestration.llm._gateway import LLMGateway
from orchestration.store._recorder import RunRecorder
from orchestration.telemetry._observer import Observer

__all__ = ["AnswerDeltaConsumer", "RunServices"]

AnswerDeltaConsumer = Callable[[str], Awaitable[None] | None]
"""Receives each piece of a streamed answer as it is written, in order; sync or async."""


@dataclass(frozen=True, slots=True)
class RunServices:
    """The dependencies of one run.

    ``catalog`` is the snapshot the run planned with; ``layers`` the global layer
    settings (a capability's overrides are applied per step); ``recorder`` writes the run
    to its store; ``events`` numbers and delivers its events; ``deadline`` is event-loop
    time after which nothing new starts; ``budget`` the run's budgets (LLM calls, tokens,
    cost, calls per capability), asked before every LLM and tool call. ``on_answer_delta``,
    when set, receives the answer as it is streamed (the text of ``answer_delta`` events);
    without it the answer is asked for whole.
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
