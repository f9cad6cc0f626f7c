"""A loopback HTTP server that records every request as it arrived on the wire.

It stands in for the API of a real OpenAPI document: the tests run whole plans against
it and then check each request — its path, query string, headers, cookies and body
(JSON, form fields or multipart parts) — exactly as the document says it must look.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit


@dataclass
class Part:
    name: str
    filename: str | None
    content_type: str
    content: bytes


@dataclass
class Recorded:
    method: str
    path: str
    query: list[tuple[str, str]]
    headers: dict[str, str]
    body: bytes
    parts: list[Part] = field(default_factory=list)

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "")

    def form(self) -> list[tuple[str, str]]:
        return parse_qsl(self.body.decode(), keep_blank_values=True)

    def json(self) -> Any:
        return json.loads(self.body)


class RecordingServer:
    """``with RecordingServer() as server:`` — ``server.url``, ``server.requests``."""

    def __init__(self, answer: Any = None, status: int = 200) -> None:
        self.requests: list[Recorded] = []
        self.answer = {"ok": True} if answer is None else answer
        self.status = status
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                split = urlsplit(self.path)
                headers = {k.lower(): v for k, v in self.headers.items()}
                record = Recorded(self.command, split.path,
                                  parse_qsl(split.query, keep_blank_values=True), headers, body)
                if headers.get("content-type", "").startswith("multipart/"):
                    raw = (f"Content-Type: {headers['content-type']}\r\n\r\n").encode() + body
                    message = BytesParser(policy=HTTP).parsebytes(raw)
                    for part in message.iter_parts():
                        record.parts.append(Part(
                            str(part.get_param("name", header="content-disposition")),
                            part.get_filename(), part.get_content_type(),
                            part.get_payload(decode=True) or b""))
                recorder.requests.append(record)
                payload = json.dumps(recorder.answer).encode()
                self.send_response(recorder.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

            def log_message(self, *args: Any) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def __enter__(self) -> RecordingServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __iter__(self) -> Iterator[Recorded]:
        return iter(self.requests)
