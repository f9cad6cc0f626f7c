"""Whether a run is being cancelled on purpose, as the code executing it sees it.

A run's task can be cancelled for two reasons that must end differently. A **deliberate
cancellation** (:meth:`Orchestrator.acancel`) ends the run ``cancelled``, a final status,
and records the steps it stopped. A **shutdown** of the process (or a caller leaving
``astream`` early) must leave the run ``running`` in the store so that a resume continues
it: the steps in flight are not recorded at all. Both arrive as ``CancelledError``; this
flag, set before the task is cancelled and shared through the run's services, tells them
apart.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Cancellation"]


@dataclass(slots=True)
class Cancellation:
    """``reason`` is set when the run is being cancelled on purpose (None: it is not)."""

    reason: str | None = None

    @property
    def requested(self) -> bool:
        return self.reason is not None
