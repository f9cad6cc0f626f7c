"""A real loopback implementation of ``petstore.yaml`` (stdlib HTTP server, 127.0.0.1).

It answers like a typical REST service, without dagwright's envelope: JSON bodies,
a 422 with a FastAPI-style ``detail`` list when a new pet's name is not capitalised (a
rule the spec does not state), 404 for unknown ids, and 429 with ``Retry-After`` while
``rate_limited`` > 0. Every request is recorded for the tests.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any


@dataclass
class PetStore:
    pets: dict[int, dict[str, Any]] = field(default_factory=dict)
    requests: list[Recorded] = field(default_factory=list)
    rate_limited: int = 0  # answer this many requests with 429 first
    retry_after: str = "1"
    next_id: int = 1

    def add(self, **pet: Any) -> dict[str, Any]:
        pet = {"id": self.next_id, **pet}
        self.pets[self.next_id] = pet
        self.next_id += 1
        return pet


def _handler(store: PetStore) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, status: int, body: Any = None, headers: dict[str, str] | None = None) -> None:
            data = b"" if body is None else json.dumps(body).encode()
            self.send_response(status)
            if body is not None:
                self.send_header("Content-Type", "application/json")
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _handle(self) -> None:
            url = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else None
            query = parse_qs(url.query)
            store.requests.append(Recorded(self.command, url.path, query, dict(self.headers), body))
            if store.rate_limited > 0:
                store.rate_limited -= 1
                self._send(429, {"detail": "too many requests"}, {"Retry-After": store.retry_after})
                return
            parts = [p for p in url.path.split("/") if p]
            if parts == ["pets"] and self.command == "GET":
                pets = list(store.pets.values())
                if "species" in query:
                    pets = [p for p in pets if p["species"] == query["species"][0]]
                limit = int(query.get("limit", ["50"])[0])
                self._send(200, pets[:limit])
            elif parts == ["pets"] and self.command == "POST":
                name = (body or {}).get("name", "")
                if not name[:1].isupper():
                    self._send(422, {"detail": [{"loc": ["body", "name"], "type": "value_error",
                                                 "msg": "name must start with a capital letter"}]})
                    return
                self._send(201, store.add(**body))
            elif parts == ["pets", "search"] and self.command == "POST":
                needle = (body or {}).get("name", "").lower()
                self._send(200, [p for p in store.pets.values() if needle in p["name"].lower()])
            elif len(parts) == 2 and parts[0] == "pets":
                try:
                    pet_id = int(parts[1])
                except ValueError:
                    self._send(400, {"detail": f"petId must be an integer, got {parts[1]!r}"})
                    return
                if pet_id not in store.pets:
                    self._send(404, {"detail": f"no pet {pet_id}"})
                elif self.command == "DELETE":
                    del store.pets[pet_id]
                    self._send(204)
                else:
                    self._send(200, store.pets[pet_id])
            else:
                self._send(404, {"detail": "no such route"})

        do_GET = do_POST = do_DELETE = _handle

    return Handler


class PetStoreServer:
    """The store on a free port of 127.0.0.1, in a thread; a context manager."""

    def __init__(self) -> None:
        self.store = PetStore()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self.store))
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)

    def __enter__(self) -> PetStoreServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
