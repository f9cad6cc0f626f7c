"""Plan once, run many: what a planning LLM call costs a run, against the plan cache and a
saved workflow.

Each run answers the same kind of question; what differs is where its plan comes from:

* **planned** — the default: the planner asks the model, which streams the plan from a
  loopback server speaking the OpenAI protocol (``tests/llm_servers.py``) at
  ``--tokens-per-s`` after a ``--first-token-s`` latency (the streaming benchmark's model);
* **plan cache hit** — ``ORCH_PLAN_CACHE=true``, after one run of the query has been
  planned and kept: the run reads the plan from the run store and validates it again;
* **saved workflow** — the plan saved as a workflow (its query's values lifted into
  inputs) and run with ``run_workflow`` and other inputs: no planning, the inputs
  validated and bound;
* **plan given** — the reference floor: ``arun(query, plan=...)``, no planning and no
  lookup.

Every configuration records its runs in the same kind of store (a SQLite file, the
default kind), runs the same four in-process tools (a few milliseconds each) and skips
answer synthesis, so the differences are the planning call and what replaces it. LLM
calls are counted from the run's usage and from the requests the server received.
Figures are medians and 95th percentiles over ``--repeats`` runs of each configuration,
interleaved so that drift on the machine hits all of them alike.

Run: ``python -m benchmarks.plan_cache`` (``--quick`` for a few seconds). The loopback LLM
server lives with the tests: install with ``pip install -e '.[dev]'``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from prometheus_client import CollectorRegistry

from benchmarks import common
from orchestration import Catalog, Orchestrator, OrchestratorConfig
from orchestration.llm.openai_compat import OpenAICompatibleClient
from orchestration.plan import Plan, validate_plan
from orchestration.workflows import Workflow, draft_workflow

CHARS_PER_TOKEN = 4
QUERY = "Weekly report for team Platform over the last 4 weeks, with the open incidents"
PLAN: dict[str, Any] = {"steps": [
    {"id": "team", "tool": "tracker", "capability": "team", "params": {"name": "Platform"}},
    {"id": "stats", "tool": "tracker", "capability": "stats",
     "params": {"team_id": "{{team.id}}", "weeks": 4}},
    {"id": "incidents", "tool": "pager", "capability": "incidents",
     "params": {"team_id": "{{team.id}}", "status": "open"}},
    {"id": "report", "tool": "docs", "capability": "report",
     "params": {"title": "Platform weekly", "closed": "{{stats.closed}}",
                "incidents": "{{incidents.count}}"}},
]}
CONFIGURATIONS = ("planned", "plan cache hit", "saved workflow", "plan given")
TOOL_S = 0.002


def catalog() -> Catalog:
    """Four in-process tools with small, fixed latencies."""
    cat = Catalog()

    async def team(name: str) -> dict[str, Any]:
        await asyncio.sleep(TOOL_S)
        return {"id": f"T-{name.lower()}"}

    async def stats(team_id: str, weeks: int) -> dict[str, Any]:
        await asyncio.sleep(TOOL_S)
        return {"closed": 12 * weeks}

    async def incidents(team_id: str, status: str) -> dict[str, Any]:
        await asyncio.sleep(TOOL_S)
        return {"count": 2}

    async def report(title: str, closed: int, incidents: int) -> dict[str, Any]:
        await asyncio.sleep(TOOL_S)
        return {"url": "https://docs.example/r/1", "title": title}

    cat.tool("tracker.team")(team)
    cat.tool("tracker.stats")(stats)
    cat.tool("pager.incidents")(incidents)
    cat.tool("docs.report")(report)
    return cat


def plan_tokens() -> list[str]:
    text = json.dumps(PLAN)
    return [text[i:i + CHARS_PER_TOKEN] for i in range(0, len(text), CHARS_PER_TOKEN)]


@dataclass
class Measured:
    seconds: list[float] = field(default_factory=list)
    llm_calls: list[int] = field(default_factory=list)


class Bench:
    """One orchestrator per configuration, each on its own SQLite store, one LLM server."""

    def __init__(self, workdir: Path, tokens_per_s: float, first_s: float) -> None:
        from tests.llm_servers import FakeOpenAIServer

        self.server = FakeOpenAIServer().start()
        self.pace, self.first_s = 1 / tokens_per_s, first_s
        self.client = OpenAICompatibleClient(base_url=self.server.base_url, model="bench",
                                             timeout_s=120)
        self.orchs: dict[str, Orchestrator] = {}
        for name in CONFIGURATIONS:
            store = workdir / f"{name.replace(' ', '-')}.db"
            config = OrchestratorConfig(store_url=f"sqlite:///{store}", synthesis_enabled=False,
                                        llm_max_retries=0, plan_cache=name == "plan cache hit")
            self.orchs[name] = Orchestrator(catalog(), llm=self.client, config=config,
                                            registry=CollectorRegistry())
        cat = self.orchs["saved workflow"].catalog
        draft = draft_workflow(QUERY, validate_plan(Plan.model_validate(PLAN), cat), cat,
                               name="weekly-report")
        self.workflow: Workflow = draft.to_workflow()
        self.lifted = [lift.name for lift in draft.lifts]

    def queue_plan(self) -> None:
        self.server.stream_answer(plan_tokens(), delay_s=self.pace, first_delay_s=self.first_s)

    async def warm_up(self) -> None:
        """One planned run on the cache's orchestrator, so its query has a kept plan."""
        self.queue_plan()
        result = await self.orchs["plan cache hit"].arun(QUERY)
        if result.plan_source != "llm" or result.status != "succeeded":
            raise RuntimeError(f"warm-up did not plan and succeed: {result.status}")

    async def one(self, name: str, number: int) -> tuple[float, int]:
        """One run of configuration ``name``: (seconds end to end, LLM calls)."""
        orch = self.orchs[name]
        asked = len(self.server.requests)
        started = time.perf_counter()
        if name == "planned":
            self.queue_plan()
            result = await orch.arun(QUERY)
        elif name == "plan cache hit":
            result = await orch.arun(QUERY)
        elif name == "saved workflow":
            inputs = {"name": f"Team{number}", "weeks": 1 + number % 12, "status": "open"}
            result = await orch.arun_workflow(self.workflow, {k: v for k, v in inputs.items()
                                                              if k in self.lifted})
        else:
            result = await orch.arun(QUERY, plan=PLAN)
        seconds = time.perf_counter() - started
        calls = len(self.server.requests) - asked
        expected = {"planned": "llm", "plan cache hit": "cache", "saved workflow": "workflow",
                    "plan given": "caller"}[name]
        if result.status != "succeeded" or result.plan_source != expected:
            raise RuntimeError(f"{name}: {result.status} {result.plan_source} {result.error}")
        if calls != result.usage.llm_calls:
            raise RuntimeError(f"{name}: the server saw {calls} calls, the run counted "
                               f"{result.usage.llm_calls}")
        return seconds, calls

    async def close(self) -> None:
        for orch in self.orchs.values():
            await orch.aclose()
        await self.client.aclose()
        self.server.stop()


