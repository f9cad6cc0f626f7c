"""What every benchmark shares: machine facts, timing helpers and the report writer.

A figure without the machine it was measured on and the command that produced it cannot
be checked, so every section of ``docs/benchmarks.md`` carries both. Each script owns
one section, delimited by HTML comment markers, and rewrites only that section: the
scripts run independently and in any order.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import fcntl
import hashlib
import os
import platform
import re
import resource
import shlex
import statistics
import sys
import tempfile
from collections.abc import Iterable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_REPORT = REPO_ROOT / "docs" / "benchmarks.md"
SECTION_ORDER = ("scheduler", "store", "http_calls", "recovery", "throughput", "scale_out",
                 "streaming_plan", "planner_path", "plan_cache", "lean_path", "selection")
"""The order sections appear in the report, whatever order the scripts ran in."""

DEPENDENCIES = (
    "pydantic", "pydantic-core", "jsonschema", "networkx", "httpx", "opentelemetry-sdk",
    "prometheus-client", "tenacity", "langgraph", "matplotlib",
)

REPORT_HEADER = """\
# Benchmarks

Every figure on this page is written by a script in `benchmarks/`, together with the
exact command, the machine it ran on and the date. Each script measures dagwright side
by side with a reference *in the same run* (a bare asyncio loop, LangGraph, a bare
pooled `httpx` client), so the ratios hold even when the machine is noisy; the absolute
numbers are only as good as the machine named in each section.

Install the extra once, then run any script (each rewrites only its own section below):

```bash
pip install -e '.[bench]'
python -m benchmarks.scheduler     # scheduler overhead, makespan, peak memory
python -m benchmarks.store         # what recording runs costs per step, by run store
python -m benchmarks.http_calls    # HTTP tool-call overhead vs bare httpx
python -m benchmarks.recovery      # recovery ablation of the four defense layers
python -m benchmarks.throughput    # concurrent runs per second and memory per run
python -m benchmarks.scale_out     # runs per second: local, and 1 and 2 Temporal workers
python -m benchmarks.streaming_plan  # time to the first tool call, plan streamed or whole
python -m benchmarks.plan_cache    # runs without a planning call: plan cache, saved workflows
```

`--quick` runs every script at small sizes in a few seconds (the smoke test in
`tests/benchmarks/test_benchmarks_smoke.py` does that so the scripts cannot rot); `--report PATH`
writes elsewhere and `--no-report` only prints.
"""


# ------------------------------------------------------------------------ machine facts


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _ram_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024 / 1024
    except OSError:
        pass
    return None


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def machine_facts() -> dict[str, Any]:
    """CPU, cores, RAM, OS, Python and the versions of the libraries that matter."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        usable = os.cpu_count() or 0
    ram = _ram_gib()
    return {
        "cpu": _cpu_model(),
        "cores": f"{os.cpu_count()} logical ({usable} usable by this process)",
        "ram": f"{ram:.1f} GiB" if ram is not None else "unknown",
        "os": platform.platform(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "dagwright": _version("dagwright") or "(not installed; run from the source tree)",
        "dependencies": {d: v for d in DEPENDENCIES if (v := _version(d)) is not None},
    }


def facts_markdown(facts: dict[str, Any]) -> str:
    deps = ", ".join(f"{k} {v}" for k, v in facts["dependencies"].items())
    return (
        f"- machine: {facts['cpu']}, {facts['cores']}, {facts['ram']} RAM, {facts['os']}\n"
        f"- {facts['python']}, dagwright {facts['dagwright']}\n"
        f"- libraries: {deps}"
    )


# --------------------------------------------------------------------------- measuring


def rss_mb() -> float:
    """Resident set size of this process now, in MiB (Linux /proc; peak RSS elsewhere)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError):
        return peak_rss_mb()


def peak_rss_mb() -> float:
    """This process's peak resident set size so far, in MiB.

    On Linux it reads ``VmHWM``: ``ru_maxrss`` survives ``exec``, so a subprocess would
    report its parent's peak if the parent was larger.
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024


def median(values: Iterable[float]) -> float:
    return statistics.median(list(values))


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) by linear interpolation; 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


# -------------------------------------------------------------------------------- report


def md_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A GitHub-flavoured Markdown table."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def command_line(module: str, argv: Sequence[str]) -> str:
    return " ".join(["python", "-m", f"benchmarks.{module}", *(shlex.quote(a) for a in argv)])


def _markers(name: str) -> tuple[str, str]:
    return f"<!-- BEGIN {name} (written by benchmarks/{name}.py) -->", f"<!-- END {name} -->"


_SECTION_RE = re.compile(
    r"<!-- BEGIN (\w+) \(written by benchmarks/\w+\.py\) -->\n.*?<!-- END \1 -->", re.S
)


def write_section(report: Path, name: str, body: str) -> None:
    """Replace (or add) section ``name`` of ``report``, leaving every other section as is.

    Sections are kept in :data:`SECTION_ORDER`; text before the first section (the page
    header) is kept, or written from :data:`REPORT_HEADER` when the file is new. A lock
    file (in the temp directory) serialises two scripts finishing at the same moment.
    """
    report.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha1(str(report.resolve()).encode()).hexdigest()[:12]
    lock_path = Path(tempfile.gettempdir()) / f"dagwright-bench-{digest}.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            text = report.read_text(encoding="utf-8") if report.exists() else ""
            sections = {m.group(1): m.group(0) for m in _SECTION_RE.finditer(text)}
            first = _SECTION_RE.search(text)
            header = (text[: first.start()] if first else text).rstrip() or REPORT_HEADER.rstrip()
            begin, end = _markers(name)
            sections[name] = f"{begin}\n{body.strip()}\n{end}"
            order = [s for s in SECTION_ORDER if s in sections]
            order += sorted(s for s in sections if s not in SECTION_ORDER)
            out = header + "\n\n" + "\n\n".join(sections[s] for s in order) + "\n"
            tmp = report.with_suffix(report.suffix + ".tmp")
            tmp.write_text(out, encoding="utf-8")
            tmp.replace(report)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def section_preamble(title: str, module: str, argv: Sequence[str], facts: dict[str, Any]) -> str:
    """Title, the command that reproduces the section, the date and the machine."""
    date = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (
        f"## {title}\n\n"
        f"Reproduce: `{command_line(module, argv)}` — measured {date}\n\n"
        f"{facts_markdown(facts)}\n"
    )


def add_report_arguments(parser: argparse.ArgumentParser) -> None:
    """``--quick``, ``--report PATH`` and ``--no-report``, the same for every script; read
    them with :func:`parse_args`."""
    parser.add_argument("--quick", action="store_true",
                        help="small sizes, a few seconds; prints only, unless --report")
    parser.add_argument("--report", type=Path, default=None,
                        help=f"Markdown report to update (default {DEFAULT_REPORT}, not "
                        "with --quick)")
    parser.add_argument("--no-report", action="store_true", help="print only")


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """``parser``'s arguments, with the report settled: ``--quick`` figures (tiny sizes)
    never replace the published ones in docs/benchmarks.md unless ``--report`` says where
    they go."""
    args = parser.parse_args(argv)
    if args.report is None:
        args.report = DEFAULT_REPORT
        args.no_report = args.no_report or args.quick
    return args


def fmt(value: float, digits: int = 1) -> str:
    """A number with thousands separators and ``digits`` decimals."""
    return f"{value:,.{digits}f}"
