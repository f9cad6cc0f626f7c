"""Scheduler benchmark: overhead per step, makespan vs critical path, peak memory.

Random layered DAGs (seeded) of 200, 1,000 and 10,000 steps run through dagwright's
public API with a given plan (``await orch.arun(query, plan=...)``: no planning, no
synthesis, every defense layer enabled, happy path), side by side with a bare asyncio
ready-set loop (the floor) and LangGraph on the same DAG with the same tool functions.

Figures:

* overhead per step with no-op tools: (dagwright wall − floor wall) / steps;
* makespan / critical path with tools that sleep 5–60 ms (the critical path is the
  lower bound of any schedule: ``ValidatedPlan.critical_path_length``);
* peak memory of a 10,000-step plan validated and executed, each engine in a fresh
  subprocess (peak RSS; dagwright also under tracemalloc).

When dagwright misses the overhead target the script profiles a run (cProfile) and
times each per-step component on its own, so the report names what costs what.

Run: ``python -m benchmarks.scheduler`` (``--quick`` for small sizes).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import subprocess
import sys
import time
import timeit
import tracemalloc
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import contextlib

from prometheus_client import CollectorRegistry

from benchmarks import common, profiling
from benchmarks.dags import (
    bench_catalog,
    build_langgraph,
    layered_dag,
    noop_tool,
    run_floor,
    run_langgraph,
    sleep_tool,
)
from orchestration import Orchestrator, OrchestratorConfig, Plan, ScriptedLLM, validate_plan

TARGET_OVERHEAD_US = 30.0
"""With a real SDK TracerProvider under head sampling (the headline configuration)."""
TARGET_ALL_SPANS_X = 10.0
"""Every span recorded: at most this many times the floor per step."""
TARGET_NOOP_X = 5.0
"""The no-op OpenTelemetry provider: at most this many times the floor per step."""
SAMPLE_RATIO = 0.1
"""The head-sampling ratio of the headline row (``ParentBased(TraceIdRatioBased(0.1))``)."""
TARGET_MAKESPAN_RATIO = 1.05
TARGET_PEAK_MB = 300.0
QUERY = "benchmark"


def engine_config(max_steps: int) -> OrchestratorConfig:
    """Planning skipped (plan given), synthesis off, limits far above the DAG's needs."""
    return OrchestratorConfig(
        synthesis_enabled=False, max_plan_steps=max(max_steps, 20_000),
        max_concurrency=1_000_000, run_timeout_s=3600.0, step_timeout_s=3600.0,
        llm_provider="scripted", store_url="memory://",  # the store is measured on its own
    )


def make_orchestrator(max_steps: int) -> Orchestrator:
    return Orchestrator(bench_catalog(), ScriptedLLM([]), engine_config(max_steps),
                        registry=CollectorRegistry())


def sdk_orchestrator(max_steps: int, sampler: Any) -> tuple[Orchestrator, Any]:
    """An orchestrator with a real SDK ``TracerProvider`` (batch processor, in-memory
    exporter, the production shape), and its exporter (cleared between runs)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=sampler)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return Orchestrator(bench_catalog(), ScriptedLLM([]), engine_config(max_steps),
                        registry=CollectorRegistry(), tracer_provider=provider), exporter


def planner_orchestrator(max_steps: int, plan_text: dict[str, str], *,
                         streamed: bool) -> Orchestrator:
    """The plan arrives as the planner LLM's text (``plan_text["text"]``), is parsed and
    validated; ``streamed`` reads it as a stream of 16-character pieces (steps start while
    it arrives), else as one answer."""
    config = engine_config(max_steps).model_copy(update={"stream_plan": streamed})
    return Orchestrator(bench_catalog(), ScriptedLLM(lambda request: plan_text["text"]), config,
                        registry=CollectorRegistry())


def have_langgraph() -> bool:
    try:
        import langgraph  # noqa: F401
    except ImportError:
        return False
    return True


async def run_dagwright(orch: Orchestrator, plan: dict[str, Any], n: int) -> Any:
    result = await orch.arun(QUERY, plan=plan)
    if result.status != "succeeded" or len(result.steps) != n:
        raise RuntimeError(f"dagwright run did not succeed: {result.status} {result.error}")
    return result


# ------------------------------------------------------------------------------ overhead


async def run_planned(orch: Orchestrator, n: int) -> Any:
    """A run whose plan comes from the (scripted) planner's text."""
    result = await orch.arun(QUERY)
    if result.status != "succeeded" or len(result.steps) != n:
        raise RuntimeError(f"planned run did not succeed: {result.status} {result.error}")
    return result


