"""Prove the real-server fixtures work: each server really starts, serves, and stays on 127.0.0.1.

Each test talks to the real thing through its ordinary client (psycopg, a temporalio
client and worker, Playwright), so a fixture that only pretended to start a server fails.
"""

from __future__ import annotations

import asyncio
import http.server
import os
import struct
import tempfile
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.support.browser import CHROMIUM_FLAGS, open_chromium
from tests.support.net import LOOPBACK, ServerUnavailable, child_pids, listening_sockets
from tests.support.postgres import PostgresServer
from tests.support.temporal import TemporalServer

if TYPE_CHECKING:
    from playwright.sync_api import Page


def assert_loopback_only(pids: list[int], must_include_port: int | None = None) -> None:
    sockets = listening_sockets(pids)
    assert sockets or must_include_port is None, f"no listening socket found for pids {pids}"
    outside = {(host, port) for host, port in sockets if host != LOOPBACK}
    assert not outside, f"listening beyond {LOOPBACK}: {sorted(outside)}"
    if must_include_port is not None:
        assert (LOOPBACK, must_include_port) in sockets


# --------------------------------------------------------------------------- PostgreSQL


@pytest.mark.postgres
def test_postgres_dsn_creates_a_table_and_reads_it_back(postgres_dsn: str) -> None:
    psycopg = pytest.importorskip("psycopg", reason="psycopg is in the postgres extra (pip install -e '.[dev]')")
    assert postgres_dsn.startswith("postgresql://dagwright:") and f"@{LOOPBACK}:" in postgres_dsn
    table = f"runs_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres_dsn) as conn:
        conn.execute(f"CREATE TABLE {table} (id serial PRIMARY KEY, step text NOT NULL, payload jsonb)")
        conn.execute(f"INSERT INTO {table} (step, payload) VALUES (%s, %s), (%s, %s)",
                     ("fetch", '{"ok": true}', "convert", '{"rate": 1.5}'))
        conn.commit()
    with psycopg.connect(postgres_dsn) as conn:  # a second connection sees the committed rows
        rows = conn.execute(f"SELECT step, payload FROM {table} ORDER BY id").fetchall()
        server = conn.execute("SELECT inet_server_addr()::text, current_database(), version()").fetchone()
    assert rows == [("fetch", {"ok": True}), ("convert", {"rate": 1.5})]
    assert server is not None
    assert server[0].split("/")[0] == LOOPBACK and server[1] == "dagwright_test"
    assert server[2].startswith("PostgreSQL ")


@pytest.mark.postgres
def test_postgres_demands_the_password_over_tcp(postgres_server: PostgresServer) -> None:
    psycopg = pytest.importorskip("psycopg", reason="psycopg is in the postgres extra (pip install -e '.[dev]')")
    wrong = postgres_server.dsn.replace(postgres_server.password, "not-the-password")
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(wrong, connect_timeout=5)


@pytest.mark.postgres
def test_postgres_create_database_gives_an_isolated_database(postgres_server: PostgresServer) -> None:
    psycopg = pytest.importorskip("psycopg", reason="psycopg is in the postgres extra (pip install -e '.[dev]')")
    name = f"iso_{uuid.uuid4().hex[:8]}"
    dsn = postgres_server.create_database(name)
    with psycopg.connect(dsn) as conn:
        conn.execute("CREATE TABLE only_here (x int)")
        assert conn.execute("SELECT current_database()").fetchone() == (name,)
    with psycopg.connect(postgres_server.dsn) as conn:
        assert conn.execute("SELECT to_regclass('only_here')").fetchone() == (None,)
    with pytest.raises(ValueError, match="database name 'Bad-Name'"):
        postgres_server.create_database("Bad-Name")


@pytest.mark.postgres
def test_postgres_listens_on_loopback_only(postgres_server: PostgresServer) -> None:
    assert_loopback_only(child_pids(postgres_server.postmaster_pid), postgres_server.port)
    assert (postgres_server.socket_dir / f".s.PGSQL.{postgres_server.port}").exists()


# --------------------------------------------------------------------------- Temporal


@pytest.mark.temporal
async def test_temporal_runs_a_workflow_whose_activity_runs_on_our_worker(
    temporal_server: TemporalServer,
) -> None:
    pytest.importorskip("temporalio", reason="temporalio is in the temporal extra (pip install -e '.[dev]')")
    from temporalio.api.enums.v1 import EventType
    from temporalio.client import Client
    from temporalio.worker import Worker

    from tests.support.hello_temporal import HelloWorkflow, describe_worker

    client = await Client.connect(temporal_server.address, namespace=temporal_server.namespace)
    task_queue, workflow_id = f"tq-{uuid.uuid4()}", f"hello-{uuid.uuid4()}"
    async with Worker(client, task_queue=task_queue, workflows=[HelloWorkflow], activities=[describe_worker]):
        result = await client.execute_workflow(HelloWorkflow.run, "dagwright", id=workflow_id,
                                               task_queue=task_queue)
    assert result == f"hello dagwright from pid {os.getpid()} attempt 1"
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    kinds = [event.event_type for event in history.events]
    assert EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED in kinds
    assert EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED in kinds
    assert kinds[-1] == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED


