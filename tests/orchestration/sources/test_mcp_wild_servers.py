"""MCP servers that do what servers in the wild do (tests/mcp_servers/wild_server.py, on
the 1.x SDK most published servers use): odd schemas leave out one tool, not the server;
prints on stdout neither break the session nor reach the user's stderr; a server that
explains its crash on stdout, starts slowly or offers no tools is reported in words a
user acts on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestration import Catalog, CatalogError, ErrorCategory
from orchestration.llm.base import LLMRequest
from tests.support.sources import STDIO_COMMAND, free_port, orchestrator, wait_for_port

pytest.importorskip("mcp", reason="the 'mcp' extra is not installed")

ROOT = Path(__file__).resolve().parents[3]
LEGACY_PYTHON = ROOT / ".venv-mcp1" / "bin" / "python"
pytestmark = pytest.mark.skipif(
    not LEGACY_PYTHON.exists(),
    reason="the 1.x MCP SDK is not installed (.ci/run makes .venv-mcp1 with it)")


def wild(mode: str) -> list[str]:
    return [str(LEGACY_PYTHON), str(ROOT / "tests" / "mcp_servers" / "wild_server.py"), mode]


def test_an_odd_tool_is_left_out_or_repaired_not_the_whole_server() -> None:
    catalog = Catalog()
    catalog.add_mcp_server("wild", command=wild("odd"))
    try:
        assert sorted(c.name for c in catalog) == ["count", "lookup", "report", "send_mail",
                                                   "send_mail_2"]
        [skipped] = catalog.skipped
        assert (skipped.item, skipped.pointer) == ("misspelt", "tools/misspelt/inputSchema")
        assert "'integr' is not valid" in skipped.message
        notes = {n.item: n for n in catalog.notes}
        assert notes["lookup"].message == "duplicate 'required' entries removed"
        assert catalog.get("wild", "lookup").input_schema["required"] == ["id"]
        assert notes["report"].pointer == "tools/report/outputSchema"
        assert catalog.get("wild", "report").output_schema is None
        assert "'send_mail_2'" in notes["send_mail"].message
        # a structured result that breaks the tool's own output schema is the server's
        # fault: not retried, not handed to layer 3 to "fix" the input
        def script(request: LLMRequest) -> Any:
            if request.purpose == "plan":
                return {"steps": [{"id": "c", "tool": "wild", "capability": "count",
                                   "params": {}}]}
            raise AssertionError(f"{request.purpose} must not be asked")

        result = orchestrator(catalog, script, semantic_retry_enabled=False).run("count")
        error = result.steps["c"].error
        assert error is not None and error.code == "MCP_INVALID_OUTPUT"
        assert error.category is ErrorCategory.INVALID_RESPONSE and not error.retryable
        # the other name is still the tool the server calls by its own name
        plan = {"steps": [{"id": "m", "tool": "wild", "capability": "send_mail", "params": {}}]}
        sent = orchestrator(catalog, [plan]).run("mail")
        assert sent.steps["m"].output == {"tool": "send mail", "args": {}}
    finally:
        catalog.close()


def test_prints_on_stdout_neither_break_the_session_nor_reach_our_stderr(
        capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    catalog = Catalog()
    catalog.add_mcp_server("noisy", command=wild("noisy"))
    try:
        plan = {"steps": [
            {"id": "a", "tool": "noisy", "capability": "add", "params": {"a": 1, "b": 2}},
            {"id": "b", "tool": "noisy", "capability": "add", "params": {"a": "{{a}}", "b": 40}}]}
        result = orchestrator(catalog, [plan]).run("add")
        assert result.status == "succeeded", result.error
        assert result.steps["b"].output == 43
    finally:
        catalog.close()
    err = capfd.readouterr().err
    assert "Failed to parse" not in err and "Traceback" not in err
    # nor the SDK's log (an ERROR with a traceback for every such line, before)
    assert [r.getMessage() for r in caplog.records if r.levelno >= 30] == []


def test_a_server_that_says_why_it_crashed_on_stdout_is_heard() -> None:
    with pytest.raises(CatalogError) as caught:
        Catalog().add_mcp_server("noisy", command=wild("noisy-crash"), connect_timeout_s=20)
    text = str(caught.value)
    assert "exited with code 3" in text
    assert "(on stdout) FATAL: settings file wild.toml not found" in text


def test_a_server_slow_to_start_says_what_it_was_doing_and_which_setting_to_raise() -> None:
    with pytest.raises(CatalogError) as caught:
        Catalog().add_mcp_server("slow", command=wild("slow"), connect_timeout_s=2)
    text = str(caught.value)
    assert "did not finish the MCP handshake within 2s (connect_timeout_s" in text
    assert "loading a large index before answering" in text


def test_a_server_without_tools_adds_nothing_and_says_so() -> None:
    catalog = Catalog()
    catalog.add_mcp_server("calc", command=STDIO_COMMAND)
    catalog.add_mcp_server("docs", command=wild("resources"))
    try:
        assert {c.tool for c in catalog} == {"calc"}
        [skipped] = catalog.skipped
        assert skipped.source == "mcp:docs" and skipped.item == "(server)"
        assert "offers no tools (it declares resources)" in skipped.message
    finally:
        catalog.close()


def test_a_server_that_only_speaks_the_older_http_sse_transport() -> None:
    """A URL whose POST is refused is tried with MCP's HTTP+SSE transport (1.x servers
    started with transport="sse" still offer only it); a wrong URL says what was tried."""
    import subprocess

    port = free_port()
    process = subprocess.Popen([*wild("sse"), str(port)], stderr=subprocess.DEVNULL)
    catalog = Catalog()
    try:
        wait_for_port(port, process)
        catalog.add_mcp_server("legacy", url=f"http://127.0.0.1:{port}/sse")
        plan = {"steps": [{"id": "a", "tool": "legacy", "capability": "add",
                           "params": {"a": 2, "b": 40}}]}
        assert orchestrator(catalog, [plan]).run("add").steps["a"].output == {"result": 42}
        with pytest.raises(CatalogError) as caught:
            Catalog().add_mcp_server("lost", url=f"http://127.0.0.1:{port}/mcp")
        text = str(caught.value)
        assert "neither MCP's streamable HTTP" in text and "answered HTTP 404" in text
        assert "SSE ones on /sse" in text and "developer.mozilla" not in text
    finally:
        catalog.close()
        process.terminate()
        process.wait(10)