async def measure_overhead(sizes: list[int], repeats: int, langgraph: bool) -> list[dict[str, Any]]:
    """Wall time per step with no-op tools; repeats interleave the engines (median kept)."""
    from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased, TraceIdRatioBased

    rows = []
    orch = make_orchestrator(max(sizes))
    sampled, sampled_spans = sdk_orchestrator(max(sizes),
                                              ParentBased(TraceIdRatioBased(SAMPLE_RATIO)))
    every, every_spans = sdk_orchestrator(max(sizes), ALWAYS_ON)
    plan_text = {"text": json.dumps(layered_dag(50, seed=1).plan(sleep=False))}
    planners = {"planner": planner_orchestrator(max(sizes), plan_text, streamed=False),
                "planner_streamed": planner_orchestrator(max(sizes), plan_text, streamed=True)}
    traced = {"sdk_sampled": (sampled, sampled_spans), "sdk_all": (every, every_spans)}
    for warm_orch in (orch, sampled, every):
        await run_dagwright(warm_orch, layered_dag(50, seed=1).plan(sleep=False), 50)
    for planner in planners.values():
        await run_planned(planner, 50)
    if langgraph:  # the first graph pays LangGraph's imports
        warm = layered_dag(20, seed=1)
        app, _ = build_langgraph(warm, noop_tool, sleep=False)
        await run_langgraph(app, warm)
    for n in sizes:
        dag = layered_dag(n)
        plan = dag.plan(sleep=False)
        plan_text["text"] = json.dumps(plan)
        times: dict[str, list[float]] = {"floor": [], "dagwright": [], "validate": [],
                                         "lg_build": [], "lg_run": [], "sdk_sampled": [],
                                         "sdk_all": [], "planner": [], "planner_streamed": []}
        catalog = orch.catalog
        for _ in range(repeats):
            gc.collect()
            t0 = time.perf_counter()
            await run_floor(dag, noop_tool, sleep=False)
            times["floor"].append(time.perf_counter() - t0)

            gc.collect()
            t0 = time.perf_counter()
            validate_plan(Plan.model_validate(plan), catalog, max_steps=orch.config.max_plan_steps)
            times["validate"].append(time.perf_counter() - t0)

            gc.collect()
            t0 = time.perf_counter()
            await run_dagwright(orch, plan, n)
            times["dagwright"].append(time.perf_counter() - t0)

            for name, (traced_orch, spans) in traced.items():
                gc.collect()
                t0 = time.perf_counter()
                await run_dagwright(traced_orch, plan, n)
                times[name].append(time.perf_counter() - t0)
                spans.clear()
            for name, planner in planners.items():
                gc.collect()
                t0 = time.perf_counter()
                await run_planned(planner, n)
                times[name].append(time.perf_counter() - t0)

            if langgraph:
                gc.collect()
                t0 = time.perf_counter()
                app, outputs = build_langgraph(dag, noop_tool, sleep=False)
                t1 = time.perf_counter()
                await run_langgraph(app, dag)
                t2 = time.perf_counter()
                if len(outputs) != n:
                    raise RuntimeError(f"LangGraph ran {len(outputs)} of {n} steps")
                times["lg_build"].append(t1 - t0)
                times["lg_run"].append(t2 - t1)
        med = {k: common.median(v) if v else 0.0 for k, v in times.items()}
        row = {
            "steps": n, "edges": dag.edges, "layers": dag.layers,
            "floor_us": med["floor"] / n * 1e6,
            "dagwright_us": med["dagwright"] / n * 1e6,
            "validate_us": med["validate"] / n * 1e6,
            "overhead_us": (med["dagwright"] - med["floor"]) / n * 1e6,
            "exec_overhead_us": (med["dagwright"] - med["validate"] - med["floor"]) / n * 1e6,
        }
        for name in ("sdk_sampled", "sdk_all", "planner", "planner_streamed"):
            row[f"{name}_us"] = med[name] / n * 1e6
            row[f"{name}_overhead_us"] = (med[name] - med["floor"]) / n * 1e6
        if langgraph:
            row["lg_build_us"] = med["lg_build"] / n * 1e6
            row["lg_run_us"] = med["lg_run"] / n * 1e6
            row["lg_overhead_us"] = (med["lg_build"] + med["lg_run"] - med["floor"]) / n * 1e6
        rows.append(row)
        print(f"tracing   {n:>6} steps: SDK sampled {row['sdk_sampled_overhead_us']:.1f} µs/step "
              f"over the floor; every span {row['sdk_all_us'] / row['floor_us']:.1f}× the floor; "
              f"no-op {row['dagwright_us'] / row['floor_us']:.1f}×; planner path "
              f"{row['planner_overhead_us']:.1f} (streamed {row['planner_streamed_overhead_us']:.1f})"
              " µs/step over the floor", flush=True)
        print(f"overhead  {n:>6} steps: floor {row['floor_us']:.1f} µs/step, dagwright "
              f"{row['dagwright_us']:.1f} µs/step (validation {row['validate_us']:.1f}) -> "
              f"overhead {row['overhead_us']:.1f} µs/step"
              + (f"; LangGraph build {row['lg_build_us']:.1f} + run {row['lg_run_us']:.1f} µs/step"
                 if langgraph else ""), flush=True)
    return rows


# ------------------------------------------------------------------------------ makespan


async def measure_makespan(sizes: list[int], langgraph: bool) -> list[dict[str, Any]]:
    """Makespan of each engine with sleeping tools, over the critical path."""
    rows = []
    orch = make_orchestrator(max(sizes))
    await run_dagwright(orch, layered_dag(50, seed=1).plan(sleep=False), 50)  # warm caches
    for n in sizes:
        dag = layered_dag(n)
        plan = dag.plan(sleep=True)
        validated = validate_plan(Plan.model_validate(plan), orch.catalog,
                                  max_steps=orch.config.max_plan_steps)
        cp = validated.critical_path_length({s: w / 1000 for s, w in dag.weight_ms.items()})
        assert abs(cp * 1000 - dag.critical_path_ms()) < 1e-6
        gc.collect()
        t0 = time.perf_counter()
        await run_floor(dag, sleep_tool, sleep=True)
        floor = time.perf_counter() - t0
        gc.collect()
        t0 = time.perf_counter()
        result = await run_dagwright(orch, plan, n)
        wall = time.perf_counter() - t0
        starts = [s.started_at_s for s in result.steps.values() if s.started_at_s is not None]
        ends = [s.started_at_s + s.duration_s for s in result.steps.values()
                if s.started_at_s is not None]
        span = max(ends) - min(starts)
        row: dict[str, Any] = {"steps": n, "layers": dag.layers, "cp_s": cp, "floor_s": floor,
                               "dagwright_s": wall, "dagwright_exec_s": span}
        if langgraph:
            app, _ = build_langgraph(dag, sleep_tool, sleep=True)
            gc.collect()
            t0 = time.perf_counter()
            await run_langgraph(app, dag)
            row["langgraph_s"] = time.perf_counter() - t0
        rows.append(row)
        print(f"makespan  {n:>6} steps: critical path {cp:.3f} s; floor {floor / cp:.3f}×, "
              f"dagwright {wall / cp:.3f}× (steps only {span / cp:.3f}×)"
              + (f", LangGraph {row['langgraph_s'] / cp:.3f}×" if langgraph else ""), flush=True)
    return rows


