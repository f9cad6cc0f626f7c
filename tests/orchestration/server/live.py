"""A real uvicorn serving ``create_app`` on 127.0.0.1, in a thread with its own event loop.

A thread, not ``asyncio.run`` in the test's thread: the browser tests drive sync
Playwright, which may not share a thread with a running event loop (see
tests/support/browser.py), and the API tests call the server with a plain httpx client.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import uvicorn
from prometheus_client import CollectorRegistry

from orchestration import Catalog, Orchestrator, OrchestratorConfig, ScriptedLLM
from orchestration.server import create_app


@dataclass
class LiveServer:
    url: str
    orchestrator: Orchestrator
    server: uvicorn.Server


@contextmanager
def live_server(orchestrator: Orchestrator, **app_options: Any) -> Iterator[LiveServer]:
    """``create_app(orchestrator, **app_options)`` served until the block ends."""
    app = create_app(orchestrator, **{"close_orchestrator": True, **app_options})
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, lifespan="on", log_level="warning",
                                           timeout_graceful_shutdown=2))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True,
                              name=f"uvicorn-{port}")
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the test server did not start")
        time.sleep(0.01)
    try:
        yield LiveServer(f"http://127.0.0.1:{port}", orchestrator, server)
    finally:
        server.should_exit = True
        thread.join(15)
        sock.close()


def make_orchestrator(spec: dict[str, Any], store: str = "memory://", **config: Any) -> Orchestrator:
    """An LLM-free orchestrator over ``spec`` (plans are given with each run)."""
    settings: dict[str, Any] = {"store_url": store, "synthesis_enabled": False,
                                "validation_feedback_enabled": False,
                                "semantic_retry_enabled": False, **config}
    return Orchestrator(catalog=Catalog.from_dict(spec, source="test tools"),
                        llm=ScriptedLLM(["unused"]), config=OrchestratorConfig(**settings),
                        registry=CollectorRegistry())


def wait_for(predicate: Any, timeout: float = 10.0, every: float = 0.02) -> Any:
    """Poll ``predicate()`` until it returns something truthy; that value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {predicate}")
        time.sleep(every)
