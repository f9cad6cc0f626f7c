"""MCP servers as they behave in the wild: servers published on PyPI (mcp-server-time,
mcp-server-git, mcp-server-fetch, installed by the dev extra) through whole runs, a tool's error text fixed
by layer 3, a server that reports failures as plain text, a server that dies at start."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestration import Catalog, CatalogError, ErrorCategory
from orchestration.llm.base import LLMRequest
from tests.support.sources import STDIO_COMMAND, block, orchestrator

pytest.importorskip("mcp", reason="the 'mcp' extra is not installed")


def published(name: str) -> list[str]:
    """The console script of a server from PyPI (beside this Python, or on PATH)."""
    beside = Path(sys.executable).with_name(name)
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (it comes with pip install -e '.[dev]')")
    return [found]


@pytest.fixture
def clock_server() -> Iterator[Catalog]:
    catalog = Catalog()
    catalog.add_mcp_server("time", command=published("mcp-server-time"))
    yield catalog
    catalog.close()


def test_a_wrong_timezone_is_fixed_by_layer_3_from_the_servers_error(clock_server: Catalog) -> None:
    asked: list[str] = []

    def script(request: LLMRequest) -> Any:
        if request.purpose == "plan":
            return {"steps": [
                {"id": "now", "tool": "time", "capability": "get_current_time",
                 "params": {"timezone": "Paris"}},
                {"id": "there", "tool": "time", "capability": "convert_time", "params": {
                    "source_timezone": "Etc/UTC", "time": "12:00",
                    "target_timezone": "{{now.timezone}}"}}]}
        if request.purpose == "validation_feedback":
            error = str(block(request.prompt_text, "tool error"))
            asked.append(error)
            assert "Invalid timezone" in error
            return {"can_fix": True, "analysis": "an IANA name is needed",
                    "corrected_parameters": {"timezone": "Europe/Paris"}}
        raise AssertionError(request.purpose)

    result = orchestrator(clock_server, script).run("what time is it in Paris")
    assert result.status == "succeeded", result.error
    first, second = result.steps["now"].attempts
    assert first.error is not None and first.error.code == "MCP_TOOL_ERROR"
    assert first.error.category is ErrorCategory.INPUT_ERROR and first.error.retryable
    assert second.layer == "validation_feedback" and second.params == {"timezone": "Europe/Paris"}
    assert result.steps["now"].output["timezone"] == "Europe/Paris"
    assert result.steps["there"].output["target"]["timezone"] == "Europe/Paris"
    assert len(asked) == 1


def test_can_fix_false_hands_the_step_on(clock_server: Catalog) -> None:
    def script(request: LLMRequest) -> Any:
        if request.purpose == "plan":
            return {"steps": [{"id": "now", "tool": "time", "capability": "get_current_time",
                               "params": {"timezone": "Atlantis/Capital"}}]}
        if request.purpose == "validation_feedback":
            return {"can_fix": False, "analysis": "no such place", "corrected_parameters": {}}
        raise AssertionError(request.purpose)

    result = orchestrator(clock_server, script, semantic_retry_enabled=False).run("time in Atlantis")
    assert result.status == "failed"
    error = result.steps["now"].error
    assert error is not None and error.code == "MCP_TOOL_ERROR"
    assert "Invalid timezone" in error.message
    assert error.details["validation_feedback"]["verdict"] == "cannot_fix"


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_mcp_server_git_through_a_whole_run(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    for args in (["init", "-q"], ["config", "user.email", "t@example.com"],
                 ["config", "user.name", "Tester"]):
        subprocess.run(["git", *args], cwd=repo, check=True)
    (repo / "notes.txt").write_text("hello\n")
    catalog = Catalog()
    catalog.add_mcp_server("git", command=[*published("mcp-server-git"), "--repository", str(repo)])
    try:
        plan = {"steps": [
            {"id": "status", "tool": "git", "capability": "git_status", "params": {"repo_path": str(repo)}},
            {"id": "add", "tool": "git", "capability": "git_add", "depends_on": ["status"],
             "params": {"repo_path": str(repo), "files": ["notes.txt"]}},
            {"id": "commit", "tool": "git", "capability": "git_commit", "depends_on": ["add"],
             "params": {"repo_path": str(repo), "message": "first note"}},
            {"id": "log", "tool": "git", "capability": "git_log", "depends_on": ["commit"],
             "params": {"repo_path": str(repo), "max_count": 5}},
        ]}
        result = orchestrator(catalog, [plan]).run("commit the notes")
        assert result.status == "succeeded", (result.error, {k: s.error for k, s in result.steps.items()})
        assert "notes.txt" in str(result.steps["status"].output)
        assert "first note" in str(result.steps["log"].output)
        subject = subprocess.run(["git", "log", "-1", "--format=%s"], cwd=repo, check=True,
                                 capture_output=True, text=True).stdout.strip()
        assert subject == "first note"
    finally:
        catalog.close()


@pytest.fixture
def web_page() -> Iterator[str]:
    """A page on 127.0.0.1 (the only place mcp-server-fetch is pointed at)."""
    import http.server
    import threading

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"<html><body><h1>Opening hours</h1><p>9 to 17</p></body></html>"
            if self.path != "/hours.html":
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_mcp_server_fetch_a_wrong_argument_and_a_404_fixed_by_layer_3(web_page: str) -> None:
    """mcp-server-fetch (2.x SDK; loopback needs --allow-private-ips, and robots.txt is
    not asked for): an argument its schema lets through but the server does not (a URL
    that is not one) is the SDK's validation text, a missing page the tool's own error
    text; layer 3 corrects each from what the server said."""
    catalog = Catalog()
    catalog.add_mcp_server("web", command=[*published("mcp-server-fetch"), "--ignore-robots-txt",
                                           "--allow-private-ips"])
    asked: list[str] = []

    def script(request: LLMRequest) -> Any:
        if request.purpose == "plan":
            return {"steps": [
                {"id": "typo", "tool": "web", "capability": "fetch",
                 "params": {"url": "hours page on the local site"}},
                {"id": "gone", "tool": "web", "capability": "fetch",
                 "params": {"url": f"{web_page}/opening-hours"}}]}
        if request.purpose == "validation_feedback":
            error = str(block(request.prompt_text, "tool error"))
            asked.append(error)
            return {"can_fix": True, "analysis": "the page is /hours.html, passed as url",
                    "corrected_parameters": {"url": f"{web_page}/hours.html"}}
        raise AssertionError(request.purpose)

    try:
        result = orchestrator(catalog, script, semantic_retry_enabled=False).run("opening hours")
        assert result.status == "succeeded", (result.error, {k: s.error for k, s in result.steps.items()})
        typo, gone = result.steps["typo"].attempts[0].error, result.steps["gone"].attempts[0].error
        assert typo is not None and typo.code == "MCP_INVALID_ARGUMENTS" and "valid URL" in typo.message
        assert gone is not None and gone.code == "MCP_TOOL_ERROR" and "404" in gone.message
        assert len(asked) == 2
        for step in ("typo", "gone"):
            assert "9 to 17" in str(result.steps[step].output)
    finally:
        catalog.close()


def test_text_results_that_are_errors_follow_the_servers_error_pattern() -> None:
    plain, strict = Catalog(), Catalog()
    plain.add_mcp_server("db", command=STDIO_COMMAND, tools=["select"])
    strict.add_mcp_server("db", command=STDIO_COMMAND, tools=["select"], error_pattern=r"^Error:")
    try:
        plan = {"steps": [
            {"id": "bad", "tool": "db", "capability": "select", "params": {"sql": "DELETE FROM t"}},
            {"id": "good", "tool": "db", "capability": "select", "params": {"sql": "SELECT 42"}}]}
        settings = {"validation_feedback_enabled": False, "semantic_retry_enabled": False}
        counted = orchestrator(plain, [plan], **settings).run("query")
        assert counted.steps["bad"].output == "Error: Only SELECT queries are allowed for read_query"
        result = orchestrator(strict, [plan], **settings).run("query")
        error = result.steps["bad"].error
        assert error is not None and error.code == "MCP_TOOL_ERROR" and error.retryable
        assert error.details["error_pattern"] == "^Error:"
        assert result.steps["good"].output == [{"answer": 42}]
    finally:
        plain.close()
        strict.close()
    with pytest.raises(CatalogError, match=r"error_pattern.*not a regular expression"):
        Catalog().add_mcp_server("db", command=STDIO_COMMAND, error_pattern="(")


def test_a_server_that_dies_at_start_says_its_exit_code_and_stderr() -> None:
    crash = [sys.executable, "-c", "import sys; print('reading settings', file=sys.stderr); "
             "print('KeyError: DATABASE_URL is not set', file=sys.stderr); sys.exit(3)"]
    with pytest.raises(CatalogError) as caught:
        Catalog().add_mcp_server("broken", command=crash, connect_timeout_s=20)
    text = str(caught.value)
    assert "exited with code 3" in text
    assert "KeyError: DATABASE_URL is not set" in text and "reading settings" in text
    assert "_Unavailable" not in text and "Connection closed" not in text
    with pytest.raises(CatalogError, match=r"cannot start '/nonexistent/mcp-server': No such file"):
        Catalog().add_mcp_server("ghost", command=["/nonexistent/mcp-server"], connect_timeout_s=20)


def test_a_server_installed_beside_dagwright_but_off_path_is_named_by_its_path(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A new user pip-installed mcp-server-time into dagwright's virtualenv and ran
    `.venv/bin/dagwright tools` without activating it: 'No such file or directory'. The
    message now gives the path that works."""
    beside = Path(sys.executable).with_name("mcp-server-time")
    if not beside.exists():
        pytest.skip("mcp-server-time is not installed beside this Python")
    path = [d for d in os.environ["PATH"].split(os.pathsep)
            if Path(d).resolve() != beside.parent.resolve()]
    monkeypatch.setenv("PATH", os.pathsep.join(path))
    with pytest.raises(CatalogError) as caught:
        Catalog().add_mcp_server("time", command=["mcp-server-time"], connect_timeout_s=20)
    assert (f"cannot start 'mcp-server-time': No such file or directory ('mcp-server-time' is "
            f"not on PATH, but dagwright's virtualenv has {beside}: write that path as the "
            "command, or activate the virtualenv)") in str(caught.value)
    catalog = Catalog()
    catalog.add_mcp_server("time", command=[str(beside)], connect_timeout_s=20)
    try:
        assert "time.get_current_time" in [c.key for c in catalog]
    finally:
        catalog.close()


