"""One redaction policy for every answer of ``dagwright serve``.

The server is a sink like the CLI and the logs: a run's data (tool outputs, parameters,
errors) and the server's own messages (a store URL in a 503) may hold secrets. Rather
than trust every handler to remember, every JSON answer (``/v1``, ``/healthz``, every
error) and every server-sent event passes :class:`RedactAnswers` on its way out, and the
viewer's pages render runs that :func:`redacted_result` has masked. Redaction works on
the decoded values (:meth:`~orchestration.redaction.Redactor.redact_value`), so JSON stays
JSON with the same keys and types: only secret strings become ``[REDACTED]``.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from orchestration.events import RunEvent
from orchestration.redaction import Redactor
from orchestration.result import RunResult

__all__ = ["RedactAnswers", "redacted_events", "redacted_result"]

def redacted_result(redactor: Redactor, result: RunResult) -> RunResult:
    """``result`` as it may be shown: every secret string masked, nothing else changed."""
    return RunResult.model_validate(redactor.redact_value(result.to_dict()))


def redacted_events(redactor: Redactor, events: list[RunEvent]) -> list[RunEvent]:
    return [event.model_copy(update={"data": redactor.redact_value(event.data)})
            for event in events]


class RedactAnswers:
    """ASGI middleware: the bodies of JSON answers and the ``data:`` lines of event
    streams, redacted as values."""

    def __init__(self, app: ASGIApp, redactor: Redactor) -> None:
        self.app = app
        self.redactor = redactor

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        kind = ""
        start: Message | None = None
        body: list[bytes] = []

        async def redacting_send(message: Message) -> None:
            nonlocal kind, start
            if message["type"] == "http.response.start":
                content_type = _header(message, b"content-type")
                kind = ("json" if content_type.startswith(b"application/json") else
                        "sse" if content_type.startswith(b"text/event-stream") else "")
                if kind == "json":
                    start = message  # sent with the redacted body's length
                    return
                await send(message)
                return
            if message["type"] != "http.response.body" or not kind:
                await send(message)
                return
            if kind == "sse":
                chunk = message.get("body", b"")
                await send({**message, "body": self._event_chunk(chunk)})
                return
            body.append(message.get("body", b""))
            if message.get("more_body", False):
                return  # a JSON answer is redacted whole, once it is all there
            assert start is not None
            data = self._json(b"".join(body))
            headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
            headers.append((b"content-length", str(len(data)).encode()))
            await send({**start, "headers": headers})
            await send({"type": "http.response.body", "body": data})

        await self.app(scope, receive, redacting_send)

    def _json(self, raw: bytes) -> bytes:
        try:
            value = json.loads(raw)
        except ValueError:  # not JSON after all: mask what the text patterns find
            return self.redactor.redact(raw.decode("utf-8", "replace")).encode()
        return json.dumps(self.redactor.redact_value(value), ensure_ascii=False,
                          separators=(",", ":")).encode()

    def _event_chunk(self, chunk: bytes) -> bytes:
        if b"data:" not in chunk:
            return chunk
        lines = chunk.decode("utf-8", "replace").split("\n")
        for i, line in enumerate(lines):
            if line.startswith("data:"):
                text = line[5:].lstrip(" ")
                try:
                    value: Any = json.loads(text)
                except ValueError:
                    lines[i] = "data: " + self.redactor.redact(text)
                    continue
                lines[i] = "data: " + json.dumps(self.redactor.redact_value(value),
                                                 ensure_ascii=False, separators=(",", ":"))
        return "\n".join(lines).encode()


def _header(message: Message, name: bytes) -> bytes:
    for key, value in message.get("headers", []):
        if key.lower() == name:
            return bytes(value).lower()
    return b""
