"""What a run *uses*: the catalog, settings, LLM gateway, transport, observer and clock.

:class:`RunServices` is the run's dependencies, kept apart from the
:class:`~orchestration.state.RunState` (what the run *is*). Services are never stored:
they are built by the orchestrator for each run (the gateway holds the run's LLM budget,
the deadline is the run's own) and rebuilt where a stored run continues.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestration._budget import RunBudget
from orchestration._transport import ToolTransport
from orchestration.catalog import Catalog
from orchestration.clock import Clock
from orchestration.config import OrchestratorConfig
from orchestration.layer_settings import LayerSettings
from orchestration.llm._gateway import LLMGateway
from orchestration.telemetry._observer import Observer

__all__ = ["RunServices"]


@dataclass(frozen=True, slots=True)
class RunServices:
    """The dependencies of one run.

    ``catalog`` is the snapshot the run planned with; ``layers`` the global layer
    settings (a capability's overrides are applied per step); ``deadline`` is event-loop
    time after which nothing new starts; ``budget`` the run's budgets (LLM calls, tokens,
    cost, calls per capability), asked before every LLM and tool call.
    """

    catalog: Catalog
    config: OrchestratorConfig
    layers: LayerSettings
    llm: LLMGateway
    transport: ToolTransport
    observer: Observer
    clock: Clock
    deadline: float
    budget: RunBudget
