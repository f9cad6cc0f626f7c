"""Throughput: a batch of concurrent runs, in one process and on ``dagwright serve``.

Every run is complete: the planner builds its prompt and asks the LLM (a scripted model
with a simulated latency, 200 ms by default), the plan is streamed, parsed and
validated, four steps run (two in parallel, then a join, then a last step) on
in-process tools that sleep a simulated latency (20–50 ms), and the answer is
synthesised with a second LLM call. Settings are dagwright's defaults: the SQLite run
store (a file in a fresh temporary directory), streamed plans, synthesis on.

One run of the script measures the same batch (``--runs``, 1,000 by default) side by
side:

* **library** — one :class:`Orchestrator` in one process, ``asyncio.gather`` of
  ``arun``: the headline, with Python's garbage collector as it comes;
* **library, collector tuned** — the same, after what ``ORCH_SERVE_GC=throughput`` does
  at a server's start (``gc.freeze()`` and raised thresholds), which a service may do;
* **reference** — the library batch at another commit (``--reference``, default the
  commit this work started from), in a git worktree of its own, with the same probe;
* **serve --workers 1 / 2** — ``dagwright serve`` started as a real process on 127.0.0.1
  with the same tools (``function:`` entries of a catalog file) and the same scripted
  model (``ORCH_LLM_SCRIPT=module:function``), the batch sent over HTTP as concurrent
  ``POST /v1/runs`` with ``"wait": true`` by a minimal asyncio client (a full HTTP client
  would take CPU from the server on a small machine).

Each library figure comes from a fresh subprocess; memory per run is (peak RSS while in
flight − RSS before) / N. ``--levels`` adds the library at several batch sizes.

Run: ``python -m benchmarks.throughput`` (``--quick`` for small sizes).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import common
from benchmarks.lean_path import at_commit
from orchestration import Catalog
from orchestration.llm.base import LLMRequest

REFERENCE = "bac789c"
"""The commit the throughput work started from (main before issue 28)."""

PLAN = {"steps": [
    {"id": "geo", "tool": "svc", "capability": "locate", "params": {"city": "Tokyo"}},
    {"id": "rates", "tool": "svc", "capability": "rates", "params": {"base": "USD"}},
    {"id": "quote", "tool": "svc", "capability": "price",
     "params": {"lat": "{{geo.lat}}", "rate": "{{rates.eur}}", "nights": 3}},
    {"id": "book", "tool": "svc", "capability": "book",
     "params": {"amount": "{{quote.total}}", "confirm": True}},
]}
"""The plan every run gets: two independent steps, a join on both, a last step."""

QUERY = "Book 3 nights in Tokyo and tell me the price in EUR"

# --- the tools and the model (module level: a server imports them by name) -----------
_RNG = random.Random(3)


def _tool_ms() -> tuple[float, float]:
    low, _, high = os.environ.get("DAGWRIGHT_BENCH_TOOL_MS", "20,50").partition(",")
    return float(low), float(high)


async def _pause() -> None:
    await asyncio.sleep(_RNG.uniform(*_tool_ms()) / 1000)


async def locate(city: str) -> dict[str, Any]:
    """Coordinates of a city."""
    await _pause()
    return {"city": city, "lat": 35.69, "lon": 139.69}


async def rates(base: str) -> dict[str, Any]:
    """Exchange rates from a base currency."""
    await _pause()
    return {"base": base, "eur": 0.92, "gbp": 0.79}


async def price(lat: float, rate: float, nights: int) -> dict[str, Any]:
    """The price of a stay."""
    await _pause()
    return {"total": round((120 + abs(lat)) * nights * rate, 2)}


async def book(amount: float, confirm: bool) -> dict[str, Any]:
    """Book a stay."""
    await _pause()
    return {"booking": f"B-{int(amount * 100)}", "confirmed": confirm}


def answer(request: LLMRequest) -> str | dict[str, Any]:
    """The simulated model: the plan for a plan request, a short text for synthesis."""
    if request.purpose == "plan":
        return PLAN
    return "Booked: 3 nights in Tokyo."


async def scripted_model(request: LLMRequest) -> str | dict[str, Any]:
    """:func:`answer` after the model's latency (``ORCH_LLM_SCRIPT`` of the servers)."""
    await asyncio.sleep(float(os.environ.get("DAGWRIGHT_BENCH_LLM_LATENCY_S", "0.2")))
    return answer(request)


