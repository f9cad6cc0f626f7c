"""Headless Debian Chromium driven by Playwright for Python, for tests of a web page.

Playwright normally runs browsers it downloads itself (``playwright install``); machines
here reach only package registries, so we drive Debian's ``chromium`` package through
``executable_path`` and never download a browser.

Why one browser per test, not per session: the sync Playwright API marks the thread's
asyncio event loop as running for as long as Playwright is started (that is how it hands
control to its driver between calls). A session-wide instance therefore breaks every later
``async def`` test and every ``Orchestrator.run()`` in the session. Started and stopped
around one test, it costs about 0.7 s more than sharing it would. For the same reason,
inside a browser test run the server under test in another thread (its own event loop),
not with ``asyncio.run`` in the test's thread.

Each ``launch`` gets a fresh profile: Playwright refuses ``--user-data-dir`` in ``args``
and instead creates a new temporary profile directory for every launched browser, and
deletes it on close; each ``browser.new_context()`` is a further isolated, incognito-like
profile, which is what a test should use to avoid seeing another test's cookies.

The flags keep Chromium from reaching the network on its own (background updates, sync,
QUIC) and from needing a GPU or a sandbox (CI runs as root in a container).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.support.net import ServerUnavailable

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Playwright

DEBIAN_PACKAGE = "chromium"
CHROMIUM_CANDIDATES = (Path("/usr/bin/chromium"),)
CHROMIUM_FLAGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def find_chromium(candidates: tuple[Path, ...] = CHROMIUM_CANDIDATES) -> Path:
    """Debian's Chromium (/usr/bin/chromium), else ``chromium`` or ``chromium-browser`` on PATH."""
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return Path(found)
    raise ServerUnavailable(
        f"Chromium not found at {', '.join(map(str, candidates))} or on PATH; install the Debian package "
        f"'{DEBIAN_PACKAGE}' (apt-get install -y {DEBIAN_PACKAGE})")


def require_playwright() -> None:
    """Raise ``ServerUnavailable`` unless Playwright for Python is importable."""
    if importlib.util.find_spec("playwright") is None:
        raise ServerUnavailable("the Python package 'playwright' is not installed; it is in the dev extra "
                                "(pip install -e '.[dev]'); no 'playwright install' is needed")


def chromium_launch_options(headless: bool = True) -> dict[str, Any]:
    """Keyword arguments for ``playwright.chromium.launch`` (sync or async API alike).

    Use them directly from an async test: ``await pw.chromium.launch(**chromium_launch_options())``.
    """
    return {"executable_path": str(find_chromium()), "headless": headless, "args": list(CHROMIUM_FLAGS),
            "timeout": 60_000}


def launch_chromium(playwright: Playwright, headless: bool = True) -> Browser:
    """Launch Debian's Chromium with our flags through a started sync Playwright."""
    return playwright.chromium.launch(**chromium_launch_options(headless))


@contextmanager
def open_chromium(headless: bool = True) -> Iterator[Browser]:
    """Start sync Playwright and Debian's Chromium; close both (and free the thread's event loop) after.

    Raises ``ServerUnavailable`` when Chromium or Playwright is missing.
    """
    find_chromium()
    require_playwright()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = launch_chromium(playwright, headless)
        try:
            yield browser
        finally:
            browser.close()
