"""What a run *uses*: the catalog, settings, LLM gateway, transport, observer and clock.

:class:`RunServices` is the run's dependencies, kept apart from the
:class:`~orchestration.state.RunState` (what the run *is*). Services are never stored:
they are built by the orchestrator for each run (the gateway holds the run's LLM budget,
the deadline is the run's own) and rebuilt where a stored run continues.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from orchestration._cancellation import Cancellation
from orchestration._events import EventSink
from orchestration._transport import ToolTransport
from orchestration.catalog import Catalog
from orchestration.clock import Clock
from orchestration.config import OrchestratorConfig
from orchestration.layer_settings import LayerSettings
from orchestration.llm._gateway import LLMGateway
from orchestration.store._recorder import RunRecorder
from orchestration.telemetry._observer import Observer

__all__ = ["RunServices"]


@dataclass(frozen=True, slots=True)
class RunServices:
    """The dependencies of one run.

    ``catalog`` is the snapshot the run planned with; ``layers`` the global layer
    settings (a capability's overrides are applied per step); ``recorder`` writes the run
    to its store; ``events`` numbers and delivers its events; ``deadline`` is event-loop
    time after which nothing new starts; ``cancellation`` says whether a cancellation of
    the run's task is deliberate (the run ends ``cancelled``) or a shutdown (it stays
    resumable).
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
    cancellation: Cancellation = field(default_factory=Cancellation)
