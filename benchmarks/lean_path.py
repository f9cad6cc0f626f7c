"""What each change of the lean hot path saved: the same probe run at each commit.

Issue 19 asked for ``docs/benchmarks.md`` to say, for each change, what it saved. The
changes are commits, so the honest measurement runs one probe against each: the script
checks every listed commit out into a temporary git worktree and runs the probe there in
a fresh interpreter (the commit's own engine and benchmark DAGs), one commit after the
other on the same machine in one run. The probe is the scheduler benchmark's overhead
run at one size — floor, no-op provider, a real SDK ``TracerProvider`` sampled at the
head (``ParentBased(TraceIdRatioBased(0.1))``) and with every span recorded — median of
interleaved repeats. Each row's *saved* column is the difference with the row above, so
noise of a few µs/step shows as small negative or positive savings.

Run: ``python -m benchmarks.lean_path`` (needs the git history; ``--quick`` runs two
commits at 200 steps).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import common

CHANGES: tuple[tuple[str, str], ...] = (
    ("1417e6a", "before: main when the issue was taken up"),
    ("7cdd9b9", "one span per step on the happy path; redaction and metric children once per "
                "capability; one log scope per step"),
    ("ff6bb1a", "a compiled 'certainly valid' check per capability before jsonschema"),
    ("b12ec30", "one timer per event loop for step and tool-call deadlines"),
    ("b812298", "run recorder: one immediate flush for a full buffer"),
    ("0034120", "layer settings and retry policy once per capability"),
    ("4e3199f", "plan validation in one pass; references parsed once, reused at bind time"),
    ("9392f7c", "engine-made ids redacted once per id; outcome attributes in one update"),
    ("429ef80", "streaming plan execution merged (no change expected on `plan=` runs)"),
    ("bcdb34c", "run events kept as plain records; the pydantic event built only when read"),
    ("e6401b7", "the run record encodes its plan once per plan"),
    ("2eea84f", "a small flat object's types prove it encodable (no encoder pass)"),
    ("1186177", "deadline scopes let go of their task on exit"),
    ("8d7ac63", "scheduler: a pool of workers started on demand, not a task per step"),
    ("e9ef6b1", "run store: events in one write group per flush (no effect on `memory://`)"),
    ("37d8944", "planner: rendered signatures kept per capability (no effect on `plan=` runs)"),
    ("1462388", "run store: event rows encoded by pydantic-core (no effect on `memory://`)"),
    ("2b81ff2", "deadline heap compared in C, the loop's watchdog remembered, a step's compiled "
                "capability looked up once"),
    ("4174ca1", "run outputs read without the model's `__getattr__` fallback (~1.3 µs, twice "
                "per step)"),
    ("a06c01a", "plan stream scanner skips whole strings (no effect on `plan=` runs)"),
    ("659907f", "compiled valid check: allOf of two or three keywords spelled out"),
    ("d3d54b2", "JSON decoders made once (no effect on `plan=` runs of in-process tools)"),
    ("4644cb0", "streamed plans: early steps share one growing plan, reference strings parsed "
                "once per process, no per-step copy of the accepted ids, the scanner skips "
                "whole strings (`plan=` runs: only the reference cache)"),
    ("ace14c8", "run record: plan text encoded by pydantic-core (once per plan)"),
)

PROBE = r'''
import asyncio, gc, json, sys, time
sys.path.insert(0, ".")
from prometheus_client import CollectorRegistry
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased, TraceIdRatioBased
from benchmarks.dags import bench_catalog, layered_dag, noop_tool, run_floor
from benchmarks.scheduler import engine_config
from orchestration import Orchestrator, ScriptedLLM

N, REPEATS = int(sys.argv[1]), int(sys.argv[2])

def orchestrator(sampler=None):
    exporter = None
    provider = None
    if sampler is not None:
        exporter = InMemorySpanExporter()
        provider = TracerProvider(sampler=sampler)
        provider.add_span_processor(BatchSpanProcessor(exporter))
    orch = Orchestrator(bench_catalog(), ScriptedLLM([]), engine_config(N),
                        registry=CollectorRegistry(), tracer_provider=provider)
    return orch, exporter

async def main():
    dag = layered_dag(N)
    plan = dag.plan(sleep=False)
    engines = {"noop": orchestrator(), "sdk_sampled": orchestrator(
        ParentBased(TraceIdRatioBased(0.1))), "sdk_all": orchestrator(ALWAYS_ON)}
    for orch, _ in engines.values():
        await orch.arun("warm", plan=layered_dag(50, seed=1).plan(sleep=False))
    times = {name: [] for name in ["floor", *engines]}
    for _ in range(REPEATS):
        gc.collect()
        t0 = time.perf_counter()
        await run_floor(dag, noop_tool, sleep=False)
        times["floor"].append(time.perf_counter() - t0)
        for name, (orch, exporter) in engines.items():
            gc.collect()
            t0 = time.perf_counter()
            result = await orch.arun("probe", plan=plan)
            times[name].append(time.perf_counter() - t0)
            if result.status != "succeeded":
                raise SystemExit(f"{name}: {result.status} {result.error}")
            if exporter is not None:
                exporter.clear()
    print(json.dumps({k: sorted(v)[len(v) // 2] / N * 1e6 for k, v in times.items()}))

asyncio.run(main())
'''


def at_commit(repo: Path, commit: str, argv: list[str]) -> str:
    """What ``python argv…`` prints when run in a worktree of ``commit`` (its own engine
    and benchmark scripts), the worktree removed after."""
    with tempfile.TemporaryDirectory(prefix="dagwright-lean-") as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(["git", "-C", str(repo), "worktree", "add", "-q", "--detach", str(tree),
                        commit], check=True)
        try:
            env = {**os.environ, "PYTHONPATH": str(tree)}
            out = subprocess.run([sys.executable, *argv], cwd=tree, env=env, check=True,
                                 capture_output=True, text=True)
            return out.stdout
        finally:
            subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(tree)],
                           check=False)


def measure(repo: Path, commit: str, steps: int, repeats: int) -> dict[str, float]:
    """The probe's medians (µs/step) at ``commit``."""
    out = at_commit(repo, commit, ["-c", PROBE, str(steps), str(repeats)])
    return json.loads(out.strip().splitlines()[-1])


