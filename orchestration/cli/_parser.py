"""The parts of the ``dagwright`` argument parser every command shares: "did you mean"
for a misspelt command or choice, ``-q``/``-v`` anywhere on the line and what they mean
for logging, and the help's list of exit codes."""

from __future__ import annotations

import argparse
import difflib
import re
import textwrap
from typing import Any, NoReturn, TypeAlias

from orchestration.cli._exit_codes import EXIT_CODES
from orchestration.config import OrchestratorConfig

Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
"""Where a command module adds its commands (``register(commands)``)."""


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


def epilog() -> str:
    codes = "\n".join(textwrap.fill(meaning, 96, initial_indent=f"  {code:<4} ",
                                     subsequent_indent=" " * 7)
                       for code, meaning in EXIT_CODES.items())
    return (f"exit codes:\n{codes}\n\nSettings are ORCH_* variables (`dagwright config` lists "
            "them); docs/troubleshooting.md explains every error message.")


def add_verbosity(parser: argparse.ArgumentParser, default: Any, *,
                  usual: str = "warnings and errors, or ORCH_LOG_LEVEL when set") -> None:
    """``-q``/``-v``: on the main parser (``dagwright -v run``) and on ``run`` itself
    (``dagwright run -v``), where ``default`` is SUPPRESS so as not to undo the first.
    ``usual``: what is logged without either (a server's default is ORCH_LOG_LEVEL's)."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("-v", "--verbose", action="count", default=default if default else 0,
                       help=f"more log lines on stderr: -v INFO, -vv DEBUG (default: {usual})")
    group.add_argument("-q", "--quiet", action="store_true",
                       default=default if default else False,
                       help="no live progress on stderr and only error log lines; the "
                       "result on stdout and the exit code are unchanged")


def quiet(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "quiet", False))


def log_level(args: argparse.Namespace, config: OrchestratorConfig) -> str:
    """-q: errors; -v: INFO; -vv: DEBUG; else ORCH_LOG_LEVEL when set, else WARNING (the
    live progress already says what INFO lines would)."""
    verbose = int(getattr(args, "verbose", 0) or 0)
    if quiet(args):
        return "ERROR"
    if verbose:
        return "DEBUG" if verbose > 1 else "INFO"
    return config.log_level if "log_level" in config.model_fields_set else "WARNING"


def server_log_level(args: argparse.Namespace, config: OrchestratorConfig) -> str:
    """The log level of a long-running command (``serve``, ``worker``): -q errors, -v
    INFO, -vv DEBUG, else ORCH_LOG_LEVEL (INFO unless set: a service logs each run)."""
    verbose = int(getattr(args, "verbose", 0) or 0)
    if quiet(args):
        return "ERROR"
    if verbose:
        return "DEBUG" if verbose > 1 else "INFO"
    return config.log_level


def verbosity_everywhere(sub: Any) -> None:
    """``-q``/``-v`` after any command too (``dagwright resume ID -q``, ``dagwright runs
    list -v``), as after ``run``: every command parser, nested ones included."""
    for command in sub.choices.values():
        if "-q" not in command._option_string_actions:
            add_verbosity(command, argparse.SUPPRESS)
        for action in command._actions:
            if isinstance(action, argparse._SubParsersAction):
                verbosity_everywhere(action)
