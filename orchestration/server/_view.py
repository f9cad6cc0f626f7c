"""What the run page shows, computed from a ``RunResult`` and the run's events.

The template only lays out what is here: the DAG picture, one timeline row per step
(its bar on the run's time axis, one segment per attempt: the wait before it, then the
call), each attempt's layer, outcome, parameters and error, and the pending approvals.
An attempt whose parameters a layer got from an LLM (layer 3 or 4) is marked, and the
run's LLM calls are counted by purpose.

The time axis cuts out long stretches in which no step ran — a run that waited hours
for an approval would otherwise squash all of its work into a sliver — and marks each
cut, so the picture stays readable while the times shown stay true.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from orchestration.events import RunEvent
from orchestration.result import Attempt, RunResult, StepResult
from orchestration.server._dag import DagPicture, layout
from orchestration.server._stream import FINAL_STATUSES

__all__ = ["BAR_W", "RunView", "run_view"]

BAR_W = 240
"""Width of a timeline bar in SVG units."""

LAYER_NAMES = {
    "plan": "planner (layer 1)",
    "resilience": "resilience retry",
    "validation_feedback": "validation feedback (layer 3)",
    "semantic_retry": "semantic retry (layer 4)",
    "transient_override": "transient override (layer 4)",
    "approval": "approved by a person",
}
LLM_LAYERS = frozenset({"validation_feedback", "semantic_retry", "transient_override"})
"""Layers whose attempts carry parameters (or a verdict) an LLM call produced."""


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def _seconds(value: float) -> str:
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


@dataclass(frozen=True, slots=True)
class Segment:
    x: float
    width: float
    kind: str
    """``delay`` (a wait before the attempt) or the attempt's outcome."""
    title: str


class TimeAxis:
    """Maps wall-clock times of a run to x positions in ``[0, BAR_W]``, with idle gaps
    longer than the run's busy time (and than a second) cut down to a short break."""

    def __init__(self, spans: list[tuple[float, float]]) -> None:
        merged: list[list[float]] = []
        for start, end in sorted(spans):
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        busy = sum(end - start for start, end in merged)
        self.origin = merged[0][0] if merged else 0.0
        self.cut_gap = max(1.0, busy)
        self.break_len = max(busy, 1e-3) * 0.04
        self.pieces: list[tuple[float, float, float]] = []  # (real start, real end, axis start)
        self.cuts: list[tuple[float, float]] = []  # (axis position, real seconds cut)
        axis = 0.0
        for index, (start, end) in enumerate(merged):
            if index:
                gap = start - merged[index - 1][1]
                if gap > self.cut_gap:
                    self.cuts.append((axis + self.break_len / 2, gap))
                    axis += self.break_len
                else:
                    axis += gap
            self.pieces.append((start, end, axis))
            axis += end - start
        self.length = max(axis, 1e-3)
        self.real_span = (merged[-1][1] - self.origin) if merged else 0.0

    def x(self, when: float) -> float:
        """Where ``when`` falls on the bar (times inside a cut gap stay at its start)."""
        position = 0.0
        for start, end, axis in self.pieces:
            if when < start:
                break
            position = axis + min(when, end) - start
        return position * BAR_W / self.length

    def cut_marks(self) -> list[tuple[float, str]]:
        return [(axis * BAR_W / self.length, f"{_seconds(gap)} in which no step ran")
                for axis, gap in self.cuts]


def _on_bar(x: float, width: float) -> tuple[float, float]:
    """``(x, width)`` moved left as needed to end inside the bar: a minimum-width mark
    at the axis's end (a step that paused at once, the last instant of a run) would
    otherwise be cut in half by the bar's edge."""
    return max(min(x, BAR_W - width), 0.0), width


@dataclass(slots=True)
class AttemptView:
    key: str
    number: int
    layer: str
    layer_name: str
    by_llm: bool
    outcome: str
    delay: str | None
    latency: str
    error_code: str | None
    error_message: str | None
    params_json: str
    error_json: str | None
    coercions: list[str]
    validation_errors: list[str]
    analysis: str | None
    produced_by: str


@dataclass(slots=True)
class StepView:
    id: str
    tool: str
    capability: str
    status: str
    duration: str | None
    attempts: list[AttemptView] = field(default_factory=list)
    segments: list[Segment] = field(default_factory=list)
    bar: tuple[float, float] | None = None
    cuts: list[tuple[float, str]] = field(default_factory=list)
    output_json: str | None = None
    error: str | None = None
    skipped_reason: str | None = None


