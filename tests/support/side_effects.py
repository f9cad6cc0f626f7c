"""A loopback tool server that counts what it *executed*, for the durable-run tests.

Endpoints (all on 127.0.0.1):

* ``GET /quote?symbol=S`` — idempotent: returns a price, counts executions;
* ``POST /pay`` — a side effect without an idempotency key: executes (counts), then,
  while ``hold`` is set, keeps the answer back until released (the test kills the
  client process meanwhile);
* ``POST /pay_keyed`` — a side effect that honours ``Idempotency-Key``: the first request
  with a key executes (and may be held); a repeat with the same key is answered from the
  stored result without executing again;
* ``POST /receipt`` — idempotent bookkeeping after the payment.

``executed[path]`` counts executions, ``requests[path]`` every request (with its key).
``hold_first(path)`` keeps the answer to the *first* request to ``path`` back (after it
executed) until ``release_first(path)``: the fault tests freeze or kill a process while
it waits there, and let a second process through meanwhile.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


def pay_plan(capability: str = "pay") -> dict[str, Any]:
    """Quote a share, pay for it with ``capability`` (``pay`` or ``pay_keyed``), file the
    receipt: the plan the durable-run tests kill a process in the middle of."""
    return {"steps": [
        {"id": "quote", "tool": "stocks", "capability": "quote", "params": {"symbol": "TSLA"}},
        {"id": "pay", "tool": "bank", "capability": capability,
         "params": {"amount": "{{quote.price}}", "to": "broker"}},
        {"id": "receipt", "tool": "bank", "capability": "receipt",
         "params": {"paid": "{{pay.paid}}"}},
    ]}


class SideEffectTools:
    def __init__(self) -> None:
        self.executed: Counter[str] = Counter()
        self.requests: list[tuple[str, str | None, dict[str, Any]]] = []
        self.authorizations: list[tuple[str, str | None]] = []  # (path, Authorization sent)
        self.hold = threading.Event()  # set: /pay and /pay_keyed keep their answer back
        self.release = threading.Event()
        self.arrived = threading.Event()  # a held request has executed and is waiting
        self._by_key: dict[str, dict[str, Any]] = {}
        self._first: dict[str, tuple[threading.Event, threading.Event]] = {}
        self._lock = threading.Lock()
        self.url = ""

    def catalog(self) -> dict[str, Any]:
        amount = {"type": "object", "required": ["amount"],
                  "properties": {"amount": {"type": "number"}, "to": {"type": "string"}}}
        return {"tools": [
            {"name": "stocks", "base_url": self.url, "capabilities": [
                {"name": "quote", "path": "/quote", "method": "GET",
                 "input_schema": {"type": "object", "required": ["symbol"],
                                  "properties": {"symbol": {"type": "string"}}}}]},
            {"name": "bank", "base_url": self.url, "timeout_s": 60, "capabilities": [
                {"name": "pay", "path": "/pay", "input_schema": amount},
                {"name": "pay_keyed", "path": "/pay_keyed", "input_schema": amount,
                 "idempotency_key_header": "Idempotency-Key"},
                {"name": "receipt", "path": "/receipt", "idempotent": True,
                 "input_schema": {"type": "object"}}]},
        ]}

    def hold_first(self, path: str) -> threading.Event:
        """Hold the answer to the first request to ``path``; the event is set when it came."""
        arrived = threading.Event()
        self._first[path] = (arrived, threading.Event())
        return arrived

    def release_first(self, path: str) -> None:
        self._first[path][1].set()

    def _wait_if_first(self, path: str) -> None:
        with self._lock:
            held = self._first.get(path)
            first = held is not None and not held[0].is_set()
            if first and held is not None:
                held[0].set()
        if first and held is not None:
            held[1].wait(60)

    def receive(self, method: str, path: str, body: dict[str, Any],
                headers: Mapping[str, str]) -> tuple[int, dict[str, Any]]:
        """One request as it came: its Authorization noted, then :meth:`handle`d."""
        with self._lock:
            self.authorizations.append((path, headers.get("authorization")))
        return self.handle(method, path, body, headers.get("idempotency-key"))

    def handle(self, method: str, path: str, body: dict[str, Any],
               key: str | None) -> tuple[int, dict[str, Any]]:
        """What the tool answers (a test may replace it, with this signature)."""
        answer = self._execute(method, path, body, key)
        self._wait_if_first(path)
        return answer

    def _execute(self, method: str, path: str, body: dict[str, Any],
                 key: str | None) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.requests.append((path, key, body))
            if path == "/pay_keyed" and key is not None and key in self._by_key:
                return 200, self._by_key[key]  # a repeat: not executed again
            self.executed[path] += 1
        if path == "/quote":
            return 200, {"success": True, "data": {"symbol": body.get("symbol"), "price": 250.0}}
        if path in ("/pay", "/pay_keyed"):
            answer = {"success": True, "data": {"paid": body.get("amount"),
                                                "number": self.executed[path]}}
            if path == "/pay_keyed" and key is not None:
                with self._lock:
                    self._by_key[key] = answer
            if self.hold.is_set():
                self.arrived.set()
                self.release.wait(30)
            return 200, answer
        if path == "/receipt":
            return 200, {"success": True, "data": {"filed": True}}
        return 404, {"success": False, "error": {"code": "NO_ROUTE", "message": path,
                                                 "category": "NOT_FOUND"}}


@contextmanager
def side_effect_tools() -> Iterator[SideEffectTools]:
    tools = SideEffectTools()
    with serve_json(lambda method, path, body, headers: tools.receive(
            method, path, body, headers)) as url:
        tools.url = url
        try:
            yield tools
        finally:
            tools.release.set()
            for _, release in tools._first.values():
                release.set()


Answer = Callable[[str, str, dict[str, Any], Mapping[str, str]], tuple[int, dict[str, Any]]]
"""A loopback tool's handler: (method, path, JSON body or query, headers by lower-case
name) → (status, JSON)."""


@contextmanager
def serve_json(answer: Answer) -> Iterator[str]:
    """Serve ``answer`` over HTTP/1.1 on 127.0.0.1 (a thread per request); its base URL."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _serve(self, method: str) -> None:
            parts = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else {k: v[0] for k, v in parse_qs(parts.query).items()}
            status, reply = answer(method, parts.path, body, {k.lower(): v for k, v in self.headers.items()})
            data = json.dumps(reply).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except OSError:  # the client was killed while we held the answer back, or
                pass         # refused a reply over ORCH_MAX_RESPONSE_BYTES mid-stream

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
