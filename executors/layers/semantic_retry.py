"""PLACEHOLDER being replaced in this session: declines every failure."""

from __future__ import annotations

from executors.recovery import Decision, GiveUp, StepState
from orchestration.config import OrchestratorConfig
from orchestration.protocol import StepError


class SemanticRetry:
    def __init__(self, config: OrchestratorConfig) -> None:
        self.config = config

    async def decide(self, state: StepState, error: StepError) -> Decision | GiveUp | None:
        return None