LEGACY_SQLITE = Path(__file__).resolve().parents[3] / ".venv-mcp1" / "bin" / "mcp-server-sqlite"


@pytest.mark.skipif(not LEGACY_SQLITE.exists(),
                    reason="mcp-server-sqlite on the 1.x SDK is not installed (.ci/run makes "
                    ".venv-mcp1 with it)")
def test_a_1x_sdk_server_connects_quietly_and_its_text_errors_are_errors(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    catalog = Catalog()
    catalog.add_mcp_server("sqlite", command=[str(LEGACY_SQLITE), "--db-path", str(tmp_path / "t.db")],
                           error_pattern=r"^Error:")
    try:
        plan = {"steps": [
            {"id": "make", "tool": "sqlite", "capability": "create_table",
             "params": {"query": "CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT)"}},
            {"id": "put", "tool": "sqlite", "capability": "write_query", "depends_on": ["make"],
             "params": {"query": "INSERT INTO notes (text) VALUES ('hello')"}},
            {"id": "read", "tool": "sqlite", "capability": "read_query", "depends_on": ["put"],
             "params": {"query": "DELETE FROM notes"}}]}

        def script(request: LLMRequest) -> Any:
            if request.purpose == "plan":
                return plan
            if request.purpose == "validation_feedback":
                assert "Only SELECT queries are allowed" in str(block(request.prompt_text, "tool error"))
                return {"can_fix": True, "analysis": "read_query reads",
                        "corrected_parameters": {"query": "SELECT text FROM notes"}}
            raise AssertionError(request.purpose)

        result = orchestrator(catalog, script).run("read the notes")
        assert result.status == "succeeded", result.error
        assert "hello" in str(result.steps["read"].output)
        assert result.steps["read"].attempts[0].error.code == "MCP_TOOL_ERROR"  # type: ignore[union-attr]
    finally:
        catalog.close()
    assert "validation error" not in capfd.readouterr().err  # the 1.x server's probe warnings
