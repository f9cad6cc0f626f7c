"""Run store benchmark: what recording a run costs per step, by store.

The same seeded layered DAG of no-op in-process steps runs through
``await orch.arun(query, plan=...)`` with ``memory://`` (the reference: nothing
persisted), ``sqlite:///`` (the default; a file in a temporary directory) and
``postgresql://`` (a throwaway local cluster, when Debian's PostgreSQL binaries are
installed), repeats interleaved. Two workloads:

* **idempotent steps** (the common case): finished steps are buffered and written in
  batches, so the store should stay off the per-step path;
* **side-effect steps** (every capability non-idempotent): each call writes its
  "started" marker durably (synchronous to disk, fenced by the lease) right before it is
  sent and its outcome right after — two transactions per step, the price of never
  sending a side effect twice.

Figure: (store wall − memory wall) / steps, the median of the repeats.

Run: ``python -m benchmarks.store`` (``--quick`` for small sizes).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from prometheus_client import CollectorRegistry

from benchmarks import common
from benchmarks.dags import STEP_SCHEMA, TOOL, layered_dag, noop_tool
from orchestration import Catalog, Orchestrator, OrchestratorConfig, ScriptedLLM

TARGET_SQLITE_US = 10.0
QUERY = "store benchmark"


def catalog(side_effects: bool) -> Catalog:
    """``bench.noop`` as an in-process tool, idempotent or not."""
    cat = Catalog()
    cat.add_function(noop_tool, tool=TOOL, capability="noop", input_schema=STEP_SCHEMA,
                     idempotent=not side_effects)
    return cat


def orchestrator(store_url: str, side_effects: bool, n: int) -> Orchestrator:
    config = OrchestratorConfig(
        llm_provider="scripted", synthesis_enabled=False, store_url=store_url,
        max_plan_steps=max(n, 1000), max_concurrency=1_000_000, run_timeout_s=3600.0,
        step_timeout_s=3600.0)
    return Orchestrator(catalog(side_effects), ScriptedLLM([]), config,
                        registry=CollectorRegistry())


@contextlib.contextmanager
def postgres_url() -> Iterator[str | None]:
    """A throwaway PostgreSQL cluster's URL, or None when the binaries are absent."""
    try:
        from tests.support.net import ServerUnavailable
        from tests.support.postgres import start_postgres
    except ImportError:
        yield None
        return
    try:
        with start_postgres(database="bench") as server:
            yield server.dsn
    except ServerUnavailable:
        yield None


async def measure(stores: dict[str, str], n: int, repeats: int,
                  side_effects: bool) -> dict[str, float]:
    """Median wall time (s) of one run of an ``n``-step DAG per store."""
    plan = layered_dag(n).plan(sleep=False)
    orchs = {name: orchestrator(url, side_effects, n) for name, url in stores.items()}
    for orch in orchs.values():  # warm: tables, caches, connections
        await orch.arun(QUERY, plan=layered_dag(20, seed=3).plan(sleep=False))
    times: dict[str, list[float]] = {name: [] for name in stores}
    for _ in range(repeats):
        for name, orch in orchs.items():
            gc.collect()
            started = time.perf_counter()
            result = await orch.arun(QUERY, plan=plan)
            times[name].append(time.perf_counter() - started)
            if result.status != "succeeded":
                raise RuntimeError(f"{name}: run {result.status}: {result.error}")
    for orch in orchs.values():
        await orch.aclose()
    return {name: common.median(values) for name, values in times.items()}


def render(argv: list[str], facts: dict[str, Any], n: int, repeats: int,
           rows: list[tuple[str, str, dict[str, float]]]) -> str:
    table = []
    for workload, note, walls in rows:
        base = walls["memory"]
        for name, wall in walls.items():
            extra = "—" if name == "memory" else common.fmt((wall - base) / n * 1e6)
            table.append((workload, name, common.fmt(wall * 1000), extra, note))
    body = common.section_preamble("Run store: cost per step", "store", argv, facts)
    body += (
        f"\n{n}-step layered DAG of no-op in-process steps, plan given, median of {repeats} "
        "interleaved runs per store; the cost is the extra wall time per step over "
        "`memory://` (nothing persisted). Target: ≤ "
        f"{TARGET_SQLITE_US:g} µs/step with SQLite for idempotent steps (batched writes).\n\n"
        + common.md_table(("workload", "store", "run wall (ms)", "cost per step (µs)", ""),
                          table)
        + "\n\nSide-effect steps pay for two immediate transactions each (the started marker "
        "before the call, synchronous to disk and fenced by the run's lease; the outcome "
        "after it): that is what lets a resumed run tell a call "
        "that may have happened from one never sent. Mark a capability idempotent (or give "
        "it an idempotency-key header) when it is, and it costs what the first rows show.\n"
    )
    return body


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m benchmarks.store", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_report_arguments(parser)
    parser.add_argument("--steps", type=int, help="steps per run (default 1000)")
    parser.add_argument("--repeats", type=int, help="runs per store (default 7)")
    parser.add_argument("--no-postgres", action="store_true", help="skip PostgreSQL")
    args = common.parse_args(parser, argv)
    n = args.steps or (60 if args.quick else 1000)
    repeats = args.repeats or (2 if args.quick else 7)
    facts = common.machine_facts()
    rows: list[tuple[str, str, dict[str, float]]] = []
    with tempfile.TemporaryDirectory() as tmp, \
            (contextlib.nullcontext(None) if args.no_postgres else postgres_url()) as pg:
        stores = {"memory": "memory://", "sqlite": f"sqlite:///{tmp}/runs.db"}
        if pg is not None:
            stores["postgresql"] = pg
        for workload, side_effects in (("idempotent steps", False), ("side-effect steps", True)):
            walls = asyncio.run(measure(stores, n, repeats, side_effects))
            note = "" if pg is not None or args.no_postgres else "PostgreSQL not installed"
            rows.append((workload, note, walls))
            line = ", ".join(
                f"{name} {wall * 1000:.1f} ms"
                + ("" if name == "memory" else f" ({(wall - walls['memory']) / n * 1e6:+.1f} µs/step)")
                for name, wall in walls.items())
            print(f"{workload}, {n} steps: {line}", flush=True)
    if not args.no_report:
        common.write_section(args.report, "store", render(argv, facts, n, repeats, rows))
        print(f"wrote the store section of {args.report}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