@pytest.mark.temporal
def test_temporal_listens_on_loopback_only(temporal_server: TemporalServer) -> None:
    assert temporal_server.address == f"{LOOPBACK}:{temporal_server.port}"
    assert_loopback_only(child_pids(temporal_server.pid), temporal_server.port)


# --------------------------------------------------------------------------- Chromium

PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>dagwright fixture page</title></head>
<body style="font: 24px sans-serif">
  <button id="go">Run</button>
  <p id="status">idle</p>
  <script>
    let clicks = 0;
    document.getElementById("go").addEventListener("click", () => {
      clicks += 1;
      document.getElementById("status").textContent = `ran ${clicks} time${clicks > 1 ? "s" : ""}`;
    });
  </script>
</body></html>
"""


@contextmanager
def serve_directory(directory: Path) -> Iterator[tuple[str, list[str]]]:
    """Serve ``directory`` on 127.0.0.1 from a thread; yield the base URL and the paths requested."""
    requested: list[str] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, directory=str(directory), **kwargs)  # type: ignore[arg-type]

        def do_GET(self) -> None:
            requested.append(self.path)
            super().do_GET()

        def log_message(self, format: str, *args: object) -> None:  # keep pytest output clean
            pass

    server = http.server.ThreadingHTTPServer((LOOPBACK, 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{LOOPBACK}:{server.server_address[1]}", requested
    finally:
        server.shutdown()
        server.server_close()


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    width, height = struct.unpack(">II", data[16:24])  # the IHDR chunk comes first
    return int(width), int(height)


@pytest.mark.browser
def test_browser_clicks_a_button_whose_script_changes_the_text(browser_page: Page, tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text(PAGE)
    with serve_directory(site) as (base_url, requested):
        response = browser_page.goto(f"{base_url}/index.html")
        assert response is not None and response.status == 200
        assert browser_page.title() == "dagwright fixture page"
        status = browser_page.locator("#status")
        assert status.text_content() == "idle"
        browser_page.click("#go")
        assert status.text_content() == "ran 1 time"
        browser_page.click("#go")
        assert status.text_content() == "ran 2 times"
        screenshot = tmp_path / "page.png"
        browser_page.screenshot(path=str(screenshot))
    assert "/index.html" in requested
    data = screenshot.read_bytes()
    assert png_size(data) == (800, 600)
    assert len(data) > 2000, f"screenshot of {len(data)} bytes is suspiciously small"


@pytest.mark.browser
def test_browser_runs_with_our_flags_a_fresh_profile_and_no_open_port(browser_page: Page) -> None:
    browser_page.set_content("<p>hi</p>")
    processes = {}
    for pid in child_pids(os.getpid()):
        try:
            # Chromium's child processes rewrite their command line as one space-joined string
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().split()
        except OSError:
            continue
        if "chromium" in argv[0]:
            processes[pid] = argv
    main = [argv for argv in processes.values() if not any(a.startswith("--type=") for a in argv)]
    assert len(main) == 1, f"expected one main Chromium process, found {len(main)}: {processes}"
    for flag in CHROMIUM_FLAGS:
        assert flag in main[0], f"{flag} missing from {main[0]}"
    assert "--headless" in main[0] or any(a.startswith("--headless=") for a in main[0])
    profile = next(a.split("=", 1)[1] for a in main[0] if a.startswith("--user-data-dir="))
    assert Path(profile).is_dir() and Path(profile).resolve().is_relative_to(Path(tempfile.gettempdir()).resolve())
    assert_loopback_only(list(processes))  # Playwright talks over a pipe: no debugging port


@pytest.mark.browser
def test_the_thread_runs_asyncio_again_once_the_browser_is_closed() -> None:
    """Why the browser fixtures are per test: sync Playwright blocks asyncio in its thread while it runs."""
    async def answer() -> int:
        await asyncio.sleep(0)
        return 42

    try:
        with open_chromium() as browser:
            page = browser.new_page()
            page.set_content("<p id='x'>inside</p>")
            assert page.text_content("#x") == "inside"
            coroutine = answer()
            with pytest.raises(RuntimeError, match="running event loop"):
                asyncio.run(coroutine)
            coroutine.close()
    except ServerUnavailable as error:
        pytest.skip(f"REAL CHROMIUM NOT AVAILABLE, test skipped: {error}")
    assert asyncio.run(answer()) == 42
