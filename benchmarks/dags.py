"""Seeded random layered DAGs, and the three ways the scheduler benchmark executes them.

The same DAG runs through dagwright's public API, a bare asyncio ready-set loop (the
floor: the least any asyncio scheduler can do) and LangGraph (a widely used graph
runtime), so the three are compared on identical work in one process.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypedDict

from orchestration import Catalog

TOOL = "bench"
STEP_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "i": {"type": "integer", "minimum": 0},
        "x": {"type": "integer"},
        "ms": {"type": "number", "minimum": 0},
    },
    "required": ["i"],
    "additionalProperties": False,
}
"""Input schema of the benchmark tools: small but real (types, bounds, no extras)."""

ToolFn = Callable[..., Awaitable[dict[str, Any]]]


async def noop_tool(i: int, x: int = 0, ms: float = 0.0) -> dict[str, Any]:
    """Does nothing: what is left of a run is the engine's own cost."""
    return {"v": i}


async def sleep_tool(i: int, x: int = 0, ms: float = 0.0) -> dict[str, Any]:
    """Waits ``ms`` milliseconds, like an I/O-bound tool."""
    await asyncio.sleep(ms / 1000.0)
    return {"v": i}


def bench_catalog() -> Catalog:
    """``bench.noop`` and ``bench.sleep`` as in-process async tools."""
    catalog = Catalog()
    catalog.add_function(noop_tool, tool=TOOL, capability="noop", input_schema=STEP_SCHEMA)
    catalog.add_function(sleep_tool, tool=TOOL, capability="sleep", input_schema=STEP_SCHEMA)
    return catalog


