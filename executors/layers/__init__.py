"""Defense layers applied when a step attempt fails, and the default recovery chain."""

from __future__ import annotations

from executors.recovery import RecoveryHandler
from orchestration.config import OrchestratorConfig


def default_handlers(config: OrchestratorConfig) -> list[RecoveryHandler]:
    """The standard recovery chain for ``config``, in the order handlers are consulted."""
    return []
