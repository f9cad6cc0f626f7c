"""Run events: what a run reports while it works, in order, for callbacks and streams.

Every event carries the run id, a sequence number (1, 2, ... across the whole run, a
resumed run continuing where it stopped) and a timestamp; ``type`` says what happened and
``data`` holds its facts:

=====================  ===========================================================
type                   data
=====================  ===========================================================
``plan_ready``         ``plan`` (the validated plan), ``steps`` (count), ``source``
                       (``llm``, ``cache``, ``caller``, ``workflow``)
``plan_discarded``     ``reason``, ``steps`` (ids started while a plan streamed whose
                       results were dropped: that plan answer was not accepted)
``step_started``       ``step_id``, ``tool``, ``capability``
``attempt_finished``   ``step_id``, ``attempt``, ``layer``, ``outcome``, ``error_code``
``step_finished``      ``step_id``, ``status``, ``attempts``, ``duration_s``
``approval_required``  ``step_id``, ``tool``, ``capability``, ``params``, ``reason``
``circuit_changed``    ``step_id``, ``tool``, ``state`` (``open``, ``half_open``,
                       ``closed``), ``previous``, ``failures``, ``reason``: this
                       step's call changed the tool's circuit breaker
``answer_delta``       ``text`` (a piece of the answer as the model streams it)
``run_finished``       ``status``, ``error``
=====================  ===========================================================

Events reach ``orch.arun(query, on_event=callback)`` as they happen and
``orch.astream(query)`` as an async iterator; they are also stored with the run, so a
late reader replays them with ``orch.get_events(run_id)``. See ``docs/events.md``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

__all__ = ["EVENT_TYPES", "EventType", "RunEvent"]

EventType = Literal["plan_ready", "plan_discarded", "step_started", "attempt_finished",
                    "step_finished", "approval_required", "circuit_changed", "answer_delta",
                    "run_finished"]
EVENT_TYPES: tuple[str, ...] = ("plan_ready", "plan_discarded", "step_started",
                                "attempt_finished", "step_finished", "approval_required",
                                "circuit_changed", "answer_delta", "run_finished")


class RunEvent(BaseModel):
    """One thing that happened in a run (see the table in this module's docstring)."""

    run_id: str
    seq: int
    type: EventType
    at: float
    data: dict[str, Any] = Field(default_factory=dict)
    context: dict[str, Any] | None = None
    """The run's context (who it is for), on every event of the run; stored once with
    the run, not with each event."""
