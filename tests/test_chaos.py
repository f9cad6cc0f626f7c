"""Chaos: the engine against hostile loopback tools — drip, reset, hang, garbage, huge,
429 storms with absurd ``Retry-After`` — over real sockets.

Each test states a guarantee of docs/guarantees.md: the run ends typed and by its
deadline, healthy siblings are not held up, every request the tool saw is in a step's
history, waits are capped, a non-idempotent call is never sent twice, memory stays
bounded. The slow ones (real timeouts, a 50 MB body, many concurrent runs) are marked
``slow``; they run in CI (`.ci/run` runs the whole suite) and take ~25 s together.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
import time
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from orchestration import Catalog, ErrorCategory, Orchestrator, OrchestratorConfig, ScriptedLLM
from orchestration.clock import ManualClock
from tests import ROOT
from tests.support.hostile_tools import Drip, Garbage, Hang, HostileTool, Huge, RateLimit, Reply, Reset

OK = Reply(200, {"success": True, "data": {"ok": True}})


def chaos_catalog(tool: HostileTool, **fields: Any) -> Catalog:
    catalog = Catalog()
    for path in ("drip", "reset", "hang", "garbage", "huge", "storm", "ok"):
        catalog.add_http(tool="chaos", capability=path, url=tool.url(f"/{path}"), method="GET",
                         **fields)
    catalog.add_http(tool="chaos", capability="pay", url=tool.url("/pay"), method="POST")
    catalog.add_function(lambda **kw: {"echo": kw}, tool="local", capability="echo")
    return catalog


def orch(catalog: Catalog, clock: ManualClock | None = None, **config: Any) -> Orchestrator:
    config.setdefault("synthesis_enabled", False)
    config.setdefault("semantic_retry_enabled", False)
    config.setdefault("validation_feedback_enabled", False)
    return Orchestrator(catalog, ScriptedLLM(lambda r: "{}"), OrchestratorConfig(**config),
                        registry=CollectorRegistry(), clock=clock or ManualClock())


def step(sid: str, capability: str, **params: Any) -> dict[str, Any]:
    tool = "local" if capability == "echo" else "chaos"
    return {"id": sid, "tool": tool, "capability": capability, "params": params}


def sent_outcomes(result: Any, sid: str) -> int:
    return sum(a.outcome in ("succeeded", "failed", "cancelled") for a in result.steps[sid].attempts)


# --- fast -------------------------------------------------------------------------------------

def test_reset_and_garbage_are_typed_and_every_request_is_recorded(
    hostile_tool: HostileTool,
) -> None:
    hostile_tool.always("/reset", Reset())
    hostile_tool.always("/garbage", Garbage())
    plan = {"steps": [step("r", "reset"), step("g", "garbage"), step("e", "echo", x=1)]}
    result = orch(chaos_catalog(hostile_tool), retry_max_attempts=3).run("q", plan=plan)
    reset, garbage = result.steps["r"], result.steps["g"]
    assert reset.error is not None and reset.error.category is ErrorCategory.CONNECTION_ERROR
    assert garbage.error is not None and garbage.error.code == "NON_JSON_RESPONSE"
    assert result.steps["e"].status == "succeeded"
    assert len(hostile_tool.requests_to("/reset")) == sent_outcomes(result, "r") == 3
    assert len(hostile_tool.requests_to("/garbage")) == sent_outcomes(result, "g") == 1


def test_a_reset_non_idempotent_call_is_sent_once(hostile_tool: HostileTool) -> None:
    hostile_tool.always("/pay", Reset())
    plan = {"steps": [step("p", "pay", amount=1)]}
    result = orch(chaos_catalog(hostile_tool), retry_max_attempts=5).run("q", plan=plan)
    assert len(hostile_tool.requests_to("/pay")) == 1
    assert result.steps["p"].error is not None
    assert result.steps["p"].error.details["gave_up"].startswith("not re-sent")


@pytest.mark.parametrize("retry_after", ["1e999", "99999999999", "-5", "nan",
                                         "Fri, 31 Dec 9999 23:59:59 GMT", "soon"])
def test_a_429_storm_with_an_absurd_retry_after_waits_capped_and_gives_up(
    hostile_tool: HostileTool, retry_after: str,
) -> None:
    hostile_tool.always("/storm", RateLimit(retry_after))
    clock = ManualClock()
    plan = {"steps": [step("s", "storm")]}
    result = orch(chaos_catalog(hostile_tool), clock, retry_max_attempts=4,
                  retry_after_cap_s=7.0).run("q", plan=plan)
    error = result.steps["s"].error
    assert error is not None and error.category is ErrorCategory.RATE_LIMIT
    assert len(hostile_tool.requests_to("/storm")) == 4
    assert all(0 <= s <= 7.0 for s in clock.sleeps)  # waits capped (0 for -5, NaN: none)
    json.dumps(result.to_dict(), allow_nan=False)


def test_an_announced_huge_body_is_refused_before_it_is_read(hostile_tool: HostileTool) -> None:
    hostile_tool.always("/huge", Huge(50_000_000, announce=True))
    started = time.perf_counter()
    result = orch(chaos_catalog(hostile_tool), retry_max_attempts=1).run(
        "q", plan={"steps": [step("h", "huge")]})
    assert result.steps["h"].error is not None
    assert result.steps["h"].error.code == "RESPONSE_TOO_LARGE"
    assert time.perf_counter() - started < 2


# --- slow: real time, big bodies, many runs ---------------------------------------------------

@pytest.mark.slow
def test_drip_and_hang_end_by_their_deadlines_while_healthy_siblings_finish(
    hostile_tool: HostileTool,
) -> None:
    hostile_tool.always("/drip", Drip(b'{"x": "' + b"a" * 100 + b'"}', every_s=0.25))
    hostile_tool.always("/hang", Hang(30))
    hostile_tool.always("/ok", OK)
    plan = {"steps": [step("d", "drip"), step("h", "hang"),
                      *[step(f"ok{i}", "ok", i=i) for i in range(6)]]}
    started = time.perf_counter()
    result = orch(chaos_catalog(hostile_tool), tool_timeout_s=1.0, step_timeout_s=2.5,
                  run_timeout_s=4.0, retry_max_attempts=2).run("q", plan=plan)
    elapsed = time.perf_counter() - started
    assert elapsed < 4.5  # ended by its deadline
    assert all(result.steps[f"ok{i}"].status == "succeeded" for i in range(6))
    drip, hang = result.steps["d"], result.steps["h"]
    assert drip.error is not None and drip.error.code == "READ_TIMEOUT"
    assert [a.outcome for a in drip.attempts] == ["failed", "failed"]
    assert all(0.9 < a.latency_s < 1.5 for a in drip.attempts)  # the whole body, not per read
    assert hang.error is not None and hang.error.category is ErrorCategory.TIMEOUT
    for sid, path in (("d", "/drip"), ("h", "/hang")):
        assert len(hostile_tool.requests_to(path)) == sent_outcomes(result, sid)


@pytest.mark.slow
def test_a_huge_streamed_body_keeps_memory_bounded() -> None:
    """50 MB chunked (no Content-Length): refused while it streams. Measured in a fresh
    process, whose peak RSS is the process' own."""
    script = textwrap.dedent("""
        import json, resource, sys
        from prometheus_client import CollectorRegistry
        from orchestration import Catalog, Orchestrator, OrchestratorConfig, ScriptedLLM
        from tests.support.hostile_tools import HostileTool, Huge, Reply

        def peak_mb():
            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

        limit = int(sys.argv[1])
        with HostileTool() as tool:
            catalog = Catalog()
            catalog.add_http(tool="t", capability="huge", url=tool.url("/huge"), method="GET")
            catalog.add_http(tool="t", capability="warm", url=tool.url("/warm"), method="GET")
            tool.always("/warm", Reply(200, {"ok": True}))
            tool.always("/huge", Huge(50_000_000, announce=False))
            orch = Orchestrator(catalog, ScriptedLLM([]), OrchestratorConfig(
                synthesis_enabled=False, retry_max_attempts=1, max_response_bytes=limit,
                tool_timeout_s=60), registry=CollectorRegistry())
            orch.run("q", plan={"steps": [{"id": "w", "tool": "t", "capability": "warm"}]})
            before = peak_mb()
            result = orch.run("q", plan={"steps": [{"id": "h", "tool": "t", "capability": "huge"}]})
            error = result.steps["h"].error
            print(json.dumps({"delta_mb": peak_mb() - before,
                              "code": error.code if error else None}))
    """)

    def measure(limit: int) -> dict[str, Any]:
        out = subprocess.run([sys.executable, "-c", script, str(limit)], cwd=ROOT,
                             capture_output=True, text=True, timeout=120, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])

    bounded = measure(10_000_000)  # the default ORCH_MAX_RESPONSE_BYTES
    assert bounded["code"] == "RESPONSE_TOO_LARGE"
    assert bounded["delta_mb"] < 30, bounded  # ~15 MB measured; 147 MB read whole before


