"""Where the time goes: cProfile self time grouped by the library or module it is spent in.

A flat cProfile listing of an asyncio engine is dominated by builtins (``re.sub``,
``dict`` methods, ``time``) that say nothing about *who* called them. Here a builtin's or
a stdlib helper's self time is charged to the caller that spent it (pstats keeps the
time per caller), walking up until a caller of a known module is found, so ``re.sub``
under the span redactor counts as redaction.
"""

from __future__ import annotations

import cProfile
import pstats
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

REPO_ROOT = str(Path(__file__).resolve().parent.parent)

_CATEGORIES: list[tuple[str, str]] = [
    ("executors/step_runner.py", "dagwright: step runner (own code)"),
    ("executors/scheduler.py", "dagwright: ready-set scheduler"),
    ("executors/executor.py", "dagwright: executor"),
    ("executors/binding.py", "dagwright: reference binding"),
    ("executors/coercion.py", "dagwright: layer 2 coercion"),
    ("executors/prepared.py", "jsonschema pre-flight validation"),
    ("executors/recovery.py", "dagwright: recovery hooks"),
    ("executors/layers/", "dagwright: layers"),
    ("orchestration/redaction.py", "span attribute redaction (orchestration/redaction.py)"),
    ("orchestration/telemetry/tracing.py", "tracing wrapper (DagwrightTracer, log context)"),
    ("orchestration/telemetry/", "dagwright: other telemetry"),
    ("orchestration/logging", "tracing wrapper (DagwrightTracer, log context)"),
    ("orchestration/plan.py", "plan validation (pydantic + networkx)"),
    ("orchestration/transport.py", "dagwright: transport (ToolTransport.call)"),
    ("orchestration/protocol.py", "dagwright: answer classification (protocol.py)"),
    ("orchestration/orchestrator.py", "dagwright: facade (arun, results)"),
    ("orchestration/_facade/", "dagwright: facade (arun, results)"),
    ("orchestration/", "dagwright: other"),
    ("/jsonschema/", "jsonschema pre-flight validation"),
    ("/referencing/", "jsonschema pre-flight validation"),
    ("/rpds", "jsonschema pre-flight validation"),
    ("/pydantic/", "pydantic models"),
    ("pydantic_core", "pydantic models"),
    ("/opentelemetry/", "OpenTelemetry API (no-op spans, context)"),
    ("/prometheus_client/", "prometheus_client metrics"),
    ("/networkx/", "plan validation (pydantic + networkx)"),
    ("/asyncio/", "asyncio event loop"),
    ("_asyncio", "asyncio event loop"),
    ("select.epoll", "asyncio event loop"),
    ("/benchmarks/", "benchmark code (tools, bare client)"),
    ("/httpx/", "httpx + httpcore + h11 (HTTP client)"),
    ("/httpcore/", "httpx + httpcore + h11 (HTTP client)"),
    ("/h11/", "httpx + httpcore + h11 (HTTP client)"),
    ("/anyio/", "httpx + httpcore + h11 (HTTP client)"),
    ("/ssl.py", "httpx + httpcore + h11 (HTTP client)"),
]
_NEUTRAL = "generic"


def category(filename: str, funcname: str) -> str:
    """The library or module a function belongs to; stdlib helpers and builtins are neutral."""
    where = f"{filename}:{funcname}"
    for needle, label in _CATEGORIES:
        if needle in where:
            return label
    return _NEUTRAL


def attribute(raw: dict[Any, Any]) -> dict[str, float]:
    """Self time by category, with builtins and stdlib helpers charged to their callers.

    ``re.sub`` called by the redactor is redaction time, ``contextlib`` under the tracer
    is tracing time: a neutral function's self time is split over its callers by the
    time each caller spent in it (pstats keeps that per caller), walking up until a
    caller with a category is found.
    """
    memo: dict[Any, dict[str, float]] = {}

    def shares(func: Any, depth: int = 0, seen: frozenset[Any] = frozenset()) -> dict[str, float]:
        if func in memo:
            return memo[func]
        own = category(func[0], func[2])
        if own != _NEUTRAL or depth > 6 or func not in raw:
            return {own: 1.0}
        callers = raw[func][4]
        total = sum(v[2] for c, v in callers.items() if c not in seen) or 0.0
        if total <= 0:
            result = {"Python builtins & stdlib (unattributed)": 1.0}
        else:
            result = {}
            for caller, v in callers.items():
                if caller in seen or v[2] <= 0:
                    continue
                for cat, f in shares(caller, depth + 1, seen | {func}).items():
                    result[cat] = result.get(cat, 0.0) + f * v[2] / total
        if depth == 0:
            memo[func] = result
        return result

    out: dict[str, float] = {}
    for func, (_cc, _nc, tottime, _ct, _callers) in raw.items():
        for cat, f in shares(func).items():
            label = "Python builtins & stdlib (unattributed)" if cat == _NEUTRAL else cat
            out[label] = out.get(label, 0.0) + tottime * f
    return out




async def profile(run: Callable[[], Awaitable[Any]]) -> dict[Any, Any]:
    """Raw pstats of awaiting ``run()`` once (call it inside the running loop)."""
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        await run()
    finally:
        profiler.disable()
    return pstats.Stats(profiler).stats  # type: ignore[attr-defined]


def summarise(raw: dict[Any, Any], per: int) -> dict[str, Any]:
    """Self time by category (µs per ``per`` units, e.g. steps) and the top functions."""
    by_cat = attribute(raw)
    total = sum(by_cat.values()) or 1e-12
    funcs = []
    for (filename, line, func), (_cc, ncalls, tottime, cumtime, _callers) in raw.items():
        short = filename.split("site-packages/")[-1].replace(REPO_ROOT + "/", "")
        funcs.append({"func": f"{short}:{line}({func})", "calls": ncalls, "tottime": tottime,
                      "cumtime": cumtime})
    cats = sorted(by_cat.items(), key=lambda kv: -kv[1])
    return {
        "per": per, "total_s": total,
        "categories": [{"category": c, "us_per_unit": t / per * 1e6, "share": t / total}
                       for c, t in cats],
        "top_self": sorted(funcs, key=lambda f: -f["tottime"])[:15],
    }