@dataclass(slots=True)
class PendingView:
    step_id: str
    capability: str | None
    reason: str
    params_json: str


@dataclass(slots=True)
class RunView:
    result: RunResult
    final: bool
    dag: DagPicture | None
    steps: list[StepView]
    pending: list[PendingView]
    llm_calls: list[tuple[str, int]]
    span: str | None
    """The time axis's range, None while no step has started."""
    counts: list[tuple[str, int]]
    cut: str | None
    plan_note: str | None = None
    """Why there is no plan to draw, in the words of the run's state."""
    steps_note: str = ""
    """Why there is no step to show."""
    time_label: str = "wall time"
    elapsed_s: float = 0.0
    """Seconds shown beside ``time_label``; ``live`` ones grow in the page."""
    live: bool = False
    waiting_since: float | None = None
    drawn: list[str] = field(default_factory=list)
    """The segment kinds the timeline draws: each has a legend entry."""


def _notes(result: RunResult) -> tuple[str | None, str]:
    """What the page says in place of a plan and of steps, for each run state."""
    status, planned = result.status, result.plan is not None
    if planned:
        plan_note = None
    elif status == "failed":
        plan_note = "No plan: planning failed (the error above says why)."
    elif status == "cancelled":
        plan_note = "No plan: the run was cancelled before its plan was ready."
    elif status == "running":
        plan_note = "No plan yet: the planner is at work."
    else:
        plan_note = "No plan."
    if status in ("failed", "cancelled", "partial", "succeeded"):
        steps_note = "No step ran."
    elif status == "awaiting_approval":
        steps_note = "No step runs until the plan is approved (see above)."
    elif planned:
        steps_note = "No step has started yet."
    else:
        steps_note = "Steps start once the plan is ready."
    return plan_note, steps_note


def _produced_by(attempt: Attempt) -> str:
    """What produced the attempt: its layer's name and its note, the name said once (a
    resilience note is 'resilience retry 1/2 after ...', an approved attempt's note
    'approved by a person: <the person's note>')."""
    name = LAYER_NAMES.get(attempt.layer, attempt.layer)
    note = attempt.note
    if not note:
        return name
    if attempt.layer == "approval":
        said = note.removeprefix(name).removeprefix(":").strip()
        return f"{name} · note: {said}" if said else name
    return note if note.startswith(name) else f"{name} · {note}"


def _attempt_view(step_id: str, attempt: Attempt) -> AttemptView:
    error = attempt.error
    return AttemptView(
        key=f"{step_id}#{attempt.number}", number=attempt.number, layer=attempt.layer,
        layer_name=LAYER_NAMES.get(attempt.layer, attempt.layer),
        by_llm=attempt.layer in LLM_LAYERS, outcome=attempt.outcome,
        delay=_seconds(attempt.delay_s) if attempt.delay_s else None,
        latency=_seconds(attempt.latency_s),
        error_code=error.code if error is not None else None,
        error_message=error.message if error is not None else None,
        params_json=_json(attempt.params),
        error_json=_json(error.model_dump(mode="json", exclude_none=True))
        if error is not None else None,
        coercions=[f"{c.path}: {c.old!r} → {c.new!r}" + (f" ({c.rule})" if c.rule else "")
                   for c in attempt.coercions],
        validation_errors=[str(v.get("message", v)) for v in attempt.validation_errors],
        analysis=attempt.analysis, produced_by=_produced_by(attempt))


def _segments(step: StepResult, axis: TimeAxis) -> list[Segment]:
    """The step's attempts one after the other from its start: the wait, then the call."""
    if step.started_at_s is None:
        return []
    when = step.started_at_s
    out = []
    for attempt in step.attempts:
        if attempt.delay_s:
            out.append(Segment(axis.x(when), axis.x(when + attempt.delay_s) - axis.x(when),
                               "delay", f"#{attempt.number}: waited {_seconds(attempt.delay_s)}"))
            when += attempt.delay_s
        x, width = _on_bar(axis.x(when), max(axis.x(when + attempt.latency_s) - axis.x(when), 1.5))
        out.append(Segment(x, width, attempt.outcome,
                           f"#{attempt.number} {attempt.layer}: {attempt.outcome} in "
                           f"{_seconds(attempt.latency_s)}"))
        when += attempt.latency_s
    return out