@dataclass
class Dag:
    """Steps in topological order, each with its dependencies and a sleep time (ms)."""

    steps: list[str]
    deps: dict[str, list[str]]
    weight_ms: dict[str, float]
    layers: int
    successors: dict[str, list[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.successors = {s: [] for s in self.steps}
        for step, deps in self.deps.items():
            for dep in deps:
                self.successors[dep].append(step)

    @property
    def edges(self) -> int:
        return sum(len(d) for d in self.deps.values())

    def params(self, index: int, step: str, *, sleep: bool) -> dict[str, Any]:
        deps = self.deps[step]
        params: dict[str, Any] = {"i": index}
        # the first dependency is a real data reference (binding is on the happy path)
        params["x"] = "{{" + deps[0] + ".v}}" if deps else 0
        if sleep:
            params["ms"] = self.weight_ms[step]
        return params

    def plan(self, *, sleep: bool) -> dict[str, Any]:
        """The DAG as a dagwright plan: ``x`` references the first dependency's output."""
        return {"steps": [
            {"id": step, "tool": TOOL, "capability": "sleep" if sleep else "noop",
             "params": self.params(i, step, sleep=sleep), "depends_on": self.deps[step][1:]}
            for i, step in enumerate(self.steps)
        ]}

    def critical_path_ms(self) -> float:
        best: dict[str, float] = {}
        for step in self.steps:
            before = max((best[d] for d in self.deps[step]), default=0.0)
            best[step] = before + self.weight_ms[step]
        return max(best.values(), default=0.0)


def layered_dag(n: int, *, seed: int = 7, min_ms: float = 5.0, max_ms: float = 60.0) -> Dag:
    """A random layered DAG of ``n`` steps (seeded, so every run builds the same one).

    About sqrt(n) layers of varying width (±50 %). Each step below the first layer
    depends on one step of the layer just above (so the depth is real) and on up to
    two more from the three layers above (fan-in); sleep times are uniform in
    [min_ms, max_ms].
    """
    rng = random.Random(seed)
    mean_width = max(1, round(math.sqrt(n)))
    layers: list[list[str]] = []
    steps: list[str] = []
    deps: dict[str, list[str]] = {}
    while len(steps) < n:
        width = min(n - len(steps), max(1, round(mean_width * rng.uniform(0.5, 1.5))))
        layer = []
        for _ in range(width):
            step = f"s{len(steps)}"
            chosen: list[str] = []
            if layers:
                chosen.append(rng.choice(layers[-1]))
                pool = [s for lay in layers[-3:] for s in lay]
                for _ in range(rng.choice((0, 0, 1, 2))):
                    extra = rng.choice(pool)
                    if extra not in chosen:
                        chosen.append(extra)
            deps[step] = chosen
            steps.append(step)
            layer.append(step)
        layers.append(layer)
    weights = {s: round(rng.uniform(min_ms, max_ms), 3) for s in steps}
    return Dag(steps=steps, deps=deps, weight_ms=weights, layers=len(layers))


# ------------------------------------------------------------------------- references


async def run_floor(dag: Dag, tool: ToolFn, *, sleep: bool) -> dict[str, Any]:
    """The floor: a bare ready-set loop on asyncio, one task per step, no checks at all.

    It resolves the same data reference dagwright binds (``x`` from the first
    dependency's output) and calls the same tool function; nothing else.
    """
    loop = asyncio.get_running_loop()
    waiting = {s: len(dag.deps[s]) for s in dag.steps}
    index = {s: i for i, s in enumerate(dag.steps)}
    outputs: dict[str, Any] = {}
    finished = loop.create_future()
    remaining = len(dag.steps)

    async def call(step: str) -> None:
        deps = dag.deps[step]
        x = outputs[deps[0]]["v"] if deps else 0
        ms = dag.weight_ms[step] if sleep else 0.0
        outputs[step] = await tool(i=index[step], x=x, ms=ms)

    def start(step: str) -> None:
        task = loop.create_task(call(step))
        task.add_done_callback(partial(done, step))

    def done(step: str, task: asyncio.Task[None]) -> None:
        nonlocal remaining
        if task.exception() is not None and not finished.done():
            finished.set_exception(task.exception())  # type: ignore[arg-type]
            return
        remaining -= 1
        for nxt in dag.successors[step]:
            waiting[nxt] -= 1
            if waiting[nxt] == 0:
                start(nxt)
        if remaining == 0 and not finished.done():
            finished.set_result(None)

    for step in dag.steps:
        if waiting[step] == 0:
            start(step)
    await finished
    return outputs


class _LGState(TypedDict, total=False):
    query: str


def build_langgraph(dag: Dag, tool: ToolFn, *, sleep: bool) -> tuple[Any, dict[str, Any]]:
    """A compiled LangGraph ``StateGraph`` with a node per step and an edge per dependency.

    A step with several dependencies gets one join edge from all of them
    (``add_edge([a, b], c)``), so it runs once, after all of them — not once per
    incoming edge. Outputs go to a side dict, the cheapest choice for LangGraph (a state
    channel with a merging reducer would copy on every superstep).
    """
    from langgraph.graph import START, StateGraph

    outputs: dict[str, Any] = {}
    graph = StateGraph(_LGState)
    for i, step in enumerate(dag.steps):
        deps = dag.deps[step]
        ms = dag.weight_ms[step] if sleep else 0.0

        async def node(state: _LGState, step: str = step, i: int = i, deps: list[str] = deps,
                       ms: float = ms) -> None:
            x = outputs[deps[0]]["v"] if deps else 0
            outputs[step] = await tool(i=i, x=x, ms=ms)

        graph.add_node(step, node)
    for step in dag.steps:
        deps = dag.deps[step]
        if not deps:
            graph.add_edge(START, step)
        elif len(deps) == 1:
            graph.add_edge(deps[0], step)
        else:
            graph.add_edge(list(deps), step)
    return graph.compile(), outputs


async def run_langgraph(app: Any, dag: Dag) -> None:
    # one superstep per "wave"; the limit only has to be above the number of waves
    await app.ainvoke({"query": "bench"}, config={"recursion_limit": len(dag.steps) + 10})
