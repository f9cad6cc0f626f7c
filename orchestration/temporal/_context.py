"""What a worker's workflows share: its catalog and the engines that run them.

Temporal creates workflow objects itself, with the run's input as their only argument,
so a workflow finds what its worker brought — the catalog (Python tools, MCP and OpenAPI
sources included), the recovery handlers, the planner — here, by the task queue it runs
on. A worker registers on start and unregisters on shutdown; several workers of one
process (tests) register under different task queues.

Every worker polling a task queue must load the same catalog: a run moves between
workers, and one replayed on another worker must make the same decisions it made first.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from orchestration._engine import RunEngine
from orchestration.catalog import Catalog
from orchestration.errors import ConfigError
from orchestration.temporal._payloads import config_from_payload

if TYPE_CHECKING:
    from executors.recovery import RecoveryHandler
    from planners.planner import Planner

__all__ = ["WorkerContext", "context_for", "register", "unregister"]

_MAX_ENGINES = 32
"""Distinct run configurations whose engines a worker keeps (clients rarely differ)."""


@dataclass
class WorkerContext:
    """The catalog snapshot and engine parts one worker gives its workflows."""

    catalog: Catalog
    planner: Planner | None = None
    handlers: list[RecoveryHandler] | None = None
    _engines: dict[str, RunEngine] = field(default_factory=dict)

    def engine_for(self, config_payload: dict[str, Any]) -> RunEngine:
        """The engine of runs started with these settings (one per distinct configuration:
        an engine keeps prepared capabilities, so it is worth sharing between runs)."""
        key = json.dumps(config_payload, sort_keys=True)
        engine = self._engines.get(key)
        if engine is None:
            if len(self._engines) >= _MAX_ENGINES:
                self._engines.pop(next(iter(self._engines)))
            engine = RunEngine(config_from_payload(config_payload), planner=self.planner,
                               handlers=self.handlers)
            self._engines[key] = engine
        return engine


_CONTEXTS: dict[str, WorkerContext] = {}


def register(task_queue: str, context: WorkerContext) -> None:
    if task_queue in _CONTEXTS:
        raise ConfigError(f"a dagwright worker of this process already serves task queue "
                          f"{task_queue!r}; one process runs one worker per task queue")
    _CONTEXTS[task_queue] = context


def unregister(task_queue: str) -> None:
    _CONTEXTS.pop(task_queue, None)


def context_for(task_queue: str) -> WorkerContext:
    """The context of the worker serving ``task_queue`` in this process; the only one
    when there is exactly one (a :class:`temporalio.worker.Replayer` replays on a task
    queue of its own)."""
    context = _CONTEXTS.get(task_queue)
    if context is None and len(_CONTEXTS) == 1:
        context = next(iter(_CONTEXTS.values()))
    if context is None:
        raise ConfigError(f"no dagwright worker of this process serves task queue "
                          f"{task_queue!r}")
    return context