def run_view(result: RunResult, events: list[RunEvent], *, started_at: float | None = None,
             now: float | None = None) -> RunView:
    """The page's model of ``result``; ``events`` tell which steps are running now (and
    since when), ``started_at`` when the run began, ``now`` the time of the page."""
    now = time.time() if now is None else now
    finished = set(result.steps)
    running_since: dict[str, float] = {}
    for event in events:
        sid = event.data.get("step_id")
        if event.type == "step_started" and isinstance(sid, str) and sid not in finished:
            running_since[sid] = event.at
    final = result.status in FINAL_STATUSES
    if final or result.status == "awaiting_approval":
        running_since = {}  # an interrupted or waiting step is not running
    statuses: dict[str, str] = {sid: s.status for sid, s in result.steps.items()}
    for sid in running_since:
        statuses[sid] = "running"
    plan_ids = [s["id"] for s in (result.plan or {}).get("steps", [])]
    dag = layout(result.plan, statuses) if result.plan else None
    timed = [s for s in result.steps.values() if s.started_at_s is not None]
    axis = TimeAxis([(s.started_at_s or 0.0, (s.started_at_s or 0.0) + s.duration_s)
                     for s in timed] + [(since, now) for since in running_since.values()])
    cuts = axis.cut_marks()
    order = [sid for sid in plan_ids if sid in result.steps]
    order += [sid for sid in result.steps if sid not in order]  # repair rounds' steps
    order += [sid for sid in plan_ids if sid not in result.steps]  # not finished yet
    steps = []
    for sid in order:
        step = result.steps.get(sid)
        if step is None:
            plan_step = next(s for s in (result.plan or {}).get("steps", []) if s["id"] == sid)
            view = StepView(id=sid, tool=plan_step["tool"], capability=plan_step["capability"],
                            status=statuses.get(sid, "pending"), duration=None, cuts=cuts)
            since = running_since.get(sid)
            if since is not None:  # running now: its bar reaches the page's time
                x, width = _on_bar(axis.x(since), max(axis.x(now) - axis.x(since), 1.5))
                view.bar = (x, width)
                view.duration = f"{_seconds(now - since)} so far"
                view.segments = [Segment(x, width, "running",
                                         f"running for {_seconds(now - since)}")]
            steps.append(view)
            continue
        bar = None
        if step.started_at_s is not None:
            start_x = axis.x(step.started_at_s)
            bar = _on_bar(start_x, max(axis.x(step.started_at_s + step.duration_s) - start_x, 1.5))
        # a step that waits for a person before its first call has no time of its own yet
        has_time = step.started_at_s is not None and not (
            step.status == "awaiting_approval" and not step.attempts)
        steps.append(StepView(
            id=sid, tool=step.tool, capability=step.capability, status=step.status,
            duration=_seconds(step.duration_s) if has_time else None,
            attempts=[_attempt_view(sid, a) for a in step.attempts],
            segments=_segments(step, axis), bar=bar, cuts=cuts,
            output_json=_json(step.output) if step.status == "succeeded" else None,
            error=step.error.describe() if step.error is not None else None,
            skipped_reason=step.skipped_reason))
    pending = [PendingView(step_id=p.step_id,
                           capability=f"{p.tool}.{p.capability}" if p.tool else None,
                           reason=p.reason, params_json=_json(p.params))
               for p in result.pending_approvals]
    counts: dict[str, int] = {}
    for step_view in steps:
        counts[step_view.status] = counts.get(step_view.status, 0) + 1
    llm = [(purpose, slot.get("calls", 0)) for purpose, slot in result.usage.by_purpose.items()]
    plan_note, steps_note = _notes(result)
    run = RunView(result=result, final=final, dag=dag, steps=steps,
                   pending=pending, llm_calls=llm,
                   span=_seconds(axis.real_span) if timed or running_since else None,
                   counts=sorted(counts.items()),
                   cut=" and ".join(label for _, label in cuts) or None,
                   plan_note=plan_note, steps_note=steps_note,
                   elapsed_s=result.usage.wall_time_s,
                   drawn=sorted({seg.kind for s in steps for seg in s.segments}))
    if result.status == "running" and started_at is not None:
        run.time_label, run.elapsed_s, run.live = "running for", max(now - started_at, 0.0), True
    elif result.status == "awaiting_approval":
        run.time_label = "worked"
        run.waiting_since = min((p.requested_at for p in result.pending_approvals), default=None)
    elif max(axis.real_span, events[-1].at - events[0].at if events else 0.0) > \
            result.usage.wall_time_s + 0.05:
        # it paused (for a person) or stopped and was resumed: its steps — or, when the
        # first step was the one that waited, its events — span more time than it spent
        # running, and that is not a wall time
        run.time_label = "worked"
    return run