def first_run_cost() -> dict[str, float]:
    """A 1-step run on a fresh event loop, then again on the same loop (ms), and what
    building an ``httpx.AsyncClient`` alone costs (the transport makes one per loop)."""
    import httpx

    orch = make_orchestrator(10)
    plan = layered_dag(1).plan(sleep=False)

    async def twice() -> tuple[float, float]:
        t0 = time.perf_counter()
        await run_dagwright(orch, plan, 1)
        t1 = time.perf_counter()
        await run_dagwright(orch, plan, 1)
        return t1 - t0, time.perf_counter() - t1

    asyncio.run(twice())  # imports and prepared capabilities
    first, second = asyncio.run(twice())

    async def client() -> float:
        t0 = time.perf_counter()
        c = httpx.AsyncClient()
        elapsed = time.perf_counter() - t0
        await c.aclose()
        return elapsed

    return {"first_ms": first * 1000, "second_ms": second * 1000,
            "httpx_client_ms": min(asyncio.run(client()) for _ in range(3)) * 1000}


# -------------------------------------------------------------------------------- memory


def memory_child(engine: str, n: int, mode: str) -> dict[str, Any]:
    """Runs in a fresh subprocess: one engine, one n-step no-op DAG, its peak memory."""
    dag = layered_dag(n)
    plan = dag.plan(sleep=False)
    app = None
    if engine == "dagwright":
        orch = make_orchestrator(n)
    gc.collect()
    baseline = common.rss_mb()
    if mode == "tracemalloc":
        tracemalloc.start()
    t0 = time.perf_counter()
    if engine == "dagwright":
        asyncio.run(run_dagwright(orch, plan, n))
    elif engine == "floor":
        asyncio.run(run_floor(dag, noop_tool, sleep=False))
    else:
        app, outputs = build_langgraph(dag, noop_tool, sleep=False)
        asyncio.run(run_langgraph(app, dag))
        assert len(outputs) == n
    elapsed = time.perf_counter() - t0
    out = {"engine": engine, "steps": n, "mode": mode, "baseline_mb": baseline,
           "peak_rss_mb": common.peak_rss_mb(), "seconds": elapsed}
    if mode == "tracemalloc":
        out["tracemalloc_peak_mb"] = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
    return out


def measure_memory(n: int, engines: list[str], tracemalloc_too: bool) -> list[dict[str, Any]]:
    rows = []
    jobs = [(e, "rss") for e in engines] + ([("dagwright", "tracemalloc")] if tracemalloc_too else [])
    for engine, mode in jobs:
        proc = subprocess.run(
            [sys.executable, "-m", "benchmarks.scheduler", "--memory-child", engine,
             "--memory-steps", str(n), "--memory-mode", mode],
            capture_output=True, text=True, cwd=common.REPO_ROOT, timeout=900, check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"memory child {engine}/{mode} failed:\n{proc.stderr[-3000:]}")
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        rows.append(row)
        extra = (f", tracemalloc peak {row['tracemalloc_peak_mb']:.1f} MiB"
                 if "tracemalloc_peak_mb" in row else "")
        print(f"memory    {n:>6} steps {engine:<9} ({mode}): peak RSS {row['peak_rss_mb']:.1f} MiB "
              f"(before the run {row['baseline_mb']:.1f}){extra}", flush=True)
    return rows


# ------------------------------------------------------------------------------ profiling

def profile_dagwright(n: int) -> dict[str, Any]:
    """cProfile one n-step no-op run: self time by where it is spent, and top functions."""
    orch = make_orchestrator(n)
    plan = layered_dag(n).plan(sleep=False)

    async def go() -> dict[str, Any]:
        await run_dagwright(orch, layered_dag(50, seed=1).plan(sleep=False), 50)  # warm up
        return await profiling.profile(lambda: run_dagwright(orch, plan, n))

    out = profiling.summarise(asyncio.run(go()), n)
    out["steps"] = n
    return out


