"""Helpers shared by the source tests: reading layer prompts, starting a loopback server."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from prometheus_client import CollectorRegistry

from orchestration import Catalog, Orchestrator, OrchestratorConfig, ScriptedLLM
from tests import ROOT


def block(prompt: str, label: str) -> Any:
    """The JSON inside a ``<<<LABEL ... LABEL>>>`` data block of a layer prompt."""
    tag = label.upper().replace(" ", "_")
    match = re.search(rf"<<<{tag}\n(.*?)\n{tag}>>>", prompt, re.S)
    return json.loads(match.group(1)) if match else None


def orchestrator(catalog: Catalog, script: Any, **config: Any) -> Orchestrator:
    """An orchestrator with a scripted LLM, no answer synthesis and its own registry."""
    return Orchestrator(catalog=catalog, llm=ScriptedLLM(script), registry=CollectorRegistry(),
                        config=OrchestratorConfig(**{"synthesis_enabled": False, **config}))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, process: subprocess.Popen[bytes], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout_s}s")


@contextmanager
def mcp_http_server(token: str | None = None) -> Iterator[str]:
    """The test MCP server over streamable HTTP on 127.0.0.1 (a subprocess); yields its URL."""
    port = free_port()
    args = [sys.executable, "-m", "tests.mcp_servers.calc_server", "http", str(port)]
    if token:
        args.append(token)
    process = subprocess.Popen(args, cwd=ROOT)
    try:
        wait_for_port(port, process)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


STDIO_COMMAND = [sys.executable, "-m", "tests.mcp_servers.calc_server"]
