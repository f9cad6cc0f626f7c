"""The live progress of a run on stderr, drawn from its events while stdout stays the
result: a table redrawn in place on a terminal, plain lines in a pipe or a log file."""

from __future__ import annotations

import argparse
import io
import logging
import sys
import threading
from typing import Any, TextIO, cast

from orchestration.cli._parser import log_level, quiet
from orchestration.config import OrchestratorConfig
from orchestration.events import RunEvent

_PARAMS_FROM = {
    "plan": "parameters as planned",
    "resilience": "sent again after a transport fault",
    "validation_feedback": "parameters corrected from the tool's validation errors",
    "semantic_retry": "parameters re-resolved from the query and upstream outputs",
    "transient_override": "sent again: the error judged transient",
    "approval": "parameters approved by a person",
}
"""What an attempt's layer says about it, in a progress line (the layer names where the
attempt's parameters came from, not who stopped it)."""

_PROGRESS_LOCK = threading.Lock()
"""Log records come from threads (sync Python tools); the display is one stream."""


def progress_lock() -> threading.Lock:
    return _PROGRESS_LOCK


class Progress:
    """Live progress of a run from its events, on stderr (stdout stays the result).

    On a terminal: a table of steps redrawn in place as they change. Otherwise (a pipe,
    a log file): one plain line per step event. Log lines go above the table
    (:meth:`log_stream`), never through it.
    """

    def __init__(self, stream: TextIO, *, continuing: bool = False) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.rows: dict[str, str] = {}
        self.drawn = 0
        self.planned = continuing  # a resumed run has its plan: its steps are not streamed
        self.waiting: list[str] = []

    def __call__(self, event: RunEvent) -> None:
        data = event.data
        with progress_lock():
            self._event(event, data)

    def _event(self, event: RunEvent, data: dict[str, Any]) -> None:
        if event.type == "plan_ready":
            started = f", {len(self.rows)} started as it streamed in" if self.rows else ""
            self._line(f"plan ready: {data['steps']} step(s){started} [run {event.run_id}]")
            self.planned = True
        elif event.type == "plan_discarded":
            for step_id in data["steps"]:  # started while the plan streamed: void now
                self.rows.pop(step_id, None)
            self._line(f"plan discarded: {data['reason']}")
        elif event.type == "step_started":
            if not self.planned and not self.rows:
                self._line(f"planning: steps start as the plan streams in [run {event.run_id}]")
            self._step(data["step_id"], f"running   {data['tool']}.{data['capability']}")
        elif event.type == "attempt_finished" and data["outcome"] != "succeeded":
            how = _PARAMS_FROM.get(data["layer"], data["layer"])
            self._step(data["step_id"], f"attempt {data['attempt']} {data['outcome']} "
                                        f"({data.get('error_code') or '-'}; {how})")
        elif event.type == "step_finished":
            self._step(data["step_id"], f"{data['status']:9} after {data['attempts']} attempt(s)")
        elif event.type == "approval_required":
            self.waiting.append(data["step_id"])
            self._step(data["step_id"], f"waiting for approval: {data['reason']}")
        elif event.type == "run_finished":
            if data["status"] == "awaiting_approval":
                steps = ", ".join(self.waiting) or "a step"
                self._line(f"run {event.run_id} waiting for approval ({steps})")
            else:
                self._line(f"run {event.run_id} {data['status']}")

    def log_stream(self) -> TextIO:
        """A stream for a log handler: each line is written above the table."""
        progress = self

        class Above(io.TextIOBase):
            def write(self, text: str) -> int:
                progress.log_line(text.rstrip("\n"))
                return len(text)

        return cast(TextIO, Above())

    def log_line(self, text: str) -> None:
        with progress_lock():
            if self.tty and self.drawn:
                self.stream.write(f"\x1b[{self.drawn}A\x1b[J")  # up over the table, clear it
            self.stream.write(text + "\n")
            if self.tty and self.drawn:
                self._draw()
            self.stream.flush()

    def _line(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.drawn = 0  # the table starts again below this line
        self.stream.flush()

    def _step(self, step_id: str, text: str) -> None:
        self.rows[step_id] = text
        if not self.tty:
            self.stream.write(f"  {step_id}: {text}\n")
        else:
            if self.drawn:
                self.stream.write(f"\x1b[{self.drawn}A")
            self._draw()
        self.stream.flush()

    def _draw(self) -> None:
        for sid, row in self.rows.items():
            self.stream.write(f"\x1b[2K  {sid:20} {row}\n")
        self.drawn = len(self.rows)


def live_progress(args: argparse.Namespace, config: OrchestratorConfig, *,
                  continuing: bool = False) -> Progress | None:
    """Log lines at the level -q/-v ask for, drawn above the live progress of the run
    (none with -q). ``continuing``: a run that resumes or goes on after a decision (its
    plan exists; it is not planning)."""
    from orchestration.logging_setup import configure_logging

    log_handler = configure_logging(config, level=log_level(args, config))
    progress = None if quiet(args) else Progress(sys.stderr, continuing=continuing)
    if progress is not None and isinstance(log_handler, logging.StreamHandler):
        log_handler.setStream(progress.log_stream())  # log lines above the live table
    return progress