def service_catalog(min_ms: float, max_ms: float, seed: int = 3) -> Catalog:
    """The four tools as in-process functions with their schemas (the library rows)."""
    os.environ["DAGWRIGHT_BENCH_TOOL_MS"] = f"{min_ms},{max_ms}"
    _RNG.seed(seed)
    catalog = Catalog()
    obj = lambda props, req: {"type": "object", "properties": props, "required": req,  # noqa: E731
                              "additionalProperties": False}
    catalog.add_function(locate, tool="svc", capability="locate",
                         input_schema=obj({"city": {"type": "string"}}, ["city"]))
    catalog.add_function(rates, tool="svc", capability="rates",
                         input_schema=obj({"base": {"type": "string", "enum": ["USD", "EUR"]}},
                                          ["base"]))
    catalog.add_function(price, tool="svc", capability="price", input_schema=obj(
        {"lat": {"type": "number"}, "rate": {"type": "number"},
         "nights": {"type": "integer", "minimum": 1}}, ["lat", "rate", "nights"]))
    catalog.add_function(book, tool="svc", capability="book", input_schema=obj(
        {"amount": {"type": "number"}, "confirm": {"type": "boolean"}}, ["amount", "confirm"]))
    return catalog


CATALOG_FILE = textwrap.dedent("""\
    tools:
      - name: svc
        capabilities:
          - {name: locate, function: "benchmarks.throughput:locate"}
          - {name: rates, function: "benchmarks.throughput:rates"}
          - {name: price, function: "benchmarks.throughput:price"}
          - {name: book, function: "benchmarks.throughput:book"}
""")
"""The same tools for ``dagwright serve``."""

# --- the library probe: the same code at this commit and at the reference ------------
PROBE = r'''
import asyncio, gc, json, os, sys, tempfile, time
sys.path.insert(0, ".")
from prometheus_client import CollectorRegistry
from benchmarks import common
from benchmarks.throughput import answer, service_catalog
from orchestration import Orchestrator, OrchestratorConfig, ScriptedLLM

N, LATENCY, LOW, HIGH, TUNED = (int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]),
                                float(sys.argv[4]), sys.argv[5] == "tuned")
QUERY = "Book 3 nights in Tokyo and tell me the price in EUR"

async def main():
    folder = tempfile.mkdtemp(prefix="dagwright-throughput-")
    config = OrchestratorConfig(llm_provider="scripted", store_url=f"sqlite:///{folder}/runs.db",
                                max_llm_calls_per_run=10, run_timeout_s=600.0,
                                step_timeout_s=600.0)
    orch = Orchestrator(service_catalog(LOW, HIGH), ScriptedLLM(answer, latency_s=LATENCY),
                        config, registry=CollectorRegistry())
    async def timed(query):  # the caller's latency: from the call to the result
        started = time.perf_counter()
        result = await orch.arun(query)
        return result, time.perf_counter() - started

    for _ in range(3):  # warm: imports, prepared capabilities, the store's file
        result, _ = await timed(QUERY)
        assert result.status == "succeeded", result.error
    _, solo = await timed(QUERY)
    orch.llm.requests.clear()
    gc.collect()
    if TUNED:  # what ORCH_SERVE_GC=throughput does once a server has started
        gc.freeze()
        gc.set_threshold(50_000, 20, 10)
    baseline = peak = common.rss_mb()
    stop = asyncio.Event()

    async def sample():
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, common.rss_mb())
            await asyncio.sleep(0.005)

    sampler = asyncio.create_task(sample())
    t0, cpu0 = time.perf_counter(), time.process_time()
    timings = await asyncio.gather(*(timed(f"{QUERY} (user {i})") for i in range(N)))
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    stop.set()
    await sampler
    failed = [r for r, _ in timings if r.status != "succeeded"]
    if failed:
        raise SystemExit(f"{len(failed)} of {N} runs did not succeed: {failed[0].error}")
    latencies = [took for _, took in timings]
    await orch.aclose()
    print(json.dumps({"n": N, "wall_s": wall, "cpu_s": cpu, "runs_per_s": N / wall,
                      "solo_s": solo,
                      "p50_s": common.percentile(latencies, 0.5),
                      "p95_s": common.percentile(latencies, 0.95), "max_s": max(latencies),
                      "baseline_mb": baseline, "peak_mb": max(peak, common.rss_mb()),
                      "per_run_kb": (max(peak, common.rss_mb()) - baseline) * 1024 / N}))

asyncio.run(main())
'''


