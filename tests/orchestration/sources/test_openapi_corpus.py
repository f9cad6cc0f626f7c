"""Real public OpenAPI documents, nobody here wrote them: every one loads without a raw
exception, maps at least 97% of its operations, reports the rest with reasons, keeps
every input schema within 32 KiB and carries only the shared definitions it uses.

The load-time figures of record are in ``benchmarks/openapi_corpus.py`` (docs/tools.md);
the bound here only catches a regression by an order of magnitude.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from orchestration import Catalog
from orchestration.sources.openapi import MAX_SCHEMA_BYTES
from tests.openapi.corpus import (
    CorpusDocument,
    count_operations,
    kept_documents,
    materialize,
    schema_bytes,
    vendor_documents,
)

pytest.importorskip("openapi_spec_validator", reason="the 'openapi' extra is not installed")

DOCUMENTS = kept_documents() + vendor_documents()
LOAD_BOUND_S = 20.0  # loose: a regression guard, not the target (see the module docstring)


def test_the_corpus_is_varied() -> None:
    """At least 25 documents, 3.0 and 3.1, form and multipart bodies, security schemes,
    Swagger 2.0, and documents kept in many files as their authors keep them."""
    assert len(DOCUMENTS) >= 25
    kept = {d.name for d in kept_documents()}
    assert {"twilio.com_api", "digitalocean.com", "discourse.local", "box.com",
            "discord.com", "stripe.com", "digitalocean.com_multifile",
            "slack.com_web-api.swagger2", "openapis.org_petstore-separate.swagger2"} <= kept


def _refs(node: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            found.add(ref[len("#/$defs/"):])
        for key, value in node.items():
            if key != "$defs":
                found |= _refs(value)
    elif isinstance(node, list):
        for value in node:
            found |= _refs(value)
    return found


def _reachable(schema: dict[str, Any]) -> set[str]:
    defs = schema.get("$defs", {})
    seen: set[str] = set()
    todo = list(_refs(schema))
    while todo:
        name = todo.pop()
        if name not in seen and name in defs:
            seen.add(name)
            todo.extend(_refs(defs[name]))
    return seen


@pytest.mark.parametrize("doc", DOCUMENTS, ids=lambda d: d.name)
def test_a_real_document_loads(doc: CorpusDocument, tmp_path_factory: pytest.TempPathFactory) -> None:
    if doc.path is None:
        pytest.skip(doc.reason)
    path = materialize(doc, tmp_path_factory.getbasetemp())
    operations = count_operations(path)
    started = time.perf_counter()
    catalog = Catalog.from_openapi(path, base_url="http://127.0.0.1:9")  # never called here
    elapsed = time.perf_counter() - started
    try:
        mapped = len(catalog)
        skipped = catalog.skipped
        assert mapped >= 0.97 * operations, [str(s) for s in skipped]
        assert mapped + len(skipped) >= operations
        for note in skipped:  # every left-out operation says where and why
            assert note.pointer.startswith("#/paths/") and note.message
        assert elapsed < LOAD_BOUND_S
        for cap in catalog:
            assert schema_bytes(cap.input_schema) <= MAX_SCHEMA_BYTES, cap.key
            defs = cap.input_schema.get("$defs", {})
            assert set(defs) == _reachable(cap.input_schema), cap.key  # only what it uses
            assert re.fullmatch(r"[a-z0-9_]+", cap.tool)
        # a shared definition is held once, whichever capabilities use it: as itself, or
        # in the lean or open form a capability over the size budget carries
        by_name: dict[str, set[int]] = {}
        for cap in catalog:
            for name, schema in cap.input_schema.get("$defs", {}).items():
                by_name.setdefault(name, set()).add(id(schema))
        assert all(len(ids) <= 3 for ids in by_name.values())
    finally:
        catalog.close()


def test_the_planner_sees_big_schemas_summarised_not_cut(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Layer 1's signature of every capability of a big real document: nesting is cut at
    a depth, never the text in the middle of a name."""
    from planners.signatures import SignatureRenderer

    [doc] = [d for d in kept_documents() if d.name == "digitalocean.com"]
    catalog = Catalog.from_openapi(materialize(doc, tmp_path_factory.getbasetemp()),
                                   base_url="http://127.0.0.1:9")
    renderer = SignatureRenderer()
    try:
        outputs = [line for cap in catalog for line in renderer.capability(cap).splitlines()
                   if line.startswith("output: ")]
        assert len(outputs) > 200
        for line in outputs:
            text = line.removeprefix("output: ")
            assert len(text) <= renderer.max_inline
            assert text.endswith(("}", "]", "string", "integer", "number", "boolean", "any",
                                  "null", "object")), text[-80:]
        assert any("{…}" in line for line in outputs)  # deep levels summarised
    finally:
        catalog.close()
