"""A loopback HTTP tool with large answers, counting every request, for the tests of large
values on Temporal (workers as processes, which cannot share a Python tool's counter).

Endpoints (127.0.0.1 only):

* ``GET /chunk?n=N&kb=K`` — idempotent: ``K`` KiB of text, different for each ``N``;
* ``POST /export`` with ``{"kb": K}`` — a side effect without an idempotency key whose
  answer is ``K`` KiB of text (a report generated once, say).

``requests`` lists every request as ``(path, n or kb)``; ``count(path)`` counts them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tests.support.side_effects import serve_json


def text_of(n: int, kb: int) -> str:
    """``kb`` KiB of text, different for each ``n``."""
    line = f"chunk {n}: " + "lorem ipsum dolor sit amet " * 4 + "\n"
    return (line * (kb * 1024 // len(line) + 1))[:kb * 1024]


class BulkTool:
    def __init__(self) -> None:
        self.requests: list[tuple[str, int]] = []
        self._lock = threading.Lock()
        self.url = ""

    def count(self, path: str) -> int:
        with self._lock:
            return sum(1 for p, _ in self.requests if p == path)

    def catalog(self) -> dict[str, Any]:
        return {"tools": [{"name": "bulk", "base_url": self.url, "timeout_s": 60,
                           "capabilities": [
            {"name": "chunk", "path": "/chunk", "method": "GET",
             "input_schema": {"type": "object", "required": ["n", "kb"],
                              "properties": {"n": {"type": "integer"},
                                             "kb": {"type": "integer"}}}},
            {"name": "export", "path": "/export",
             "input_schema": {"type": "object", "required": ["kb"],
                              "properties": {"kb": {"type": "integer"}}}}]}]}

    def answer(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if path == "/chunk":
            n, kb = int(body["n"]), int(body["kb"])
            with self._lock:
                self.requests.append((path, n))
            return 200, {"success": True, "data": {"n": n, "text": text_of(n, kb)}}
        if path == "/export":
            kb = int(body["kb"])
            with self._lock:
                self.requests.append((path, kb))
            return 200, {"success": True, "data": {"report": text_of(-1, kb)}}
        return 404, {"success": False, "error": {"code": "NO_ROUTE", "message": path,
                                                 "category": "NOT_FOUND"}}


@contextmanager
def bulk_tool() -> Iterator[BulkTool]:
    tool = BulkTool()
    with serve_json(lambda method, path, body, headers: tool.answer(path, body)) as url:
        tool.url = url
        yield tool