def library(n: int, latency: float, tool_ms: tuple[float, float], *, tuned: bool = False,
            commit: str | None = None) -> dict[str, Any]:
    """The library batch in a fresh process (at ``commit``, in a worktree, when given)."""
    argv = ["-c", PROBE, str(n), str(latency), str(tool_ms[0]), str(tool_ms[1]),
            "tuned" if tuned else "default"]
    if commit is not None:
        out = at_commit(common.REPO_ROOT, commit, argv)
    else:
        proc = subprocess.run([sys.executable, *argv], capture_output=True, text=True,
                              cwd=common.REPO_ROOT, timeout=1800, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"throughput probe failed:\n{proc.stderr[-3000:]}")
        out = proc.stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


# --- dagwright serve over HTTP ---------------------------------------------------------
@contextmanager
def dagwright_serve(workers: int, n: int, latency: float,
                    tool_ms: tuple[float, float]) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """``dagwright serve --workers N`` on 127.0.0.1 with the benchmark's tools and model;
    yields the process and its port."""
    with tempfile.TemporaryDirectory(prefix="dagwright-serve-bench-") as folder:
        catalog = Path(folder) / "catalog.yaml"
        catalog.write_text(CATALOG_FILE)
        env = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_")}
        env.update({
            "PYTHONPATH": str(common.REPO_ROOT), "ORCH_CATALOG": str(catalog),
            "ORCH_LLM_PROVIDER": "scripted",
            "ORCH_LLM_SCRIPT": "benchmarks.throughput:scripted_model",
            "ORCH_STORE_URL": f"sqlite:///{folder}/runs.db", "ORCH_SERVE_MAX_RUNS": str(n + 10),
            "ORCH_MAX_LLM_CALLS_PER_RUN": "10", "ORCH_RUN_TIMEOUT_S": "600",
            "ORCH_STEP_TIMEOUT_S": "600", "ORCH_LOG_LEVEL": "WARNING",
            "DAGWRIGHT_BENCH_LLM_LATENCY_S": str(latency),
            "DAGWRIGHT_BENCH_TOOL_MS": f"{tool_ms[0]},{tool_ms[1]}"})
        proc = subprocess.Popen(
            [sys.executable, "-m", "orchestration.cli", "serve", "--port", "0",
             "--workers", str(workers)],
            cwd=common.REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True)
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if not line.startswith("dagwright serve: http://127.0.0.1:"):
                raise RuntimeError(f"dagwright serve did not start: {line!r}")
            yield proc, int(line.split()[2].rsplit(":", 1)[1].split("/")[0])
        finally:
            proc.terminate()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


