"""Hostile HTTP tools on 127.0.0.1: they drip, reset, hang, send garbage or huge bodies.

A real asyncio server in a background thread speaks HTTP/1.1 at the socket level, so a
behaviour can do what no well-behaved server library lets it: write a body one byte at
a time, announce a length it never sends, reset the connection mid-answer. The engine
is exercised through its real transport (httpx, sockets, timeouts), not a mock.

Usage::

    with HostileTool() as tool:
        tool.queue("/pay", Reply(503, {...}), Drip(b'{"x": 1}', every_s=0.25))
        catalog.add_http(tool="t", capability="pay", url=tool.url("/pay"))
        ...
        assert len(tool.requests_to("/pay")) == 2

Each path answers from its queue of behaviours, then with its ``default`` behaviour
(``Reply(200, {"ok": true})`` unless set). Every request is recorded before it is
answered, so a test can tell how many times a call reached the tool.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import threading
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit


@dataclass
class Received:
    """One request as the tool saw it (header names lower-cased)."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    raw: bytes

    @property
    def body(self) -> Any:
        try:
            return json.loads(self.raw) if self.raw else None
        except ValueError:
            return None


Writer = asyncio.StreamWriter
Behaviour = Callable[[Writer, Received], Awaitable[None]]


def _head(status: int, length: int | None, headers: dict[str, str] | None = None,
          content_type: str = "application/json") -> bytes:
    lines = [f"HTTP/1.1 {status} X", f"Content-Type: {content_type}"]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


@dataclass
class Reply:
    """A complete answer: JSON (or raw bytes) with a status and headers."""

    status: int = 200
    body: Any = None
    raw: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)

    async def __call__(self, writer: Writer, request: Received) -> None:
        data = self.raw if self.raw is not None else json.dumps(self.body).encode()
        writer.write(_head(self.status, len(data), self.headers) + data)
        await writer.drain()


@dataclass
class Drip:
    """Headers at once, then the body ``chunk`` bytes every ``every_s`` seconds."""

    body: bytes
    every_s: float = 0.25
    chunk: int = 1
    status: int = 200

    async def __call__(self, writer: Writer, request: Received) -> None:
        writer.write(_head(self.status, len(self.body)))
        await writer.drain()
        for start in range(0, len(self.body), self.chunk):
            await asyncio.sleep(self.every_s)
            writer.write(self.body[start:start + self.chunk])
            await writer.drain()


@dataclass
class Hang:
    """Read the request, then say nothing for ``seconds`` (and close)."""

    seconds: float = 30.0

    async def __call__(self, writer: Writer, request: Received) -> None:
        await asyncio.sleep(self.seconds)


@dataclass
class Reset:
    """Answer part of the head (or nothing), then reset the connection (TCP RST)."""

    partial: bytes = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"par"

    async def __call__(self, writer: Writer, request: Received) -> None:
        if self.partial:
            writer.write(self.partial)
            await writer.drain()
        sock = writer.get_extra_info("socket")
        if sock is not None:  # SO_LINGER 0: close() sends RST instead of FIN
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()


@dataclass
class Garbage:
    """A 200 whose body is not JSON (or not even text)."""

    raw: bytes = b"\x00\xff<html>definitely not json\xfe"
    status: int = 200

    async def __call__(self, writer: Writer, request: Received) -> None:
        writer.write(_head(self.status, len(self.raw), content_type="text/html") + self.raw)
        await writer.drain()


@dataclass
class Huge:
    """A valid JSON string of ``size`` bytes, streamed in chunks (chunked encoding when
    ``announce`` is False, so the client cannot refuse it from the header)."""

    size: int = 50_000_000
    announce: bool = True
    chunk: int = 1 << 20

    async def __call__(self, writer: Writer, request: Received) -> None:
        filler = self.size - 2
        if self.announce:
            writer.write(_head(200, self.size))
        else:
            writer.write(_head(200, None, {"Transfer-Encoding": "chunked"}))
        block = b"a" * self.chunk  # one block, written again and again: the server stays small

        def pieces() -> Iterator[bytes]:
            yield b'"'
            for start in range(0, filler, self.chunk):
                yield block if start + self.chunk <= filler else block[:filler - start]
            yield b'"'

        try:
            for piece in pieces():
                if self.announce:
                    writer.write(piece)
                else:
                    writer.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                await writer.drain()
            if not self.announce:
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        except (ConnectionError, OSError):
            return  # the client stopped reading: what a size limit should do


@dataclass
class RateLimit:
    """A 429 with a ``Retry-After`` header (any text, absurd values included)."""

    retry_after: str = "5"
    envelope: bool = True

    async def __call__(self, writer: Writer, request: Received) -> None:
        body = ({"success": False, "error": {"code": "SLOW_DOWN", "message": "rate limited",
                                             "category": "RATE_LIMIT", "retryable": True}}
                if self.envelope else "slow down")
        await Reply(429, body, headers={"Retry-After": self.retry_after})(writer, request)


class HostileTool:
    """A loopback HTTP server whose paths answer with queued hostile behaviours."""

    def __init__(self, default: Behaviour | None = None) -> None:
        self.default: Behaviour = default or Reply(200, {"ok": True})
        self._queues: dict[str, deque[Behaviour]] = {}
        self._defaults: dict[str, Behaviour] = {}
        self.requests: list[Received] = []
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.base_events.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="hostile-tool")
        self.port = 0

    # --- lifecycle ------------------------------------------------------------------
    def start(self) -> Self:
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(self._start(), self._loop)
        future.result(timeout=5)
        return self

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def close(self) -> None:
        async def stop() -> None:
            if self._server is not None:
                self._server.close()
            for task in [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]:
                task.cancel()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(timeout=5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- scripting ------------------------------------------------------------------
    def url(self, path: str, *, userinfo: str = "") -> str:
        at = f"{userinfo}@" if userinfo else ""
        return f"http://{at}127.0.0.1:{self.port}{path}"

    def queue(self, path: str, *behaviours: Behaviour) -> None:
        with self._lock:
            self._queues.setdefault(path, deque()).extend(behaviours)

    def always(self, path: str, behaviour: Behaviour) -> None:
        """Answer every request to ``path`` (once its queue is empty) with ``behaviour``."""
        with self._lock:
            self._defaults[path] = behaviour

    def requests_to(self, path: str) -> list[Received]:
        with self._lock:
            return [r for r in self.requests if r.path == path]

    def reset(self) -> None:
        with self._lock:
            self._queues.clear()
            self._defaults.clear()
            self.requests.clear()

    def _next(self, path: str) -> Behaviour:
        with self._lock:
            queue = self._queues.get(path)
            if queue:
                return queue.popleft()
            return self._defaults.get(path, self.default)

    # --- serving --------------------------------------------------------------------
    async def _handle(self, reader: asyncio.StreamReader, writer: Writer) -> None:
        try:
            while True:
                request = await self._read(reader)
                if request is None:
                    return
                with self._lock:
                    self.requests.append(request)
                await self._next(request.path)(writer, request)
                if writer.is_closing():
                    return
        except (ConnectionError, OSError, asyncio.IncompleteReadError, asyncio.CancelledError):
            return  # the client went away, or the server is closing
        finally:
            if not writer.is_closing():
                writer.close()

    @staticmethod
    async def _read(reader: asyncio.StreamReader) -> Received | None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            return None
        lines = head.decode("latin-1").split("\r\n")
        method, target, _ = lines[0].split(" ", 2)
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if ":" in line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length") or 0)
        raw = await reader.readexactly(length) if length else b""
        parts = urlsplit(target)
        return Received(method, parts.path, parse_qs(parts.query), headers, raw)
