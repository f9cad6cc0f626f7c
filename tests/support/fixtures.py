"""Pytest fixtures for the real servers, loaded by ``pytest_plugins`` in ``tests/conftest.py``.

PostgreSQL and Temporal are session-scoped, because starting them costs up to a second
each; a test that needs a clean slate asks for a fresh database
(``postgres_server.create_database``) or uses a unique task queue and workflow id.
Chromium is started per test: sync Playwright cannot outlive a test without breaking the
asyncio tests that follow (see tests/support/browser.py). A missing binary or package skips the test with the reason
from ``ServerUnavailable``. How long each server took to start is printed at the end of
the run, so CI logs show what the real-server tests cost.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, NoReturn

import pytest

from tests.support.browser import open_chromium
from tests.support.net import ServerUnavailable
from tests.support.postgres import PostgresServer, start_postgres
from tests.support.temporal import TemporalServer, start_temporal_dev_server

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

_START_UP_TIMES: dict[str, float] = {}


def _skip(kind: str, error: ServerUnavailable) -> NoReturn:
    pytest.skip(f"REAL {kind} NOT AVAILABLE, test skipped: {error}")


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A throwaway PostgreSQL cluster on 127.0.0.1 for the whole session."""
    try:
        with start_postgres() as server:
            _START_UP_TIMES["postgres"] = server.started_in_s
            yield server
    except ServerUnavailable as error:
        _skip("POSTGRESQL", error)


@pytest.fixture(scope="session")
def postgres_dsn(postgres_server: PostgresServer) -> str:
    """``postgresql://dagwright:PASSWORD@127.0.0.1:PORT/dagwright_test``, shared by the session."""
    return postgres_server.dsn


@pytest.fixture(scope="session")
def temporal_server() -> Iterator[TemporalServer]:
    """A Temporal dev server on 127.0.0.1 for the whole session (``.address``, ``.namespace``)."""
    try:
        with start_temporal_dev_server() as server:
            _START_UP_TIMES["temporal"] = server.started_in_s
            yield server
    except ServerUnavailable as error:
        _skip("TEMPORAL", error)


@pytest.fixture
def chromium_browser() -> Iterator[Browser]:
    """Headless Debian Chromium driven by sync Playwright, for one test.

    One per test, not per session: while sync Playwright runs, the thread's event loop is
    marked running, which would break every later asyncio test (see tests/support/browser.py).
    Use it from plain (not ``async def``) tests; async tests launch their own with
    ``tests.support.browser.chromium_launch_options()``.
    """
    started = time.monotonic()
    try:
        with open_chromium() as browser:
            _START_UP_TIMES.setdefault("chromium (per test, first)", time.monotonic() - started)
            yield browser
    except ServerUnavailable as error:
        _skip("CHROMIUM", error)


@pytest.fixture
def browser_page(chromium_browser: Browser) -> Iterator[Page]:
    """A new page in its own browser context (no cookies or storage from other tests)."""
    context = chromium_browser.new_context(viewport={"width": 800, "height": 600})
    try:
        yield context.new_page()
    finally:
        context.close()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print how long each real server took to start, when any was started."""
    if _START_UP_TIMES:
        times = ", ".join(f"{name} {seconds:.2f}s" for name, seconds in sorted(_START_UP_TIMES.items()))
        terminalreporter.write_line(f"real servers started in: {times}")