async def measure(repeats: int, tokens_per_s: float, first_s: float) -> dict[str, Measured]:
    with tempfile.TemporaryDirectory(prefix="dagwright-plan-cache-") as tmp:
        bench = Bench(Path(tmp), tokens_per_s, first_s)
        try:
            await bench.warm_up()
            measured = {name: Measured() for name in CONFIGURATIONS}
            for number in range(repeats):
                for name in CONFIGURATIONS:
                    seconds, calls = await bench.one(name, number)
                    measured[name].seconds.append(seconds)
                    measured[name].llm_calls.append(calls)
            return measured
        finally:
            await bench.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens-per-s", type=float, default=50.0,
                        help="how fast the model writes the plan (default 50 tokens/s)")
    parser.add_argument("--first-token-s", type=float, default=0.4,
                        help="latency before the first token (default 0.4 s)")
    parser.add_argument("--repeats", type=int, default=20, help="runs per configuration")
    common.add_report_arguments(parser)
    args = common.parse_args(parser, argv)
    if args.quick:
        args.tokens_per_s, args.first_token_s, args.repeats = 2000.0, 0.02, 3
    load = os.getloadavg()[0]
    measured = asyncio.run(measure(args.repeats, args.tokens_per_s, args.first_token_s))

    planned = common.median(measured["planned"].seconds)
    rows = []
    for name in CONFIGURATIONS:
        entry = measured[name]
        med = common.median(entry.seconds)
        p95 = common.percentile(entry.seconds, 0.95)
        calls = sum(entry.llm_calls) / len(entry.llm_calls)
        versus = "—" if name == "planned" else f"{planned / med:.0f}× faster, {(planned - med) * 1000:,.0f} ms less"
        print(f"{name:15} LLM calls/run {calls:.1f}  median {med * 1000:8.1f} ms  "
              f"p95 {p95 * 1000:8.1f} ms  {versus}")
        rows.append([name, f"{calls:.0f}", common.fmt(med * 1000), common.fmt(p95 * 1000),
                     versus])
    if args.no_report:
        return 0
    tokens = len(plan_tokens())
    hit, given = (common.median(measured[n].seconds) for n in ("plan cache hit", "plan given"))
    workflow = common.median(measured["saved workflow"].seconds)
    argv_shown = list(argv if argv is not None else sys.argv[1:])
    body = common.section_preamble("Plan cache and saved workflows: runs without a planning "
                                   "call", "plan_cache", argv_shown, common.machine_facts())
    body += (
        f"\nThe same query ({len(PLAN['steps'])}-step plan, {tokens} tokens of "
        f"~{CHARS_PER_TOKEN} characters), its plan streamed by a loopback OpenAI-protocol "
        f"server at {args.tokens_per_s:g} tokens/s after a {args.first_token_s:g} s "
        f"first-token latency. Four in-process tools of {TOOL_S * 1000:g} ms each; runs "
        "recorded in a SQLite store; synthesis off. Medians of "
        f"{args.repeats} run(s) of each configuration, interleaved. The machine is shared "
        f"with other work (load average {load:.1f} on its 2 cores when this ran): the "
        "absolute milliseconds move from run to run, the LLM calls and the gap to "
        "*planned* do not.\n\n")
    body += common.md_table(["plan from", "LLM calls per run", "median ms", "p95 ms",
                             "vs planned"], rows)
    body += (
        f"\n\nWhat it means: a planned run waits for the model to write the plan (here "
        f"{args.first_token_s:g} s + {tokens} tokens); a cache hit or a saved workflow "
        "makes no LLM call at all and costs what running the steps costs. Over a run "
        f"given its plan, a cache hit adds {(hit - given) * 1000:,.1f} ms (the store lookup "
        f"and validating the plan again) and a workflow run {(workflow - given) * 1000:,.1f} "
        "ms (checking the inputs with layer 2 and the schemas, binding them, checking the "
        "steps' parameters). The cache keeps only plans of runs that succeeded, keyed by "
        "the normalised query, the catalog's fingerprint, the planner model and its prompt "
        "version.\n")
    common.write_section(args.report, "plan_cache", body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
