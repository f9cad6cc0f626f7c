"""Everything one run shares: query, catalog, config, LLM gateway, telemetry, outputs.

Planners and executors receive a :class:`RunContext` instead of reaching for globals, so
two runs in one process never see each other's state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from orchestration._transport import ToolTransport
from orchestration.catalog import Catalog
from orchestration.clock import Clock
from orchestration.config import OrchestratorConfig
from orchestration.llm._gateway import LLMGateway
from orchestration.result import RunUsage
from orchestration.telemetry import Telemetry


@dataclass
class RunContext:
    """The state of one run. ``outputs`` holds succeeded steps' data by step id."""

    run_id: str
    query: str
    catalog: Catalog
    config: OrchestratorConfig
    llm: LLMGateway
    telemetry: Telemetry
    transport: ToolTransport
    clock: Clock
    usage: RunUsage
    run_deadline: float  # event-loop time after which nothing new starts
    outputs: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
