"""A loopback OpenAPI tool that serves each user their own data, by bearer token.

It stands in for an API a service calls on behalf of its users with each user's own
OAuth token: ``GET /openapi.json`` is its document (one bearer security scheme),
``GET /profile`` answers the profile of the user whose token came, ``GET /orders`` that
user's orders, ``POST /refunds`` records a refund, and ``GET /whoami`` naively echoes
the ``Authorization`` header it got back in its answer (a tool that leaks what it is
sent: the engine must mask it). Any other token is a 401. Every request's
``Authorization`` header is recorded, so a test can prove which token reached the tool.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

PROFILES = {
    "alice": {"user": "alice", "city": "Lisbon", "tier": "gold"},
    "bob": {"user": "bob", "city": "Porto", "tier": "silver"},
}
ORDERS = {
    "alice": [{"id": "o-1", "item": "tent", "amount": 120}, {"id": "o-2", "item": "lamp", "amount": 30}],
    "bob": [{"id": "o-9", "item": "kayak", "amount": 900}],
}


def document(base_url: str) -> dict[str, Any]:
    bearer = [{"user_token": []}]
    profile = {"type": "object", "properties": {"user": {"type": "string"},
                                                "city": {"type": "string"},
                                                "tier": {"type": "string"}}}
    order = {"type": "object", "properties": {"id": {"type": "string"}, "item": {"type": "string"},
                                              "amount": {"type": "number"}}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "profiles", "version": "1"},
        "servers": [{"url": base_url}],
        "components": {"securitySchemes": {"user_token": {"type": "http", "scheme": "bearer"}}},
        "security": bearer,
        "paths": {
            "/profile": {"get": {"operationId": "getProfile", "summary": "The caller's profile",
                                 "responses": {"200": {"description": "ok", "content": {
                                     "application/json": {"schema": profile}}}}}},
            "/orders": {"get": {"operationId": "listOrders", "summary": "The caller's orders",
                                "responses": {"200": {"description": "ok", "content": {
                                    "application/json": {"schema": {
                                        "type": "object", "properties": {
                                            "orders": {"type": "array", "items": order}}}}}}}}},
            "/refunds": {"post": {
                "operationId": "refund", "summary": "Refund an order",
                "requestBody": {"required": True, "content": {"application/json": {"schema": {
                    "type": "object", "required": ["order_id", "amount"],
                    "properties": {"order_id": {"type": "string"},
                                   "amount": {"type": "number"}}}}}},
                "responses": {"200": {"description": "ok"}}}},
            "/whoami": {"get": {"operationId": "whoami", "summary": "Echo what the API was sent",
                                "responses": {"200": {"description": "ok"}}}},
        },
    }


@dataclass
class ProfileAPI:
    url: str
    tokens: dict[str, str]
    """Token → user."""
    authorizations: list[str | None] = field(default_factory=list)
    """The Authorization header of every request but the document's, in order."""
    refunds: list[dict[str, Any]] = field(default_factory=list)


@contextmanager
def profile_api(tokens: dict[str, str]) -> Iterator[ProfileAPI]:
    """The API on 127.0.0.1, accepting ``tokens`` (token → user)."""
    api = ProfileAPI(url="", tokens=dict(tokens))
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # quiet
            return

        def _answer(self, status: int, body: Any) -> None:
            payload = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def _user(self) -> str | None:
            auth = self.headers.get("Authorization")
            with lock:
                api.authorizations.append(auth)
            scheme, _, token = (auth or "").partition(" ")
            return api.tokens.get(token) if scheme.lower() == "bearer" else None

        def do_GET(self) -> None:
            path = urlsplit(self.path).path
            if path == "/openapi.json":
                self._answer(200, document(api.url))
                return
            if path == "/whoami":
                self._user()
                self._answer(200, {"you_sent": self.headers.get("Authorization")})
                return
            user = self._user()
            if user is None:
                self._answer(401, {"error": "unknown or missing bearer token"})
            elif path == "/profile":
                self._answer(200, PROFILES[user])
            elif path == "/orders":
                self._answer(200, {"orders": ORDERS[user]})
            else:
                self._answer(404, {"error": "no such path"})

        def do_POST(self) -> None:
            user = self._user()
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            if user is None:
                self._answer(401, {"error": "unknown or missing bearer token"})
                return
            with lock:
                api.refunds.append({"user": user, **body})
            self._answer(200, {"refunded": body.get("order_id"), "for": user})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    api.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True, name="profile-api")
    thread.start()
    try:
        yield api
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
