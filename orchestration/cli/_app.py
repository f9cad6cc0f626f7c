"""The ``dagwright`` command itself: the parser every command group registers with, and
``main``, which runs the chosen command and turns what it raised into one error line, a
next step and an exit code.

A new command group is one module with ``register(commands)`` (adding its parsers, each
with ``fn=`` its command) listed in :data:`COMMAND_GROUPS`.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any, TextIO, cast

from orchestration._version import __version__
from orchestration.cli import (
    _approvals,
    _config,
    _demo,
    _eval,
    _run,
    _runs,
    _serve,
    _sessions,
    _tools,
    _workflows,
)
from orchestration.cli._errors import next_step_for, print_error, show_warning
from orchestration.cli._exit_codes import (
    EXIT_CLOSED_PIPE,
    EXIT_INTERRUPTED,
    EXIT_PLANNING,
    EXIT_USAGE,
)
from orchestration.cli._kit import quiet_closed_pipe
from orchestration.cli._parser import SuggestingParser, add_verbosity, epilog, verbosity_everywhere
from orchestration.cli._render import RedactingOutput
from orchestration.errors import DagwrightError, PlanningError

COMMAND_GROUPS: tuple[ModuleType, ...] = (
    _demo,        # demo, serve-tools
    _run,         # run, plan
    _workflows,   # workflows
    _tools,       # tools
    _config,      # config
    _runs,        # runs list|show, resume, debug
    _sessions,    # sessions show
    _approvals,   # approvals list, approve, reject
    _eval,        # eval
    _serve,       # serve, worker
)
"""The command groups in the order ``dagwright --help`` lists them."""


def build_parser() -> argparse.ArgumentParser:
    """The ``dagwright`` parser: every command group of ``COMMAND_GROUPS`` registered."""
    parser = SuggestingParser(
        prog="dagwright", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Plan a query into a DAG of tool calls with an LLM and run it reliably.",
        epilog=epilog())
    parser.add_argument("--version", action="version", version=f"dagwright {__version__}")
    add_verbosity(parser, None)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                     title="commands")
    for group in COMMAND_GROUPS:
        group.register(commands)
    verbosity_everywhere(commands)
    return parser


def _say_what_the_exit_waits_for() -> None:
    """Python tools that timed out still run in their threads, and the process cannot end
    before they do: say so, rather than seem to hang after the result."""
    from orchestration._thread_calls import left_running

    waiting = left_running()
    if waiting:
        print(f"dagwright: waiting for {', '.join(waiting)} to return before exiting: its "
              "call timed out and still runs in its thread (a thread cannot be stopped)",
              file=sys.stderr, flush=True)


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    """Run one ``dagwright`` command and return its exit code (``EXIT_CODES``): what a
    command raises becomes one redacted error line with the next step to take, never a
    traceback. ``out``: where the command writes (stdout), redacted."""
    out = cast(TextIO, RedactingOutput(out or sys.stdout))
    args = build_parser().parse_args(argv)
    fn: Callable[[argparse.Namespace, TextIO], int] = args.fn
    with warnings.catch_warnings():
        warnings.showwarning = show_warning
        try:
            code: Any = fn(args, out)
            out.flush()  # a closed pipe shows here, not in the interpreter's last flush
            _say_what_the_exit_waits_for()
        except BrokenPipeError:
            quiet_closed_pipe()
            return EXIT_CLOSED_PIPE
        except PlanningError as exc:
            print_error(f"planning failed: {exc}", next_step_for(exc))
            return EXIT_PLANNING
        except DagwrightError as exc:
            print_error(str(exc), next_step_for(exc))
            return EXIT_USAGE
        except KeyboardInterrupt:
            print("dagwright: interrupted", file=sys.stderr)
            return EXIT_INTERRUPTED
    return int(code)