def component_costs(n: int = 1000) -> list[tuple[str, float]]:
    """Each piece of per-step work timed alone (µs per step), without the profiler's skew.

    These use the engine's building blocks directly — only to measure them; what a
    happy-path step does is listed in :mod:`executors._step_runner`.
    """
    from opentelemetry import trace as ot_trace

    from executors._binding import bind_params
    from executors._prepare import PreparedCapability
    from orchestration.result import Attempt, StepResult
    from orchestration.telemetry import Telemetry
    from orchestration.telemetry._tracing import redact_attributes

    catalog = bench_catalog()
    cap = catalog.get("bench", "noop")
    prepared = PreparedCapability(cap)
    params = {"i": 7, "x": 3}
    raw = {"i": 7, "x": "{{s1.v}}"}
    outputs = {"s1": {"v": 3}}
    telemetry = Telemetry.create(None, CollectorRegistry())
    engine_tracer = telemetry.tracer
    otel_tracer = ot_trace.get_tracer("benchmark")
    metrics = telemetry.metrics
    step_attrs: dict[str, Any] = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "bench.noop",
                  "gen_ai.tool.call.id": "0123456789abcdef0123456789abcdef:s1",
                  "dagwright.run.id": "0123456789abcdef0123456789abcdef",
                  "dagwright.step.id": "s1", "dagwright.capability": "bench.noop"}
    call_attrs: dict[str, Any] = {"gen_ai.tool.name": "bench.noop", "dagwright.step.id": "s1",
                  "dagwright.layer": "plan", "dagwright.attempt": 1}

    def spans(tracer: Any) -> None:
        with tracer.start_as_current_span("execute_tool bench.noop", attributes=step_attrs), \
                tracer.start_as_current_span("tool_call bench.noop", attributes=call_attrs):
            ot_trace.get_current_span()

    def metric_ops() -> None:
        metrics.tool_call_duration.labels("bench", "noop").observe(0.0001)
        metrics.tool_calls.labels("bench", "noop", "succeeded").inc()
        metrics.steps.labels("bench", "noop", "succeeded").inc()
        metrics.step_duration.labels("bench", "noop").observe(0.0002)

    def models() -> None:
        attempt = Attempt(number=1, layer="plan", params=params, outcome="succeeded",
                          latency_s=0.0001)
        StepResult(id="s1", tool="bench", capability="noop", status="succeeded", output={"v": 1},
                   attempts=[attempt], started_at_s=0.0, duration_s=0.0)

    async def tasks_and_timeouts(count: int) -> None:
        loop = asyncio.get_running_loop()

        async def inner() -> None:
            async with asyncio.timeout_at(loop.time() + 100):
                async with asyncio.timeout(100):
                    await noop_tool(1)

        for _ in range(count):
            await loop.create_task(inner())

    def loop_cost() -> float:
        count = 5000
        t0 = time.perf_counter()
        asyncio.run(tasks_and_timeouts(count))
        return (time.perf_counter() - t0) / count * 1e6

    plan = layered_dag(n).plan(sleep=False)

    def validation_cost() -> float:
        best = min(timeit.repeat(
            lambda: validate_plan(Plan.model_validate(plan), catalog, max_steps=20_000),
            number=1, repeat=3))
        return best / n * 1e6

    validated = validate_plan(Plan.model_validate(plan), catalog, max_steps=20_000)

    def dump_cost() -> float:
        return min(timeit.repeat(validated.to_dict, number=1, repeat=3)) / n * 1e6

    def graph_cost(fn: Any) -> float:
        return min(timeit.repeat(lambda: fn(validated.graph), number=1, repeat=3)) / n * 1e6

    pieces: list[tuple[str, Any]] = [
        ("pre-flight validation: `PreparedCapability.validate` (jsonschema `iter_errors`)",
         lambda: prepared.validate(params)),
        ("layer 2 coercion: `Coercer.coerce` (values already the right type)",
         lambda: prepared.coercer.coerce(params)),
        ("reference binding: `bind_params`", lambda: bind_params(raw, outputs)),
        ("2 spans through the engine's tracer (`DagwrightTracer`: redaction + log context)",
         lambda: spans(engine_tracer)),
        ("↳ of which: redacting the 2 spans' attributes (`redact_attributes`)",
         lambda: (redact_attributes(step_attrs), redact_attributes(call_attrs))),
        ("↳ the same 2 spans straight on the OpenTelemetry API (no-op provider)",
         lambda: spans(otel_tracer)),
        ("4 Prometheus metric updates (`labels(...).inc/observe`)", metric_ops),
        ("`Attempt` + `StepResult` pydantic models", models),
        ("`json.dumps` of the tool output (serialisability check)", lambda: json.dumps({"v": 1})),
    ]
    import networkx as nx

    def no_cycle(graph: Any) -> None:
        with contextlib.suppress(nx.NetworkXNoCycle):
            nx.find_cycle(graph)

    out = [("plan validation: `Plan.model_validate` + `validate_plan` (per step, "
            f"{n:,}-step plan)", validation_cost()),
           ("↳ for reference: a cycle check with `nx.find_cycle(graph)` on this acyclic graph",
            graph_cost(no_cycle)),
           ("↳ for reference: the same check with `nx.is_directed_acyclic_graph(graph)`",
            graph_cost(nx.is_directed_acyclic_graph)),
           ("`ValidatedPlan.to_dict()` for the result (per step)", dump_cost())]
    for label, fn in pieces:
        number = 20_000
        best = min(timeit.repeat(fn, number=number, repeat=3)) / number * 1e6
        out.append((label, best))
    out.append(("asyncio: a task + `timeout_at` + `timeout` per step (the floor pays ~the task)",
                loop_cost()))
    return out


class _NullMetric:
    """Stands in for every Prometheus metric: any attribute, call or label is a no-op."""

    def __getattr__(self, name: str) -> _NullMetric:
        return self

    def __call__(self, *args: Any, **kwargs: Any) -> _NullMetric:
        return self


class _NullSpanContext:
    def __enter__(self) -> Any:
        from opentelemetry.trace import INVALID_SPAN

        return INVALID_SPAN

    def __exit__(self, *exc: object) -> None:
        return None


class _NullTracer:
    """A tracer that does nothing at all (not even context propagation)."""

    def start_as_current_span(self, *args: Any, **kwargs: Any) -> _NullSpanContext:
        return _NullSpanContext()

    def start_span(self, *args: Any, **kwargs: Any) -> Any:
        from opentelemetry.trace import INVALID_SPAN

        return INVALID_SPAN


