"""The planner path against a given plan: what reading the plan from the model costs.

A 1,000-step plan of no-op in-process tools (the scheduler benchmark's layered DAG) runs
through ``Orchestrator.arun`` with dagwright's defaults (the SQLite run store, streamed
plans), in one process, the variants interleaved repeat by repeat:

* **given plan** — ``arun(query, plan=...)``: the plan validated, then executed (the
  reference);
* **planner, whole answer** — the scripted planner writes the plan's JSON text at once
  (in 16-character stream pieces that all arrive together, as a model that answers at
  once or a burst of server-sent events does);
* **planner, large pieces** — the same text in 4 KiB pieces a millisecond apart: the
  plan is read step by step as it streams and the steps start early;
* **planner, not streamed** — ``ORCH_STREAM_PLAN=false``, the same text as one answer.

Per step: wall time and the process's CPU time (on a shared machine CPU time moves less
with the load), and each variant's ratio to the given plan. The goal: the planner path at
the defaults within 1.2× the given plan.

Streaming must still pay off where it is for: the script also runs
``benchmarks/streaming_plan.py`` (a plan written at 50 tokens/s by loopback provider
servers) at this commit and at ``--reference`` in a worktree, one after the other, and
reports when the first tool call started in each.

Run: ``python -m benchmarks.planner_path`` (``--quick`` for small sizes).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from prometheus_client import CollectorRegistry

from benchmarks import common
from benchmarks.dags import bench_catalog, layered_dag
from benchmarks.lean_path import at_commit
from benchmarks.scheduler import engine_config
from orchestration import Orchestrator, ScriptedLLM

REFERENCE = "bac789c"
"""The commit this work started from (main before issue 28)."""
TARGET_X = 1.2

VARIANTS = ("given plan", "planner, whole answer", "planner, large pieces",
            "planner, not streamed")


def orchestrators(steps: int, store: str, text: dict[str, str]) -> dict[str, Orchestrator]:
    def make(llm: ScriptedLLM, **update: Any) -> Orchestrator:
        config = engine_config(steps).model_copy(update={"store_url": store, **update})
        return Orchestrator(bench_catalog(), llm, config, registry=CollectorRegistry())

    planner = lambda **kw: ScriptedLLM(lambda request: text["plan"], **kw)  # noqa: E731
    return {
        "given plan": make(ScriptedLLM([])),
        "planner, whole answer": make(planner()),
        "planner, large pieces": make(planner(chunk_chars=4096, chunk_delay_s=0.001)),
        "planner, not streamed": make(planner(), stream_plan=False),
    }


async def measure(steps: int, repeats: int) -> dict[str, dict[str, float]]:
    """Median wall and CPU seconds per step of each variant."""
    folder = tempfile.mkdtemp(prefix="dagwright-planner-path-")
    text = {"plan": json.dumps(layered_dag(50, seed=1).plan(sleep=False))}
    orchs = orchestrators(steps, f"sqlite:///{folder}/runs.db", text)
    warm = layered_dag(50, seed=1).plan(sleep=False)
    for name, orch in orchs.items():  # imports, the store's file, prepared capabilities
        result = await (orch.arun("warm", plan=warm) if name == "given plan" else orch.arun("warm"))
        assert result.status == "succeeded", (name, result.error)
    plan = layered_dag(steps).plan(sleep=False)
    text["plan"] = json.dumps(plan)
    wall: dict[str, list[float]] = {name: [] for name in orchs}
    cpu: dict[str, list[float]] = {name: [] for name in orchs}
    for _ in range(repeats):
        for name, orch in orchs.items():
            gc.collect()
            t0, c0 = time.perf_counter(), time.process_time()
            result = await (orch.arun("q", plan=plan) if name == "given plan" else orch.arun("q"))
            wall[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
            if result.status != "succeeded" or len(result.steps) != steps:
                raise RuntimeError(f"{name}: {result.status} {result.error}")
    for orch in orchs.values():
        await orch.aclose()
    return {name: {"wall_us": common.median(wall[name]) / steps * 1e6,
                   "cpu_us": common.median(cpu[name]) / steps * 1e6} for name in orchs}


PROBE = r'''
import asyncio, gc, json, sys, tempfile, time
sys.path.insert(0, ".")
from prometheus_client import CollectorRegistry
from benchmarks.dags import bench_catalog, layered_dag
from benchmarks.scheduler import engine_config
from orchestration import Orchestrator, ScriptedLLM

STEPS, REPEATS = int(sys.argv[1]), int(sys.argv[2])

async def main():
    folder = tempfile.mkdtemp()
    text = {"plan": json.dumps(layered_dag(50, seed=1).plan(sleep=False))}
    def make(llm):
        config = engine_config(STEPS).model_copy(update={"store_url": f"sqlite:///{folder}/r.db"})
        return Orchestrator(bench_catalog(), llm, config, registry=CollectorRegistry())
    given, planner = make(ScriptedLLM([])), make(ScriptedLLM(lambda r: text["plan"]))
    await given.arun("w", plan=layered_dag(50, seed=1).plan(sleep=False))
    await planner.arun("w")
    plan = layered_dag(STEPS).plan(sleep=False)
    text["plan"] = json.dumps(plan)
    cpu = {"given plan": [], "planner, whole answer": []}
    for _ in range(REPEATS):
        for name, orch in (("given plan", given), ("planner, whole answer", planner)):
            gc.collect()
            c0 = time.process_time()
            result = await (orch.arun("q", plan=plan) if name == "given plan" else orch.arun("q"))
            cpu[name].append(time.process_time() - c0)
            assert result.status == "succeeded", (name, result.error)
    print(json.dumps({k: sorted(v)[len(v) // 2] / STEPS * 1e6 for k, v in cpu.items()}))

asyncio.run(main())
'''
"""The per-step CPU of the given plan and of the planner path (whole answer), with code
that runs unchanged at this commit and at the reference."""


def at_reference(commit: str | None, steps: int, repeats: int) -> dict[str, float]:
    """:data:`PROBE` at ``commit`` (in a worktree), or in this tree when None: the two
    commits compared by the same code in the same kind of process (the table's process
    holds four orchestrators, so its absolute figures are not the probe's)."""
    argv = ["-c", PROBE, str(steps), str(repeats)]
    if commit is None:
        out = subprocess.run([sys.executable, *argv], cwd=common.REPO_ROOT, check=True,
                             capture_output=True, text=True, timeout=1800).stdout
    else:
        out = at_commit(common.REPO_ROOT, commit, argv)
    return dict(json.loads(out.strip().splitlines()[-1]))


_FIRST_CALL = re.compile(r"^(\w+)\s+streamed: first tool call\s+([\d.]+) s, end to end\s+([\d.]+) s",
                         re.M)


def first_calls(commit: str | None, repeats: int, quick: bool) -> dict[str, tuple[float, float]]:
    """``benchmarks.streaming_plan`` at ``commit`` (None: this tree): per provider, when
    the first tool call started and the end to end time, plan streamed."""
    argv = ["-m", "benchmarks.streaming_plan", "--no-report", "--repeats", str(repeats)]
    if quick:
        argv.append("--quick")
    if commit is None:
        out = subprocess.run([sys.executable, *argv], cwd=common.REPO_ROOT, check=True,
                             capture_output=True, text=True, timeout=1800).stdout
    else:
        out = at_commit(common.REPO_ROOT, commit, argv)
    return {m.group(1): (float(m.group(2)), float(m.group(3))) for m in _FIRST_CALL.finditer(out)}


def render(argv: list[str], facts: dict[str, Any], steps: int, repeats: int,
           figures: dict[str, dict[str, float]],
           first: dict[str, dict[str, tuple[float, float]]], load: tuple[float, float],
           before: tuple[str, dict[str, float]] | None = None,
           probe_now: dict[str, float] | None = None) -> str:
    parts = [common.section_preamble("Planner path: reading the plan from the model",
                                     "planner_path", argv, facts)]
    given = figures["given plan"]
    parts.append(
        f"A {steps:,}-step plan of no-op tools (the scheduler benchmark's layered DAG) through "
        "`arun` with the defaults (SQLite run store, streamed plans; synthesis off), the "
        f"variants interleaved, medians of {repeats} repeats. *× given* is the ratio to the "
        f"given plan; goal ≤ {TARGET_X:g}× at the defaults (the whole answer). Load average "
        f"before / after: {load[0]:.2f} / {load[1]:.2f}.\n")
    rows = []
    for name in VARIANTS:
        f = figures[name]
        rows.append([name, common.fmt(f["wall_us"]), f"{f['wall_us'] / given['wall_us']:.2f}×",
                     common.fmt(f["cpu_us"]), f"{f['cpu_us'] / given['cpu_us']:.2f}×"])
    parts.append(common.md_table(["", "wall µs/step", "× given", "CPU µs/step", "× given"],
                                 rows) + "\n")
    whole = figures["planner, whole answer"]
    x = whole["cpu_us"] / given["cpu_us"]
    text = (f"**Finding**: the planner path at the defaults costs {x:.2f}× the given "
            f"plan per step in CPU ({whole['wall_us'] / given['wall_us']:.2f}× in wall "
            f"time): {'meets' if x <= TARGET_X else '**misses**'} the ≤ {TARGET_X:g}× goal.")
    if probe_now is not None:
        text += (f" The same probe (a fresh process with the given plan and the planner, "
                 f"CPU) at this commit: given plan {probe_now['given plan']:.1f} µs/step, "
                 f"planner path {probe_now['planner, whole answer']:.1f} µs/step — "
                 f"{probe_now['planner, whole answer'] / probe_now['given plan']:.2f}×.")
    if before is not None:
        commit, was = before
        text += (f" At `{commit}`, in this run (the same probe, CPU): given plan "
                 f"{was['given plan']:.1f} µs/step, planner path "
                 f"{was['planner, whole answer']:.1f} µs/step — "
                 f"{was['planner, whole answer'] / was['given plan']:.2f}×.")
    parts.append(text + "\n")
    if first:
        parts.append("### The first tool call of a plan streamed at 50 tokens/s\n")
        parts.append("`python -m benchmarks.streaming_plan` (loopback OpenAI-compatible and "
                     "Anthropic servers writing an 8-step plan at 50 tokens/s) at each commit, "
                     "one after the other in this run: when the first tool call started, and "
                     "the run's end, with the plan streamed.\n")
        table = []
        for label, per in first.items():
            for provider, (start, end) in sorted(per.items()):
                table.append([label, provider, f"{start:.2f}", f"{end:.2f}"])
        parts.append(common.md_table(["commit", "provider", "first tool call s",
                                      "end to end s"], table) + "\n")
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m benchmarks.planner_path",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_report_arguments(parser)
    parser.add_argument("--steps", type=int, help="plan size (default 1000)")
    parser.add_argument("--repeats", type=int, help="interleaved repeats (default 9)")
    parser.add_argument("--reference", default=None,
                        help=f"commit to compare the first tool call with (default {REFERENCE}; "
                             "'' for none; --quick: none)")
    parser.add_argument("--stream-repeats", type=int, default=3,
                        help="repeats of the streaming_plan runs (default 3)")
    args = common.parse_args(parser, argv)
    steps = args.steps or (100 if args.quick else 1000)
    repeats = args.repeats or (1 if args.quick else 9)
    reference = args.reference if args.reference is not None else ("" if args.quick else REFERENCE)
    facts = common.machine_facts()
    load_before = os.getloadavg()[0]
    figures = asyncio.run(measure(steps, repeats))
    given = figures["given plan"]
    for name in VARIANTS:
        f = figures[name]
        print(f"{name:24} wall {f['wall_us']:7.1f} µs/step ({f['wall_us'] / given['wall_us']:.2f}× "
              f"given), CPU {f['cpu_us']:7.1f} µs/step ({f['cpu_us'] / given['cpu_us']:.2f}× given)",
              flush=True)
    before = probe_now = None
    if reference:
        probe_now = at_reference(None, steps, repeats)
        print(f"this commit, the reference's probe: given plan CPU "
              f"{probe_now['given plan']:.1f} µs/step, planner, whole answer "
              f"{probe_now['planner, whole answer']:.1f} µs/step", flush=True)
        before = (reference, at_reference(reference, steps, repeats))
        print(f"`{reference}`: given plan CPU {before[1]['given plan']:.1f} µs/step, planner, "
              f"whole answer {before[1]['planner, whole answer']:.1f} µs/step "
              f"({before[1]['planner, whole answer'] / before[1]['given plan']:.2f}×)",
              flush=True)
    first: dict[str, dict[str, tuple[float, float]]] = {}
    if not args.quick or reference:
        first["this commit"] = first_calls(None, args.stream_repeats, args.quick)
        if reference:
            first[f"`{reference}`"] = first_calls(reference, args.stream_repeats, args.quick)
        for label, per in first.items():
            for provider, (start, end) in sorted(per.items()):
                print(f"{label}: {provider} streamed: first tool call {start:.2f} s, end to end "
                      f"{end:.2f} s", flush=True)
    load = (load_before, os.getloadavg()[0])
    if not args.no_report:
        common.write_section(args.report, "planner_path",
                             render(argv, facts, steps, repeats, figures, first, load,
                                    before, probe_now))
        print(f"wrote the planner_path section of {args.report}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