async def post_run(port: int, body: bytes) -> tuple[int, bytes]:
    """One ``POST /v1/runs`` on a connection of its own: the status and the body.

    A few lines of HTTP/1.1 rather than a client library: the load generator shares the
    machine with the server, and its CPU per request should be as small as it can be."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"POST /v1/runs HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     b"Content-Type: application/json\r\nConnection: close\r\n"
                     b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        head = await reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), None)
        data = await (reader.readexactly(length) if length is not None else reader.read())
        return status, data
    finally:
        writer.close()


async def timed_run(port: int, number: int) -> float:
    body = json.dumps({"query": f"{QUERY} (user {number})", "wait": True}).encode()
    started = time.perf_counter()
    status, data = await post_run(port, body)
    took = time.perf_counter() - started
    if status != 200 or json.loads(data).get("status") != "succeeded":
        raise RuntimeError(f"run {number} over HTTP: {status} {data[:300]!r}")
    return took


PACED_SHARE = 0.7
"""The paced runs arrive at this share of the rate the burst reached."""


async def _after(delay_s: float, work: Any) -> float:
    await asyncio.sleep(delay_s)
    return float(await work)


def process_cpu_s(pid: int) -> float:
    """CPU time (user + system) of ``pid`` and of all its descendants, from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        mine = int(entry.name) == pid or _descends(int(entry.name), pid)
        if mine:
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def _descends(child: int, ancestor: int) -> bool:
    seen = 0
    while child > 1 and seen < 64:
        try:
            child = int(Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except OSError:
            return False
        if child == ancestor:
            return True
        seen += 1
    return False


def serve_batch(workers: int, n: int, latency: float, tool_ms: tuple[float, float]) -> dict[str, Any]:
    """The batch over HTTP against ``dagwright serve --workers``."""
    with dagwright_serve(workers, n, latency, tool_ms) as (proc, port):

        async def go() -> dict[str, Any]:
            for number in range(3 * workers):  # each worker warms (imports, the store)
                await timed_run(port, -1 - number)
            solo = min([await timed_run(port, -100 - k) for k in range(3)])
            cpu0 = process_cpu_s(proc.pid)
            started = time.perf_counter()
            latencies = await asyncio.gather(*(timed_run(port, k) for k in range(n)))
            wall = time.perf_counter() - started
            cpu = process_cpu_s(proc.pid) - cpu0
            # the same runs again, arriving evenly at PACED_SHARE of the rate the burst
            # reached: the latency a service sees under a load it sustains
            rate = PACED_SHARE * n / wall
            paced = await asyncio.gather(*(_after(k / rate, timed_run(port, n + k))
                                           for k in range(n)))
            return {"n": n, "wall_s": wall, "cpu_s": cpu, "runs_per_s": n / wall,
                    "solo_s": solo, "p50_s": common.percentile(latencies, 0.5),
                    "p95_s": common.percentile(latencies, 0.95), "max_s": max(latencies),
                    "paced_rate": rate, "paced_p50_s": common.percentile(paced, 0.5),
                    "paced_p95_s": common.percentile(paced, 0.95)}

        return asyncio.run(go())


# --- report ------------------------------------------------------------------------------
TARGET_RUNS_PER_S = 700.0
TARGET_WORKERS_X = 1.6
TARGET_P50_X = 2.0


def row_line(label: str, r: dict[str, Any]) -> str:
    line = (f"{label}: N={r['n']:>5}: {r['runs_per_s']:8.1f} runs/s, wall {r['wall_s']:.2f} s, "
            f"p50 {r['p50_s']:.3f} s, p95 {r['p95_s']:.3f} s (solo {r['solo_s']:.3f} s), "
            f"CPU {r['cpu_s'] / r['n'] * 1000:.2f} ms/run")
    if "paced_rate" in r:
        line += (f"; paced at {r['paced_rate']:.0f} runs/s: p50 {r['paced_p50_s']:.3f} s, "
                 f"p95 {r['paced_p95_s']:.3f} s")
    return line


def render(argv: list[str], facts: dict[str, Any], rows: list[tuple[str, dict[str, Any]]],
           levels: list[dict[str, Any]], latency: float, tool_ms: tuple[float, float],
           load: tuple[float, float], repeats: int = 1) -> str:
    parts = [common.section_preamble("Throughput: a batch of concurrent runs, in one process "
                                     "and on `dagwright serve`", "throughput", argv, facts)]
    parts.append(
        f"N complete runs at once with dagwright's default settings (SQLite run store, "
        f"streamed plans, synthesis on): a scripted model answering after {latency * 1000:g} "
        "ms (the plan, then the answer), four steps on in-process tools sleeping "
        f"{tool_ms[0]:g}–{tool_ms[1]:g} ms (two in parallel, a join, a last step). *solo* is "
        "one run alone (the latency floor); *runs/s* = N / wall time of the batch; *CPU/run* "
        "is the CPU time of the process(es) executing the runs over N (the servers' parent "
        "and workers for `serve`), which counts the SQLite writer's thread on the second "
        f"core too. The rows ran {repeats} time(s), interleaved (in turn forwards and "
        "backwards); each shows its repeat with the median runs/s. Load average before / "
        f"after: {load[0]:.2f} / {load[1]:.2f} (the machine is shared: figures move with "
        "it; the ratios between rows, measured in the same minutes, move less).\n")
    headers = ["", "runs/s", "solo s", "p50 latency s", "p50 / solo", "p95 latency s",
               "CPU ms/run", "paced: runs/s", "paced: p50 s", "paced: p50 / solo"]
    table = [[label, common.fmt(r["runs_per_s"]), f"{r['solo_s']:.3f}", f"{r['p50_s']:.3f}",
              f"{r['p50_s'] / r['solo_s']:.1f}×", f"{r['p95_s']:.3f}",
              common.fmt(r["cpu_s"] / r["n"] * 1000, 2),
              common.fmt(r["paced_rate"]) if "paced_rate" in r else "—",
              f"{r['paced_p50_s']:.3f}" if "paced_rate" in r else "—",
              f"{r['paced_p50_s'] / r['solo_s']:.1f}×" if "paced_rate" in r else "—"]
             for label, r in rows]
    parts.append(common.md_table(headers, table) + "\n")
    parts.append(f"*paced*: for the servers, the same N runs sent again arriving evenly at "
                 f"{PACED_SHARE:.0%} of the rate the burst reached — the latency a service "
                 "sees under a load it sustains, where the burst measures what it can "
                 "do at most.\n")
    findings = []
    lib = next((r for label, r in rows if label.startswith("library, defaults")), None)
    if lib is not None:
        findings.append(
            f"One process with the defaults: {lib['runs_per_s']:.0f} runs/s "
            f"({'meets' if lib['runs_per_s'] >= TARGET_RUNS_PER_S else '**misses**'} the "
            f"{TARGET_RUNS_PER_S:g} runs/s goal), {lib['cpu_s'] / lib['n'] * 1000:.2f} ms of "
            "CPU per run.")
    ref = next((r for label, r in rows if label.startswith("reference")), None)
    if lib is not None and ref is not None:
        findings.append(
            f"Against the reference commit in the same run: {ref['runs_per_s']:.0f} → "
            f"{lib['runs_per_s']:.0f} runs/s, CPU {ref['cpu_s'] / ref['n'] * 1000:.2f} → "
            f"{lib['cpu_s'] / lib['n'] * 1000:.2f} ms/run.")
    one = next((r for label, r in rows if "--workers 1" in label), None)
    two = next((r for label, r in rows if "--workers 2" in label), None)
    if one is not None and two is not None:
        x = two["runs_per_s"] / one["runs_per_s"]
        p50x = two["p50_s"] / two["solo_s"]
        paced_x = two["paced_p50_s"] / two["solo_s"]
        findings.append(
            f"`serve --workers 2` does {x:.2f}× the runs/s of `--workers 1` "
            f"({'meets' if x >= TARGET_WORKERS_X else '**misses**'} the {TARGET_WORKERS_X:g}× "
            f"goal). p50 latency: {p50x:.1f}× a lone run when all {two['n']:,} arrive at "
            f"once (the batch queues behind the CPU), {paced_x:.1f}× when they arrive evenly "
            f"at {two['paced_rate']:.0f} runs/s ({PACED_SHARE:.0%} of the burst's rate): "
            f"{'meets' if paced_x <= TARGET_P50_X else '**misses**'} ≤ {TARGET_P50_X:g}× "
            "under a load the server sustains.")
        solo, cpu = one["solo_s"], one["cpu_s"]
        bound = (solo + cpu) / (solo + cpu / 2)
        findings.append(
            f"What bounds that ratio on this machine: no worker shortens a run's own waiting "
            f"(a lone run takes {solo:.2f} s), so a batch needing {cpu:.2f} s of CPU takes at "
            f"least {solo:.2f} + {cpu:.2f} s on one core and {solo:.2f} + {cpu / 2:.2f} s on "
            f"two: at the same CPU per run two workers can do at most {bound:.2f}× one "
            "worker's runs/s here, with nothing else on the two cores — and the load "
            "generator shares them."
            + (f" They did {x:.2f}×: a run cost less CPU on two workers "
               f"({two['cpu_s'] / two['n'] * 1000:.2f} against "
               f"{one['cpu_s'] / one['n'] * 1000:.2f} ms), which the bound takes as equal."
               if x > bound else ""))
    if findings:
        parts.append("**Findings**\n\n" + "\n".join(f"- {f}" for f in findings) + "\n")
    if levels:
        parts.append("### The library at several batch sizes (defaults)\n")
        parts.append(common.md_table(
            ["concurrent runs", "wall s", "runs/s", "solo s", "p50 latency s", "p95 latency s",
             "CPU ms/run", "peak RSS MiB", "memory/run KiB"],
            [[f"{r['n']:,}", f"{r['wall_s']:.2f}", common.fmt(r["runs_per_s"]),
              f"{r['solo_s']:.3f}", f"{r['p50_s']:.3f}", f"{r['p95_s']:.3f}",
              common.fmt(r["cpu_s"] / r["n"] * 1000, 2), common.fmt(r["peak_mb"]),
              common.fmt(r["per_run_kb"], 0)] for r in levels]) + "\n")
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m benchmarks.throughput", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_report_arguments(parser)
    parser.add_argument("--runs", type=int, help="runs in the batch (default 1000)")
    parser.add_argument("--levels", type=lambda s: [int(x) for x in s.split(",")],
                        help="also the library at these batch sizes (e.g. 10,100,1000)")
    parser.add_argument("--llm-latency", type=float, default=0.2, help="seconds per LLM call (0.2)")
    parser.add_argument("--tool-ms", type=lambda s: tuple(float(x) for x in s.split(",")),
                        default=(20.0, 50.0), help="tool latency range in ms (20,50)")
    parser.add_argument("--reference", default=None,
                        help=f"commit to measure the library batch at too (default {REFERENCE}; "
                             "'' for none; --quick: none)")
    parser.add_argument("--no-serve", action="store_true", help="leave dagwright serve out")
    parser.add_argument("--repeats", type=int, help="interleaved repeats of every row "
                        "(default 3; --quick: 1)")
    args = common.parse_args(parser, argv)
    tool_ms = (float(args.tool_ms[0]), float(args.tool_ms[1]))
    n = args.runs or (20 if args.quick else 1000)
    latency = args.llm_latency if not (args.quick and "--llm-latency" not in argv) else 0.02
    reference = args.reference if args.reference is not None else ("" if args.quick else REFERENCE)
    repeats = args.repeats or (1 if args.quick else 3)
    facts = common.machine_facts()
    load_before = os.getloadavg()[0]
    plan: list[tuple[str, Any]] = [
        ("library, defaults", lambda: library(n, latency, tool_ms)),
        ("library, defaults, collector tuned", lambda: library(n, latency, tool_ms, tuned=True)),
    ]
    if reference:
        plan.append((f"reference `{reference}`, library, defaults",
                     lambda: library(n, latency, tool_ms, commit=reference)))
    if not args.no_serve:
        plan.append(("`serve --workers 1` over HTTP", lambda: serve_batch(1, n, latency, tool_ms)))
        plan.append(("`serve --workers 2` over HTTP", lambda: serve_batch(2, n, latency, tool_ms)))
    # the rows interleaved, in turn forwards and backwards, so that load coming and going
    # on a shared machine hits every row alike; each row's figures are those of its
    # repeat with the median runs/s
    measured: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in plan}
    for repeat in range(repeats):
        for label, measure in (plan if repeat % 2 == 0 else list(reversed(plan))):
            result = measure()
            measured[label].append(result)
            print(row_line(label, result), flush=True)
    rows: list[tuple[str, dict[str, Any]]] = []
    for label, _ in plan:
        ranked = sorted(measured[label], key=lambda r: r["runs_per_s"])
        rows.append((label, ranked[len(ranked) // 2]))
    if repeats > 1:
        print("medians:")
        for label, result in rows:
            print(row_line(label, result), flush=True)
    levels = []
    for level in args.levels or []:
        result = library(level, latency, tool_ms)
        levels.append(result)
        print(row_line("library, defaults", result), flush=True)
    load = (load_before, os.getloadavg()[0])
    print(f"load average before / after: {load[0]:.2f} / {load[1]:.2f}")
    if not args.no_report:
        common.write_section(args.report, "throughput",
                             render(argv, facts, rows, levels, latency, tool_ms, load,
                                    repeats))
        print(f"wrote the throughput section of {args.report}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
