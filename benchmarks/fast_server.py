"""A minimal, fast HTTP/1.1 tool server for the HTTP overhead benchmark.

The demo tools run on ``ThreadingHTTPServer``, whose own cost per request would hide the
client's; this server answers from an asyncio protocol with keep-alive, so what is
measured is mostly the client side. It answers every ``POST`` with a
:class:`~orchestration.protocol.ToolResponse` envelope echoing the size of the body,
optionally after ``--delay-ms`` (an I/O-bound tool's service time, without blocking the
other connections). It prints ``PORT <n>`` once listening.

Run: ``python -m benchmarks.fast_server --port 0 [--delay-ms 5]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json

_HEADER_END = b"\r\n\r\n"


class ToolProtocol(asyncio.Protocol):
    """One connection: parse requests (Content-Length bodies), answer each in order."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.buffer = b""
        self.transport: asyncio.Transport | None = None
        self.queue: asyncio.Queue[bytes] = asyncio.Queue()
        self.worker: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.worker = asyncio.get_running_loop().create_task(self._answer())

    def connection_lost(self, exc: Exception | None) -> None:
        if self.worker is not None:
            self.worker.cancel()

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(_HEADER_END)
            if end < 0:
                return
            head = self.buffer[:end].decode("latin-1")
            length = 0
            for line in head.split("\r\n")[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.strip())
            total = end + len(_HEADER_END) + length
            if len(self.buffer) < total:
                return
            body = self.buffer[end + len(_HEADER_END): total]
            self.buffer = self.buffer[total:]
            self.queue.put_nowait(body)

    async def _answer(self) -> None:
        while True:
            body = await self.queue.get()
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            payload = json.dumps({"success": True, "data": {"ok": True, "bytes": len(body)}}).encode()
            assert self.transport is not None
            self.transport.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                + str(len(payload)).encode() + b"\r\nConnection: keep-alive\r\n\r\n" + payload)


async def serve(host: str, port: int, delay_ms: float) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: ToolProtocol(delay_ms / 1000), host, port,
                                      backlog=1024)
    sock = server.sockets[0]
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--delay-ms", type=float, default=0.0)
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.host, args.port, args.delay_ms))


if __name__ == "__main__":
    main()
