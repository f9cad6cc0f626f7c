"""What a run *uses*: the catalog, settings, LLM gateway, transport, observer and clock.

:class:`RunServices` is the run's dependencies, kept apart from the
:class:`~orchestration.state.RunState` (what the run *is*). Services are never stored:
they are built by the orchestrator for each run (the gateway holds the run's LLM budget,
the deadline is the run's own) and rebuilt where a stored run continues.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from orchestration._transport import ToolTransport
from orchestration.catalog import Capability, Catalog
from orchestration.clock import Clock
from orchestration.config import OrchestratorConfig
from orchestration.layer_settings import LayerSettings
from orchestration.llm._gateway import LLMGateway
from orchestration.result import Attempt
from orchestration.telemetry._observer import Observer

__all__ = ["CallInspector", "RunServices"]


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
    settings (a capability's overrides are applied per step); ``deadline`` is event-loop
    time after which nothing new starts; ``calls`` compares calls for the re-send guard
    where the executor cannot be imported (None: compare raw parameters).
    """

    catalog: Catalog
    config: OrchestratorConfig
    layers: LayerSettings
    llm: LLMGateway
    transport: ToolTransport
    observer: Observer
    clock: Clock
    deadline: float
    calls: CallInspector | None = None