def in_situ_costs(n: int, repeats: int) -> list[dict[str, Any]]:
    """What removing each piece saves inside a real run (µs per step, n-step no-op plan).

    Measurement only: the pieces are swapped out on this process's objects (the tracer
    and metrics of one orchestrator each, the validator class, the garbage collector),
    never in the engine's files. All variants run in one event loop, interleaved
    repeat by repeat, so drift on a noisy machine hits them alike; medians are kept.
    """
    from opentelemetry import trace as ot_trace

    from executors import _prepare as prepared

    pieces = {
        "engine tracer": ("the tracer wrapper (span redaction + log context)",
                          "engine tracer replaced by the plain OpenTelemetry no-op tracer"),
        "spans": ("all spans (wrapper included)", "a tracer that does nothing at all"),
        "metrics": ("Prometheus metric updates", "metrics object replaced by a no-op"),
        "validation": ("pre-flight schema validation", "`PreparedCapability.validate` → []"),
        "coercion": ("layer 2 coercion", "`type_coercion_enabled=False`"),
        "gc": ("garbage collection", "`gc.disable()` during the run"),
    }
    names = ["as shipped", *pieces, "all"]
    dag = layered_dag(n)
    plan = dag.plan(sleep=False)

    def build(name: str) -> Orchestrator:
        config = engine_config(n)
        if name in ("coercion", "all"):
            config = config.model_copy(update={"type_coercion_enabled": False})
        orch = Orchestrator(bench_catalog(), ScriptedLLM([]), config, registry=CollectorRegistry())
        if name == "engine tracer":
            orch.telemetry.tracer = ot_trace.get_tracer("benchmark")
        if name in ("spans", "all"):
            orch.telemetry.tracer = _NullTracer()  # type: ignore[assignment]
        if name in ("metrics", "all"):
            orch.telemetry.metrics = _NullMetric()  # type: ignore[assignment]
        return orch

    orchs = {name: build(name) for name in names}
    original_validate = prepared.PreparedCapability.validate

    async def measure_all() -> dict[str, list[float]]:
        times: dict[str, list[float]] = {name: [] for name in ["floor", *names]}
        for orch in orchs.values():
            await run_dagwright(orch, layered_dag(50, seed=1).plan(sleep=False), 50)
        for _ in range(repeats):
            gc.collect()
            t0 = time.perf_counter()
            await run_floor(dag, noop_tool, sleep=False)
            times["floor"].append(time.perf_counter() - t0)
            for name, orch in orchs.items():
                gc.collect()
                if name in ("validation", "all"):
                    prepared.PreparedCapability.validate = (  # type: ignore[method-assign]
                        lambda self, params: [])
                if name in ("gc", "all"):
                    gc.disable()
                try:
                    t0 = time.perf_counter()
                    await run_dagwright(orch, plan, n)
                    times[name].append(time.perf_counter() - t0)
                finally:
                    prepared.PreparedCapability.validate = original_validate  # type: ignore[method-assign]
                    gc.enable()
        return times

    times = asyncio.run(measure_all())
    med = {name: common.median(v) / n * 1e6 for name, v in times.items()}
    shipped = sorted(t / n * 1e6 for t in times["as shipped"])
    spread = (shipped[-1] - shipped[0]) / 2 if len(shipped) > 1 else 0.0
    rows = [{"kind": "base", "name": "dagwright as shipped",
             "how": f"overhead over the floor (repeats spread ±{spread:.0f} µs/step)",
             "us": med["as shipped"] - med["floor"]}]
    for key, (name, how) in pieces.items():
        rows.append({"kind": "piece", "name": name, "how": how,
                     "us": med["as shipped"] - med[key]})
    rows.append({"kind": "rest", "name": "what is left", "how": "all of the above removed at once "
                 "(scheduler, step runner, result models, asyncio timeouts, plan validation)",
                 "us": med["all"] - med["floor"]})
    return rows


# -------------------------------------------------------------------------------- report


def _status(ok: bool) -> str:
    return "meets" if ok else "**misses**"


