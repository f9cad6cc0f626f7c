"""What every ``dagwright`` command shares but is not a command: run ids given by a
prefix, a parser that suggests the command meant, log lines kept apart from the live
progress display, and a quiet end when the reader of stdout goes away.

Kept out of ``orchestration/cli.py`` (already large): the commands there call these.
"""

from __future__ import annotations

import argparse
import difflib
import logging
import os
import re
import sys
import threading
from typing import Any, NoReturn, TextIO

from orchestration.errors import DagwrightError
from orchestration.store import RunStore

__all__ = ["PREFIX_SCAN_LIMIT", "AmbiguousRunId", "LogAboveProgress", "SuggestingParser",
           "quiet_closed_pipe", "resolve_run_id"]

PREFIX_SCAN_LIMIT = 10_000
"""How many recent runs a prefix is looked for among (an exact id is always found)."""
MIN_PREFIX = 4


class AmbiguousRunId(DagwrightError):
    """A prefix that names no run, or several; the message lists the candidates."""


async def resolve_run_id(store: RunStore, given: str) -> str:
    """The run id ``given`` names: itself when a run has that id, else the one run whose
    id starts with it. A prefix matching several runs is refused with the candidates
    (newest first), one matching none with what to do; either way nothing is acted on."""
    if await store.load(given) is not None:
        return given
    if len(given) < MIN_PREFIX:
        raise AmbiguousRunId(f"no run {given!r}; a prefix needs at least {MIN_PREFIX} "
                             "characters ('dagwright runs list' shows the run ids)")
    runs = await store.list_runs(status=None, limit=PREFIX_SCAN_LIMIT)
    matches = [r for r in runs if r.run_id.startswith(given)]
    if len(matches) == 1:
        return matches[0].run_id
    if not matches:
        raise AmbiguousRunId(f"no run {given!r} and no run id starts with it; "
                             "'dagwright runs list' shows the run ids")
    shown = "; ".join(f"{r.run_id} ({r.status})" for r in matches[:10])
    more = f" and {len(matches) - 10} more" if len(matches) > 10 else ""
    raise AmbiguousRunId(f"{given!r} is the start of {len(matches)} run ids: {shown}{more}; "
                         "give more characters")


class SuggestingParser(argparse.ArgumentParser):
    """argparse, plus "did you mean" for a misspelt command or choice."""

    _INVALID = re.compile(r"invalid choice: '([^']*)' \(choose from (.*)\)")

    def error(self, message: str) -> NoReturn:
        found = self._INVALID.search(message)
        if found:
            choices = re.findall(r"'([^']*)'", found.group(2))
            near = difflib.get_close_matches(found.group(1), choices, n=1, cutoff=0.6)
            if near:
                message += f"; did you mean {near[0]!r}?"
        super().error(message)


class LogAboveProgress(logging.Handler):
    """Log records written above the live progress table instead of through it.

    On a terminal :class:`~orchestration.cli.Progress` redraws its table in place; a log
    line written in between would be overwritten or split it. This handler asks the
    progress display to put the line above the table and draw the table again below."""

    def __init__(self, progress: Any, formatter: logging.Formatter | None,
                 filters: list[Any]) -> None:
        super().__init__()
        self.progress = progress
        if formatter is not None:
            self.setFormatter(formatter)
        for item in filters:
            self.addFilter(item)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.progress.log_line(self.format(record))
        except Exception:  # a log line must never fail the run
            self.handleError(record)


_PROGRESS_LOCK = threading.Lock()
"""Log records come from threads (sync Python tools); the display is one stream."""


def progress_lock() -> threading.Lock:
    return _PROGRESS_LOCK


def quiet_closed_pipe() -> None:
    """After ``BrokenPipeError`` on stdout (``dagwright runs list | head``): point stdout
    at /dev/null so that the interpreter's last flush does not print a traceback."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout is not a file (a test's StringIO)
        pass


def write_line(stream: TextIO, text: str) -> None:
    """One whole line, flushed: the first line of a command's output reaches a pipe at
    once, not when the run ends."""
    stream.write(text + "\n")
    stream.flush()