_THROUGHPUT_LINE = re.compile(
    r"N=\s*(\d+):\s+([\d.]+) runs/s, wall [\d.]+ s, p50 ([\d.]+) s, p95 ([\d.]+) s "
    r"\(solo ([\d.]+) s\), CPU ([\d.]+) ms/run")


def concurrent_runs(repo: Path, commit: str, level: int) -> dict[str, float]:
    """``benchmarks.throughput`` at ``commit`` with ``level`` concurrent runs: runs/s, p50
    and p95 latency, a lone run's latency and CPU per run (the plan from the scripted
    planner, as that script runs it)."""
    out = at_commit(repo, commit, ["-m", "benchmarks.throughput", "--no-report",
                                   "--levels", str(level)])
    found = _THROUGHPUT_LINE.search(out)
    if found is None:
        raise RuntimeError(f"benchmarks.throughput at {commit} printed no figures:\n{out}")
    runs_s, p50, p95, solo, cpu = map(float, found.groups()[1:])
    return {"runs_s": runs_s, "p50_s": p50, "p95_s": p95, "solo_s": solo, "cpu_ms": cpu}


def render(argv: list[str], facts: dict[str, Any], steps: int,
           rows: list[tuple[str, str, dict[str, float]]],
           concurrent: dict[str, dict[str, float]] | None = None, level: int = 0) -> str:
    parts = [common.section_preamble("Lean hot path: what each change saved", "lean_path",
                                     argv, facts)]
    parts.append(
        f"The scheduler's overhead probe ({steps:,}-step layered DAG of no-op in-process tools, "
        "`arun(query, plan=…)`, all layers on) run at each commit in a worktree of its own, "
        "one after the other in this run. *overhead* = run − floor per step; *saved* = the "
        "row above minus this row (noise is a few µs/step, so a change within ±3 µs saved "
        "nothing measurable).\n")
    table = []
    previous: dict[str, float] | None = None
    for commit, what, m in rows:
        fl = m["floor"]
        over = {k: m[k] - fl for k in ("noop", "sdk_sampled", "sdk_all")}
        saved = ({k: (previous[k] - previous["floor"]) - over[k] for k in over}
                 if previous is not None else None)
        table.append([
            f"`{commit}`", what, common.fmt(fl),
            common.fmt(over["sdk_sampled"]), "—" if saved is None else f"{saved['sdk_sampled']:+.1f}",
            common.fmt(over["sdk_all"]), "—" if saved is None else f"{saved['sdk_all']:+.1f}",
            f"{m['sdk_all'] / fl:.1f}×",
            common.fmt(over["noop"]), "—" if saved is None else f"{saved['noop']:+.1f}",
            f"{m['noop'] / fl:.1f}×",
        ])
        previous = m
    parts.append(common.md_table(
        ["commit", "change", "floor µs/step", "SDK sampled overhead", "saved",
         "every span overhead", "saved", "every span × floor", "no-op overhead", "saved",
         "no-op × floor"], table) + "\n")
    if len(rows) > 1:
        first, last = rows[0][2], rows[-1][2]
        parts.append(
            "From the first row to the last: SDK sampled "
            f"{first['sdk_sampled'] - first['floor']:.0f} → {last['sdk_sampled'] - last['floor']:.0f}"
            f" µs/step, every span {first['sdk_all'] - first['floor']:.0f} → "
            f"{last['sdk_all'] - last['floor']:.0f}, no-op {first['noop'] - first['floor']:.0f} → "
            f"{last['noop'] - last['floor']:.0f} µs/step over the floor.\n")
    if concurrent:
        parts.append(f"### {level:,} concurrent runs, before and after\n")
        parts.append(
            f"`python -m benchmarks.throughput --levels {level}` (planning by the scripted "
            "model with 200 ms latency, four steps, synthesis; one event loop) at the first "
            "and the last commit above, in this run. The loop is CPU-bound at this level, so "
            "latency is the CPU per run times the queue of runs ahead. Besides the per-step "
            "path measured above, that CPU goes to CPython's garbage collector walking a "
            "thousand runs' live objects and to the streamed reading of each plan (which the "
            "first commit did not do; the streamed-plan commit above made it cheaper): see "
            "[serve.md](serve.md#many-runs-in-one-process) for both, measured. This figure "
            "varies by ±15% between runs on this box.\n")
        parts.append(common.md_table(
            ["commit", "runs/s", "p50 latency s", "p95 latency s", "a lone run s",
             "CPU ms/run"],
            [[f"`{c}`", common.fmt(m["runs_s"]), f"{m['p50_s']:.2f}", f"{m['p95_s']:.2f}",
              f"{m['solo_s']:.2f}", f"{m['cpu_ms']:.2f}"] for c, m in concurrent.items()]) + "\n")
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m benchmarks.lean_path", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_report_arguments(parser)
    parser.add_argument("--steps", type=int, help="DAG size (default 1000)")
    parser.add_argument("--repeats", type=int, help="interleaved repeats per commit (default 7)")
    parser.add_argument("--concurrent", type=int, default=1000,
                        help="concurrent runs for the before/after throughput (0: skip)")
    parser.add_argument("--commits", type=lambda s: s.split(","),
                        help="comma-separated commits to measure (default: the listed changes)")
    args = common.parse_args(parser, argv)
    steps = args.steps or (200 if args.quick else 1000)
    repeats = args.repeats or (2 if args.quick else 7)
    labels = dict(CHANGES)
    commits = args.commits or [c for c, _ in (CHANGES[:1] + CHANGES[-1:] if args.quick
                                              else CHANGES)]
    rows = []
    for commit in commits:
        m = measure(common.REPO_ROOT, commit, steps, repeats)
        print(f"{commit}: floor {m['floor']:.1f} µs/step; overhead SDK sampled "
              f"{m['sdk_sampled'] - m['floor']:.1f}, every span {m['sdk_all'] - m['floor']:.1f}, "
              f"no-op {m['noop'] - m['floor']:.1f} µs/step", flush=True)
        rows.append((commit, labels.get(commit, ""), m))
    concurrent: dict[str, dict[str, float]] = {}
    level = 0 if args.quick else args.concurrent
    if level and len(commits) > 1:
        for commit in (commits[0], commits[-1]):
            concurrent[commit] = figures = concurrent_runs(common.REPO_ROOT, commit, level)
            print(f"{commit}: {level} concurrent runs: {figures['runs_s']:.1f} runs/s, p50 "
                  f"{figures['p50_s']:.2f} s, CPU {figures['cpu_ms']:.2f} ms/run", flush=True)
    if not args.no_report:
        common.write_section(args.report, "lean_path",
                             render(argv, common.machine_facts(), steps, rows, concurrent, level))
        print(f"wrote the lean_path section of {args.report}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