def findings(
    overhead: list[dict[str, Any]], makespan: list[dict[str, Any]], memory: list[dict[str, Any]],
    components: list[tuple[str, float]] | None, in_situ: list[dict[str, Any]] | None,
    first_run: dict[str, float] | None, langgraph: bool,
) -> list[str]:
    """The headline results, each with its number, in plain words."""
    out = []
    if overhead and "sdk_sampled_overhead_us" in overhead[0]:
        worst = max(r["sdk_sampled_overhead_us"] for r in overhead)
        per = ", ".join(f"{r['sdk_sampled_overhead_us']:.0f} µs at {r['steps']:,}"
                        for r in overhead)
        out.append(
            f"**Headline — real SDK `TracerProvider`, head sampling "
            f"(`ParentBased(TraceIdRatioBased({SAMPLE_RATIO:g}))`)**: overhead per step over the "
            f"floor {per} steps — {_status(worst <= TARGET_OVERHEAD_US)} the ≤ "
            f"{TARGET_OVERHEAD_US:g} µs target" + ("." if worst <= TARGET_OVERHEAD_US else
                                                   f" ({worst / TARGET_OVERHEAD_US:.1f}× it)."))
        all_x = [r["sdk_all_us"] / r["floor_us"] for r in overhead]
        noop_x = [r["dagwright_us"] / r["floor_us"] for r in overhead]
        sizes = ", ".join(f"{r['steps']:,}" for r in overhead)
        out.append(
            "Every span recorded: " + ", ".join(f"{x:.0f}×" for x in all_x) + f" the floor at "
            f"{sizes} steps ({_status(max(all_x) <= TARGET_ALL_SPANS_X)} ≤ "
            f"{TARGET_ALL_SPANS_X:g}×); no-op provider: " + ", ".join(f"{x:.0f}×" for x in noop_x)
            + f" ({_status(max(noop_x) <= TARGET_NOOP_X)} ≤ {TARGET_NOOP_X:g}×). Planner path "
            "(the plan arrives as LLM text, parsed and validated): "
            + ", ".join(f"{r['planner_overhead_us']:.0f}" for r in overhead)
            + " µs/step over the floor as one answer, "
            + ", ".join(f"{r['planner_streamed_overhead_us']:.0f}" for r in overhead)
            + " µs/step streamed in 16-character pieces (the incremental scan and the per-step "
            "checks while it streams, then the whole answer parsed and validated again).")
    if overhead:
        per = ", ".join(f"{r['overhead_us']:.0f} µs at {r['steps']:,}" for r in overhead)
        text = (f"No-op provider, overhead per step over the floor: {per} steps (its target is "
                f"the ≤ {TARGET_NOOP_X:g}× floor above).")
        if langgraph:
            lg = ", ".join(f"{r['lg_overhead_us']:.0f} µs at {r['steps']:,}" for r in overhead)
            text += f" LangGraph (build + run): {lg}."
        out.append(text)
        val = ", ".join(f"{r['validate_us']:.0f}" for r in overhead)
        sizes = ", ".join(f"{r['steps']:,}" for r in overhead)
        grows = overhead[-1]["validate_us"] > 1.5 * overhead[0]["validate_us"]
        text = (f"Plan validation{' grows faster than the plan' if grows else ''}: {val} µs/step "
                f"at {sizes} steps")
        comp = dict(components or [])
        cycle = next((v for k, v in comp.items() if "find_cycle" in k), None)
        dag = next((v for k, v in comp.items() if "is_directed_acyclic_graph" in k), None)
        whole = next((v for k, v in comp.items() if k.startswith("plan validation")), None)
        if cycle is not None and dag is not None and whole is not None and whole >= 0.5 * cycle:
            text += (f"; a cycle check with `nx.find_cycle` on an acyclic graph costs {cycle:.0f} "
                     f"µs/step at the profiled size, `nx.is_directed_acyclic_graph` {dag:.1f} "
                     "µs/step for the same answer.")
        else:
            text += "."
        out.append(text)
    if in_situ:
        ranked = sorted((r for r in in_situ if r["kind"] == "piece"), key=lambda r: -r["us"])
        items = "; ".join(f"{r['name']} {r['us']:.0f} µs" for r in ranked)
        out.append(f"What each piece costs per step inside a run, largest first: {items}; "
                   f"{in_situ[-1]['us']:.0f} µs/step remain with all of them removed (scheduler, "
                   "step runner, result models, asyncio timeouts, plan validation).")
    if makespan:
        per = ", ".join(f"{r['dagwright_s'] / r['cp_s']:.3f}× at {r['steps']:,} "
                        f"(steps only {r['dagwright_exec_s'] / r['cp_s']:.3f}×)" for r in makespan)
        text = f"Makespan / critical path: {per}; target ≤ {TARGET_MAKESPAN_RATIO}×."
        if langgraph:
            text += " LangGraph: " + ", ".join(f"{r['langgraph_s'] / r['cp_s']:.2f}×" for r in makespan) \
                + " (superstep barriers)."
        big = makespan[-1]
        if big["dagwright_s"] / big["cp_s"] > TARGET_MAKESPAN_RATIO:
            text += (f" At {big['steps']:,} steps the time before the first step starts (the "
                     "plan model and its validation, ~0.2 s) and the garbage collector's full "
                     "passes over the run's live objects, which pause the one event loop the "
                     "sleeps share, push dagwright past the bound.")
        out.append(text)
    rss = next((r for r in memory if r["engine"] == "dagwright" and r["mode"] == "rss"), None)
    if rss is not None:
        lg_mem = next((r for r in memory if r["engine"] == "langgraph"), None)
        out.append(f"Peak memory, {rss['steps']:,}-step plan validated and executed: "
                   f"{rss['peak_rss_mb']:.0f} MiB RSS for the whole process "
                   f"({'meets' if rss['peak_rss_mb'] <= TARGET_PEAK_MB else '**misses**'} the "
                   f"{TARGET_PEAK_MB:g} MB target), {rss['peak_rss_mb'] - rss['baseline_mb']:.0f} MiB "
                   "of it for the run" + (f"; LangGraph {lg_mem['peak_rss_mb']:.0f} MiB."
                                          if lg_mem else "."))
    if first_run is not None:
        paid = first_run["first_ms"] >= first_run["httpx_client_ms"] / 2
        out.append(f"The first run on a new event loop takes {first_run['first_ms']:.1f} ms for one "
                   f"no-op step, the next {first_run['second_ms']:.1f} ms; building an "
                   f"`httpx.AsyncClient` costs {first_run['httpx_client_ms']:.1f} ms alone (mostly "
                   "the TLS context), which "
                   + ("this run of in-process tools still paid." if paid else
                      "a run of in-process tools no longer pays (the transport creates its "
                      "client on the first HTTP call)."))
    return out


