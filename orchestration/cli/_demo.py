"""``dagwright demo`` and ``dagwright serve-tools``: the offline demo (a scripted LLM,
real HTTP tools on 127.0.0.1) and its tools served on their own. The only commands that
use ``orchestration.demo``."""

from __future__ import annotations

import argparse
from typing import TextIO

from prometheus_client import CollectorRegistry

from orchestration._text import closest
from orchestration.catalog import Catalog
from orchestration.cli._errors import UsageError
from orchestration.cli._exit_codes import EXIT_OK, EXIT_RUN_FAILED
from orchestration.cli._parser import Commands
from orchestration.cli._render import render_plan_of, render_result
from orchestration.config import OrchestratorConfig
from orchestration.llm.scripted import ScriptedLLM
from orchestration.orchestrator import Orchestrator


def register(commands: Commands) -> None:
    demo = commands.add_parser("demo", help="run the offline demo (scripted LLM, real HTTP "
                               "tools)")
    demo.add_argument("scenario", nargs="*", help="only these scenarios (default: all)")
    demo.add_argument("--list", action="store_true", help="list the scenarios and what each shows")
    demo.set_defaults(fn=cmd_demo)
    serve = commands.add_parser("serve-tools", help="serve the demo tools on fixed ports until "
                                "Ctrl-C")
    serve.add_argument("--port", type=int, default=8700,
                       help="the first port: stocks on it, currency and weather on the next "
                       "two (default 8700, as config/catalog.example.yaml expects)")
    serve.set_defaults(fn=cmd_serve_tools)


def cmd_demo(args: argparse.Namespace, out: TextIO) -> int:
    from orchestration.demo.scenarios import scenarios, scripted_llm_for

    known = [s.name for s in scenarios()]
    if args.list:
        for scenario in scenarios():
            out.write(f"{scenario.name:12} {scenario.shows}\n")
        return EXIT_OK
    unknown = [name for name in args.scenario if name not in known]
    if unknown:
        hints = []
        for name in unknown:
            near = closest(name, known)
            hints.append(f"{name!r}" + (f" (did you mean {near!r}?)" if near else ""))
        raise UsageError(f"unknown demo scenario {', '.join(hints)}; the scenarios are: "
                         f"{', '.join(known)}", "`dagwright demo --list` describes each")

    from orchestration.demo.tools import start_demo_tools

    out.write("dagwright demo — the LLM in this demo is SCRIPTED (no model is called):\n"
              "its plans and answers are fixed per scenario. The tools are real HTTP\n"
              "services on 127.0.0.1 and every engine layer runs for real.\n\n")
    failures = []
    with start_demo_tools() as tools:
        catalog = Catalog.from_dict(tools.catalog_dict(), source="demo tools")
        out.write("Demo tools: " + ", ".join(f"{n} at {u}" for n, u in tools.urls.items()) + "\n")
        selected = [s for s in scenarios() if not args.scenario or s.name in args.scenario]
        for scenario in selected:
            tools.reset()
            if scenario.setup:
                scenario.setup(tools)
            orch = Orchestrator(
                catalog=catalog, llm=ScriptedLLM(scripted_llm_for(scenario)),
                config=OrchestratorConfig(llm_provider="scripted", retry_base_delay_s=0.05),
                registry=CollectorRegistry(),
            )
            out.write(f"\n=== scenario {scenario.name}: {scenario.query}\n")
            out.write(f"    shows: {scenario.shows}\n")
            result = orch.run(scenario.query)
            render_plan_of(result, catalog, out)
            render_result(result, out)
            ok = result.status == scenario.expect_status
            out.write(f"  => {'as expected' if ok else 'UNEXPECTED'} "
                      f"(expected {scenario.expect_status}, got {result.status})\n")
            if not ok:
                failures.append(scenario.name)
    out.write("\n" + (f"FAILED scenarios: {', '.join(failures)}\n" if failures
                      else f"All {len(selected)} scenarios behaved as expected.\n"))
    return EXIT_RUN_FAILED if failures else EXIT_OK


def cmd_serve_tools(args: argparse.Namespace, out: TextIO) -> int:
    from orchestration.demo.tools import serve_forever

    serve_forever(port=args.port, out=out)
    return EXIT_OK
