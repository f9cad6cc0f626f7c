"""``dagwright config``: the effective ``ORCH_*`` settings, secrets masked."""

from __future__ import annotations

import argparse
import json
from typing import TextIO

from orchestration.cli._exit_codes import EXIT_OK
from orchestration.cli._parser import Commands
from orchestration.config import OrchestratorConfig


def register(commands: Commands) -> None:
    config = commands.add_parser("config", help="print the effective ORCH_* settings "
                                 "(secrets masked)")
    config.add_argument("--json", action="store_true", help="print them as a JSON object")
    config.set_defaults(fn=cmd_config)


def cmd_config(args: argparse.Namespace, out: TextIO) -> int:
    values = OrchestratorConfig().effective_values()
    if args.json:
        out.write(json.dumps(values, indent=2, default=str) + "\n")
        return EXIT_OK
    for name, value in values.items():
        if value is None:  # a comment: sourcing the output leaves it unset, as it is
            out.write(f"# {name} is unset\n")
        else:
            out.write(f"{name}={json.dumps(value) if not isinstance(value, str) else value}\n")
    return EXIT_OK