def render(
    argv: list[str], facts: dict[str, Any], overhead: list[dict[str, Any]],
    makespan: list[dict[str, Any]], memory: list[dict[str, Any]], profile: dict[str, Any] | None,
    components: list[tuple[str, float]] | None, langgraph: bool, profile_steps: int = 0,
    in_situ: list[dict[str, Any]] | None = None, first_run: dict[str, float] | None = None,
) -> str:
    parts = [common.section_preamble(
        "Scheduler: overhead per step, makespan, peak memory", "scheduler", argv, facts)]
    summary = findings(overhead, makespan, memory, components, in_situ, first_run, langgraph)
    if summary:
        parts.append("**Findings**\n\n" + "\n".join(f"- {line}" for line in summary) + "\n")
    parts.append(
        "Random layered DAGs (seed 7; about √n layers of varying width; each step depends on "
        "one step of the layer above, and on up to two more of the three layers above) run "
        "through `await orch.arun(query, plan=plan)`: planning skipped, synthesis off, layers "
        "2–4 and resilience enabled (happy path, so they only cost their checks), the "
        "default no-op OpenTelemetry provider and a fresh Prometheus registry. Every step "
        "binds a real reference (`x` = the first dependency's output), is coerced and "
        "validated against a small JSON Schema, and calls an in-process async tool. The "
        "**floor** is a bare asyncio ready-set loop doing the same binding and tool call and "
        "nothing else; **LangGraph** runs the same DAG as a `StateGraph` (a node per step, "
        "one join edge per multi-dependency step so it runs once, after all of its inputs).\n"
    )
    if overhead and "sdk_sampled_us" in overhead[0]:
        parts.append("### Overhead per step by tracing configuration (headline)\n")
        parts.append(
            "The same no-op runs with the tracing a service runs with: a real SDK "
            "`TracerProvider` with a `BatchSpanProcessor` and an in-memory exporter, sampled "
            f"at the head with `ParentBased(TraceIdRatioBased({SAMPLE_RATIO:g}))` (the "
            "production default; sampled-out runs must cost almost nothing) and with every span "
            "recorded (`ALWAYS_ON`); then the default no-op provider; then the planner path, "
            "where the plan is the scripted planner's JSON text instead of `plan=`, read as one "
            "answer or streamed in 16-character pieces. Median of the repeats, interleaved with "
            f"the floor. Targets: SDK sampled ≤ {TARGET_OVERHEAD_US:g} µs/step over the floor; "
            f"every span ≤ {TARGET_ALL_SPANS_X:g}× the floor; no-op ≤ {TARGET_NOOP_X:g}× the "
            "floor.\n")
        rows = []
        for r in overhead:
            fl = r["floor_us"]
            rows.append([
                f"{r['steps']:,}", common.fmt(fl),
                common.fmt(r["sdk_sampled_overhead_us"]),
                _status(r["sdk_sampled_overhead_us"] <= TARGET_OVERHEAD_US),
                f"{r['sdk_all_us'] / fl:.1f}×", _status(r["sdk_all_us"] / fl <= TARGET_ALL_SPANS_X),
                f"{r['dagwright_us'] / fl:.1f}×", _status(r["dagwright_us"] / fl <= TARGET_NOOP_X),
                common.fmt(r["planner_overhead_us"]), common.fmt(r["planner_streamed_overhead_us"]),
            ])
        parts.append(common.md_table(
            ["steps", "floor µs/step", "SDK sampled: overhead µs/step", "target",
             "every span: × floor", "target", "no-op: × floor", "target",
             "planner path, one answer: overhead µs/step",
             "planner path, streamed: overhead µs/step"], rows) + "\n")
    if overhead:
        parts.append("### Overhead per step, no-op provider (no-op tools)\n")
        parts.append(
            "Median of the repeats (engines interleaved). *dagwright* is the whole `arun` "
            "(plan model + DAG validation + execution) per step; *validation* is "
            "`validate_plan` alone; *overhead* = (dagwright − floor) / steps; *exec overhead* "
            f"leaves validation out. Target: dagwright ≤ {TARGET_NOOP_X:g}× the floor.\n")
        headers = ["steps", "edges", "floor µs/step", "dagwright µs/step", "validation µs/step",
                   "overhead µs/step", "exec overhead µs/step", "target"]
        if langgraph:
            headers[5:5] = ["LangGraph build µs/step", "LangGraph run µs/step"]
        rows = []
        for r in overhead:
            row = [f"{r['steps']:,}", f"{r['edges']:,}", common.fmt(r["floor_us"]),
                   common.fmt(r["dagwright_us"]), common.fmt(r["validate_us"]),
                   common.fmt(r["overhead_us"]), common.fmt(r["exec_overhead_us"]),
                   _status(r["dagwright_us"] <= TARGET_NOOP_X * r["floor_us"])]
            if langgraph:
                row[5:5] = [common.fmt(r["lg_build_us"]), common.fmt(r["lg_run_us"])]
            rows.append(row)
        parts.append(common.md_table(headers, rows) + "\n")
    if makespan:
        parts.append("### Makespan over critical path (tools sleep 5–60 ms)\n")
        parts.append(
            "The critical path (longest sleep-weighted path, `ValidatedPlan.critical_path_length`) "
            "is the lower bound of any schedule. *dagwright* is the whole `arun`; *steps only* "
            "runs from the first step's start to the last step's end (validation excluded). "
            "LangGraph executes in synchronous supersteps (a wave waits for its slowest node), "
            f"so it cannot reach the bound on a DAG like this. Target: ≤ {TARGET_MAKESPAN_RATIO}×.\n")
        headers = ["steps", "layers", "critical path s", "floor ×", "dagwright ×",
                   "dagwright steps only ×", "target"]
        if langgraph:
            headers.insert(6, "LangGraph ×")
        rows = []
        for r in makespan:
            cp = r["cp_s"]
            row = [f"{r['steps']:,}", r["layers"], f"{cp:.3f}", f"{r['floor_s'] / cp:.3f}",
                   f"{r['dagwright_s'] / cp:.3f}", f"{r['dagwright_exec_s'] / cp:.3f}",
                   _status(r["dagwright_s"] / cp <= TARGET_MAKESPAN_RATIO)]
            if langgraph:
                row.insert(6, f"{r['langgraph_s'] / cp:.3f}")
            rows.append(row)
        parts.append(common.md_table(headers, rows) + "\n")
    if memory:
        n = memory[0]["steps"]
        parts.append(f"### Peak memory, {n:,}-step plan validated and executed\n")
        parts.append(
            "Each engine in a fresh subprocess (imports, catalog and plan dict built before "
            "the measurement starts). *Peak RSS* is the whole process's high-water mark "
            "(`VmHWM`, interpreter and libraries included) — the figure the target is "
            f"about (≤ {TARGET_PEAK_MB:g} MB); *before* is the RSS just before the run; "
            "*tracemalloc peak* counts only Python allocations made during the run.\n")
        rows = []
        for r in memory:
            tm = common.fmt(r["tracemalloc_peak_mb"]) if "tracemalloc_peak_mb" in r else "—"
            target = (_status(r["peak_rss_mb"] <= TARGET_PEAK_MB)
                      if r["engine"] == "dagwright" and r["mode"] == "rss" else "")
            rows.append([r["engine"], r["mode"], common.fmt(r["baseline_mb"]),
                         common.fmt(r["peak_rss_mb"]), common.fmt(r["peak_rss_mb"] - r["baseline_mb"]),
                         tm, target])
        parts.append(common.md_table(
            ["engine", "measured with", "RSS before MiB", "peak RSS MiB", "growth MiB",
             "tracemalloc peak MiB", "target"], rows) + "\n")
    if profile is not None:
        parts.append(f"### Where the time goes (cProfile, {profile['steps']:,}-step no-op run)\n")
        parts.append(
            "Self time grouped by the library or module it is spent in, per step. cProfile "
            "inflates code made of many small calls (pydantic, jsonschema, asyncio), so read "
            "the shares, not the absolute values — the component timings below are measured "
            "without a profiler.\n")
        parts.append(common.md_table(
            ["where", "µs/step (profiled)", "share"],
            [[c["category"], common.fmt(c["us_per_unit"]), f"{c['share'] * 100:.1f}%"]
             for c in profile["categories"] if c["share"] >= 0.005]) + "\n")
        parts.append("Top functions by self time:\n")
        parts.append(common.md_table(
            ["function", "calls", "self s", "cumulative s"],
            [[f"`{f['func']}`", f"{f['calls']:,}", f"{f['tottime']:.3f}", f"{f['cumtime']:.3f}"]
             for f in profile["top_self"][:12]]) + "\n")
    if in_situ:
        parts.append(f"### What each piece costs inside a real run ({profile_steps:,} steps)\n")
        parts.append(
            "The no-op run measured again with one piece swapped out at a time (only in this "
            "benchmark process: the orchestrator's tracer or metrics object replaced, the "
            "validator class patched, coercion switched off by config), median of the "
            "repeats. Each ↳ row is the time per step that piece costs in situ (what removing it "
            "saves); the last row "
            "is what remains with all of them removed at once. Run-to-run noise on this "
            "machine is a few µs/step.\n")
        parts.append(common.md_table(
            ["piece", "how it was removed", "µs per step"],
            [[("↳ " if r["kind"] == "piece" else "") + r["name"], r["how"], common.fmt(r["us"])]
             for r in in_situ]) + "\n")
    if components:
        parts.append("### Per-step components timed alone (no profiler)\n")
        parts.append(
            "Each piece of work a happy-path step costs, timed alone in a loop (best of 3), "
            "so the overhead above can be read as a sum. ↳ rows detail the row above. "
            "What the components do not cover is the step runner's own glue (building "
            "attribute dicts, f-strings, awaits, the deadline bookkeeping).\n")
        table = [[label, common.fmt(us, 2)] for label, us in components]
        top = sum(us for label, us in components if not label.startswith("↳"))
        measured = next((r for r in overhead if r["steps"] == profile_steps), None)
        table.append(["**sum of the rows above (↳ rows excluded)**", f"**{top:.2f}**"])
        if measured is not None:
            table.append([f"measured overhead at {profile_steps:,} steps (dagwright − floor)",
                          common.fmt(measured["overhead_us"], 2)])
            table.append(["not covered: step-runner glue, scheduler loop, garbage collection",
                          common.fmt(measured["overhead_us"] - top, 2)])
        parts.append(common.md_table(["component", "µs per step"], table) + "\n")
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scheduler", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_report_arguments(parser)
    parser.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")],
                        help="comma-separated DAG sizes (default 200,1000,10000)")
    parser.add_argument("--repeats", type=int, help="repeats of the overhead runs (default 5)")
    parser.add_argument("--makespan-sizes", type=lambda s: [int(x) for x in s.split(",")],
                        help="sizes of the makespan runs (default: --sizes)")
    parser.add_argument("--memory-steps", type=int, help="steps of the memory run (default 10000)")
    parser.add_argument("--no-memory", action="store_true", help="skip the memory subprocesses")
    parser.add_argument("--no-langgraph", action="store_true", help="leave LangGraph out")
    parser.add_argument("--profile", choices=("auto", "always", "never"), default="auto",
                        help="profile dagwright when it misses the overhead target (auto)")
    parser.add_argument("--memory-child", choices=("dagwright", "floor", "langgraph"),
                        help=argparse.SUPPRESS)
    parser.add_argument("--memory-mode", choices=("rss", "tracemalloc"), default="rss",
                        help=argparse.SUPPRESS)
    args = common.parse_args(parser, argv)

    if args.memory_child:
        print(json.dumps(memory_child(args.memory_child, args.memory_steps or 10_000,
                                      args.memory_mode)))
        return 0

    sizes = args.sizes or ([50, 200] if args.quick else [200, 1000, 10_000])
    repeats = args.repeats or (1 if args.quick else 5)
    makespan_sizes = args.makespan_sizes or sizes
    memory_steps = args.memory_steps or (500 if args.quick else 10_000)
    langgraph = have_langgraph() and not args.no_langgraph
    if not langgraph and not args.no_langgraph:
        print("LangGraph is not installed (pip install -e '.[bench]'); leaving it out", flush=True)
    facts = common.machine_facts()

    overhead = asyncio.run(measure_overhead(sizes, repeats, langgraph))
    first_run = first_run_cost()
    print(f"first run on a new loop {first_run['first_ms']:.1f} ms, next {first_run['second_ms']:.1f} ms "
          f"(httpx.AsyncClient() alone {first_run['httpx_client_ms']:.1f} ms)", flush=True)
    makespan = asyncio.run(measure_makespan(makespan_sizes, langgraph))
    memory: list[dict[str, Any]] = []
    if not args.no_memory:
        engines = ["dagwright", "floor"] + (["langgraph"] if langgraph else [])
        memory = measure_memory(memory_steps, engines, tracemalloc_too=not args.quick)
    missed = any(r.get("sdk_sampled_overhead_us", r["overhead_us"]) > TARGET_OVERHEAD_US
                 or r["dagwright_us"] > TARGET_NOOP_X * r["floor_us"] for r in overhead)
    profile = components = in_situ = None
    if args.profile == "always" or (args.profile == "auto" and missed):
        n = 1000 if 1000 in sizes else min(sizes)
        profile = profile_dagwright(n)
        components = component_costs(n)
        print(f"profile ({n} steps, self time per step):")
        for c in profile["categories"][:10]:
            print(f"  {c['category']:<55} {c['us_per_unit']:8.1f} µs  {c['share'] * 100:5.1f}%")
        print("components timed alone:")
        for label, us in components:
            print(f"  {us:8.2f} µs  {label}")
        in_situ = in_situ_costs(n, max(repeats, 9) if not args.quick else 1)
        print("in situ (µs/step):")
        for r in in_situ:
            print(f"  {r['us']:8.1f} µs  {r['name']} ({r['how']})")

    if not args.no_report:
        body = render(argv, facts, overhead, makespan, memory, profile, components, langgraph,
                      profile_steps=profile["steps"] if profile else 0, in_situ=in_situ,
                      first_run=first_run)
        common.write_section(args.report, "scheduler", body)
        print(f"wrote the scheduler section of {args.report}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
