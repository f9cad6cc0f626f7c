"""``dagwright tools``: the tool catalog, each capability and where it comes from, its
input schemas and what its sources left out — a catalog checked without running anything."""

from __future__ import annotations

import argparse
import json
from typing import TextIO

from orchestration.cli._errors import UsageError
from orchestration.cli._exit_codes import EXIT_OK
from orchestration.cli._kit import catalog_for
from orchestration.cli._parser import Commands
from orchestration.config import OrchestratorConfig


def register(commands: Commands) -> None:
    tools = commands.add_parser("tools", help="list (and check) the tool catalog: each "
                                "capability and where it comes from (file, MCP server, "
                                "OpenAPI spec, Python)")
    tools.add_argument("--catalog", help="catalog file (default: ORCH_CATALOG)")
    tools.add_argument("--schema", metavar="NAME",
                       help="print the input JSON Schema of capability NAME (tool.capability)")
    tools.add_argument("--json", action="store_true",
                       help="print the catalog as JSON (what Catalog.from_dict reads)")
    tools.add_argument("--skipped", action="store_true",
                       help="print what the sources left out (with the JSON pointer and the "
                       "reason) or repaired")
    tools.set_defaults(fn=cmd_tools)


def cmd_tools(args: argparse.Namespace, out: TextIO) -> int:
    catalog = catalog_for(args, OrchestratorConfig())
    try:
        if args.schema:
            tool, dot, name = args.schema.partition(".")
            if not dot:
                raise UsageError(f"--schema takes tool.capability, got {args.schema!r}",
                                 "`dagwright tools` lists the capabilities")
            out.write(json.dumps(catalog.get(tool, name).input_schema, indent=2) + "\n")
            return EXIT_OK
        if args.json:
            out.write(json.dumps(catalog.to_dict(skip_unnamed_functions=True), indent=2) + "\n")
            return EXIT_OK
        if args.skipped:
            for note in [*catalog.skipped, *catalog.notes]:
                out.write(f"{note}\n")
            out.write(f"{len(catalog.skipped)} left out, {len(catalog.notes)} note(s), "
                      f"{len(catalog)} capabilities\n")
            return EXIT_OK
        for cap in catalog:
            target = cap.url or ("python" if cap.function is not None else "")
            flags = "".join(f" [{f}]" for f, on in (("idempotent", cap.is_idempotent),
                                                    ("requires approval", cap.requires_approval))
                            if on)
            if cap.max_calls_per_run:
                flags += f" [at most {cap.max_calls_per_run} calls per run]"
            method = cap.method if cap.url or cap.source.startswith("openapi:") else ""
            # a document's description may span paragraphs, or be empty: each line
            # indented under its capability, blank ones dropped
            described = "".join(f"    {line.strip()}\n" for line in cap.description.splitlines()
                                if line.strip())
            out.write(f"{cap.key:32} {method:6} {target}\n"
                      f"    source: {cap.source}{flags}\n{described}")
        if catalog.skipped:
            out.write(f"({len(catalog.skipped)} operation(s) left out: dagwright tools --skipped)\n")
    finally:
        catalog.close()  # MCP servers the catalog started
    return EXIT_OK
