"""What the facade's parts read of the facade: its public attributes.

The parts hold the :class:`~orchestration.orchestrator.Orchestrator` as
:class:`FacadeParts` and read an attribute where they use it, as the facade's methods
did, so there is one place each part lives (on the facade) and nothing is copied.
"""

from __future__ import annotations

from typing import Protocol

from orchestration._engine import RunEngine
from orchestration.catalog import Catalog
from orchestration.clock import Clock
from orchestration.config import OrchestratorConfig
from orchestration.debug_store import LLMDebugStore
from orchestration.layer_settings import LayerSettings
from orchestration.llm.base import LLMClient
from orchestration.redaction import Redactor
from orchestration.store import RunStore
from orchestration.telemetry._observer import Observer


class FacadeParts(Protocol):
    """The orchestrator's parts, as its constructor made them."""

    config: OrchestratorConfig
    catalog: Catalog
    llm: LLMClient
    redactor: Redactor
    observer: Observer
    debug_store: LLMDebugStore | None
    clock: Clock
    layers: LayerSettings
    engine: RunEngine
    store: RunStore