@pytest.mark.slow
async def test_concurrent_runs_against_chaos_tools_end_typed_without_cross_talk(
    hostile_tool: HostileTool,
) -> None:
    hostile_tool.always("/drip", Drip(b'{"x": 1}', every_s=0.2))
    hostile_tool.always("/reset", Reset())
    hostile_tool.always("/garbage", Garbage())
    hostile_tool.always("/storm", RateLimit("1e999"))
    hostile_tool.always("/ok", OK)
    catalog = chaos_catalog(hostile_tool)
    orchestrator = orch(catalog, tool_timeout_s=0.5, step_timeout_s=1.5, run_timeout_s=2.5,
                        retry_max_attempts=2, max_concurrency=4)
    chaotic = ["drip", "reset", "garbage", "storm", "ok"]

    async def one(n: int) -> Any:
        plan = {"steps": [step("c", chaotic[n % len(chaotic)]), step("e", "echo", run=n),
                          {**step("after", "echo", got="{{e.echo.run}}"), "depends_on": ["e"]}]}
        return n, await orchestrator.arun(f"run {n}", plan=plan)

    started = time.perf_counter()
    results = await asyncio.gather(*(one(n) for n in range(60)))
    elapsed = time.perf_counter() - started
    await orchestrator.aclose()
    assert elapsed < 10
    for n, result in results:
        assert result.status in ("succeeded", "partial"), result.error
        assert result.steps["after"].output == {"echo": {"got": n}}  # its own run's data
        json.dumps(result.to_dict(), allow_nan=False)
