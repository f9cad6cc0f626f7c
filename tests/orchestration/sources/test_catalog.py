"""Catalog files with mcp_servers/openapi lists, `dagwright tools`, and discovery refresh."""

from __future__ import annotations

import io
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from orchestration import Catalog, CatalogError
from orchestration.cli import main
from tests import ROOT
from tests.openapi.petstore_server import PetStoreServer
from tests.support.sources import STDIO_COMMAND, orchestrator

pytest.importorskip("mcp", reason="the 'mcp' extra is not installed")
pytest.importorskip("openapi_spec_validator", reason="the 'openapi' extra is not installed")

SPEC = ROOT / "tests" / "openapi" / "petstore.yaml"


def write_catalog(tmp_path: Path, store_url: str) -> Path:
    (tmp_path / "specs").mkdir()
    for name in ("petstore.yaml", "owner.yaml"):
        (tmp_path / "specs" / name).write_text((SPEC.parent / name).read_text())
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text(f"""
tools:
- name: echo
  base_url: http://127.0.0.1:9
  capabilities:
  - name: say
    path: /say
    input_schema: {{type: object}}
mcp_servers:
- name: calc
  command: {json.dumps(STDIO_COMMAND)}
  env: {{CALC_GREETING: "${{DAGWRIGHT_TEST_GREETING:-hello}}"}}
  cwd: {json.dumps(str(ROOT))}
  tools: [add, schedule]
openapi:
- spec: specs/petstore.yaml
  name: pets
  base_url: ${{PETS_URL:-{store_url}}}
  operations: [getPet]
""")
    return catalog


@pytest.fixture
def store() -> Iterator[PetStoreServer]:
    with PetStoreServer() as server:
        server.store.add(name="Rex", species="dog")
        yield server


def test_a_catalog_file_combines_file_mcp_and_openapi_tools(tmp_path: Path, store: PetStoreServer) -> None:
    path = write_catalog(tmp_path, store.url)
    catalog = Catalog.from_file(path)
    try:
        sources = {cap.key: cap.source for cap in catalog}
        assert sources == {
            "echo.say": f"file:{path}",
            "calc.add": "mcp:calc", "calc.schedule": "mcp:calc",
            "pets.getPet": f"openapi:{tmp_path / 'specs' / 'petstore.yaml'}",
        }
        plan = {"steps": [
            {"id": "sum", "tool": "calc", "capability": "add", "params": {"a": 1, "b": 2}},
            {"id": "pet", "tool": "pets", "capability": "getPet", "params": {"petId": 1}},
        ]}
        result = orchestrator(catalog, [plan]).run("both")
        assert result.status == "succeeded", result.error
        assert result.steps["sum"].output == {"total": 3}
        assert result.steps["pet"].output["name"] == "Rex"
    finally:
        catalog.close()


def test_catalog_file_mistakes_name_the_entry(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("mcp_servers:\n- name: calc\n  commnd: [python]\n")
    with pytest.raises(CatalogError, match=r"mcp_servers\[0\]: unknown key\(s\) commnd"):
        Catalog.from_file(bad)
    bad.write_text("openapi:\n- name: pets\n")
    with pytest.raises(CatalogError, match=r"openapi\[0\]: each entry needs a 'spec'"):
        Catalog.from_file(bad)
    bad.write_text("mcp_servers:\n- name: ok\n  command: " + json.dumps(STDIO_COMMAND)
                   + "\n- name: ghost\n  command: [/nonexistent/server]\n  connect_timeout_s: 5\n")
    started = time.perf_counter()
    with pytest.raises(CatalogError, match=r"mcp_servers\[1\]: MCP server 'ghost'"):
        Catalog.from_file(bad)
    assert time.perf_counter() - started < 20  # the failure does not wait on the first server


def test_tools_command_lists_sources_and_prints_one_schema(tmp_path: Path, store: PetStoreServer) -> None:
    path = write_catalog(tmp_path, store.url)
    out = io.StringIO()
    assert main(["tools", "--catalog", str(path)], out=out) == 0
    text = out.getvalue()
    assert "calc.add" in text and "source: mcp:calc [idempotent]" in text
    assert "source: mcp:calc [idempotent]" in text.split("calc.schedule", 1)[1]
    assert f"source: openapi:{tmp_path / 'specs' / 'petstore.yaml'} [idempotent]" in text
    assert f"source: file:{path}" in text
    out = io.StringIO()
    assert main(["tools", "--catalog", str(path), "--schema", "pets.getPet"], out=out) == 0
    assert json.loads(out.getvalue())["required"] == ["petId"]
    assert main(["tools", "--catalog", str(path), "--schema", "pets.nothing"], out=io.StringIO()) == 2


class Described:
    """A tool whose GET /capabilities answer the test changes while the catalog runs."""

    def __init__(self) -> None:
        self.capabilities: list[dict[str, Any]] = [{"name": "first", "path": "/first"}]
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                body = json.dumps({"tool": "clock", "description": "time",
                                   "capabilities": owner.capabilities}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()


def test_discovery_refreshes_and_snapshots_stay_as_they_were() -> None:
    tool = Described()
    try:
        catalog = Catalog.discover(tool.url, refresh_s=0.1)
        assert [c.key for c in catalog] == ["clock.first"]
        assert catalog.get("clock", "first").source == f"discover:{tool.url}"
        snapshot = catalog.snapshot()
        tool.capabilities = [{"name": "second", "path": "/second"}]
        deadline = time.monotonic() + 10
        while not catalog.has("clock", "second") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [c.key for c in catalog] == ["clock.second"]
        assert [c.key for c in snapshot] == ["clock.first"]
        catalog.close()
        tool.capabilities = [{"name": "third", "path": "/third"}]
        time.sleep(0.3)
        assert [c.key for c in catalog] == ["clock.second"]  # closed: no more refreshes
        catalog.snapshot()  # using the catalog again resumes them
        deadline = time.monotonic() + 10
        while not catalog.has("clock", "third") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert catalog.has("clock", "third")
        catalog.close()
    finally:
        tool.httpd.shutdown()
        tool.httpd.server_close()
