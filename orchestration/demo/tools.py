"""The bundled demo tools as real HTTP services on 127.0.0.1, with fault injection.

The demo and the tests need tools that behave like real ones: reachable over a socket,
speaking the :class:`~orchestration.protocol.ToolResponse` envelope, validating their input
strictly, and failing in all the ways real services fail. Each tool of
:data:`~orchestration.demo.tool_data.DEMO_TOOL_SPECS` runs in its own
``ThreadingHTTPServer`` (HTTP/1.1 keep-alive, daemon threads, an ephemeral port unless
told otherwise), so nothing but the standard library and ``jsonschema`` is needed.

Every server answers:

* each capability at its ``method path`` (POST capabilities take a JSON body, GET ones
  take query parameters), validated against the capability's input schema (JSON Schema
  Draft 2020-12) *before* any business rule runs;
* ``GET /capabilities``: the tool description, the same data as :meth:`DemoTools.catalog_dict`;
* ``GET /health``: an envelope with ``{"status": "ok", "tool": name}``.

Errors are envelopes sent with :func:`~orchestration.protocol.http_status_for_category`:
a bad body or parameter is ``400 INPUT_ERROR`` (``INVALID_JSON``, ``INVALID_REQUEST`` with
``details.field`` and ``details.expected``), an unknown path ``404 NOT_FOUND``
(``UNKNOWN_PATH``), a wrong method ``400 INPUT_ERROR`` (``METHOD_NOT_ALLOWED``), a bug in a
handler ``503 SERVICE_ERROR`` (``INTERNAL_ERROR``).

Fault injection (:meth:`DemoToolServer.inject`) queues faults per path; each request to
that path consumes one, first in first out, and requests find the tool normal again once
the queue is empty. Every request, faulted or not, is recorded in
:attr:`DemoToolServer.requests` so tests can check what a client actually sent.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, TextIO
from urllib.parse import parse_qs, urlsplit

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from orchestration.demo.tool_data import (
    DEMO_TOOL_SPECS,
    CapabilitySpec,
    ToolFailure,
    ToolSpec,
)
from orchestration.protocol import (
    ErrorCategory,
    ToolError,
    ToolResponse,
    http_status_for_category,
)

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "MAX_BODY_BYTES",
    "DemoToolServer",
    "DemoTools",
    "Drop",
    "Fault",
    "Garbage",
    "Hang",
    "NotFoundAs503",
    "RateLimited",
    "RecordedRequest",
    "ServiceUnavailable",
    "Status",
    "serve_forever",
    "start_demo_tools"
]

logger = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8700
MAX_BODY_BYTES = 1 << 20
"""Larger request bodies are refused (and the connection closed) instead of buffered."""

_BUILTIN_PATHS = ("/capabilities", "/health")
_POLL_INTERVAL_S = 0.05  # how fast shutdown() is noticed; the default 0.5 s slows tests

# ----------------------------------------------------------------------------- faults


@dataclass(frozen=True)
class ServiceUnavailable:
    """``503`` envelope, category ``SERVICE_ERROR``: the tool is overloaded or timed out."""

    retryable: bool = True
    code: str = "REQUEST_TIMEOUT"
    message: str = "the service timed out while handling the request; try again later"


@dataclass(frozen=True)
class Status:
    """A raw, non-envelope answer: any status, body and headers (e.g. ``500 "boom"``).

    A ``dict``/``list`` body is sent as JSON; text and bytes as ``text/plain`` unless
    ``headers`` sets a ``Content-Type``.
    """

    code: int
    body: str | bytes | dict[str, Any] | list[Any] = ""
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RateLimited:
    """``429`` envelope, category ``RATE_LIMIT``, with ``details.retry_after`` and a
    ``Retry-After`` header (both in seconds)."""

    retry_after_s: float = 1.0


@dataclass(frozen=True)
class Hang:
    """Wait ``seconds`` before answering normally, so that a client with a shorter timeout
    gives up. The wait ends early (and the connection is dropped) when the server closes,
    so a hanging request never delays shutdown."""

    seconds: float


@dataclass(frozen=True)
class Drop:
    """Close the connection without sending any answer."""


@dataclass(frozen=True)
class Garbage:
    """``200`` with an HTML body (``<html>oops</html>``): a success status, unusable data."""


@dataclass(frozen=True)
class NotFoundAs503:
    """Report a not-found as ``503 SERVICE_ERROR`` (retryable false), as some real tools do.

    The request is handled normally; if the answer is a ``NOT_FOUND`` error, its code,
    message and details are kept but sent with HTTP 503 and category ``SERVICE_ERROR``.
    Any other answer (success included) is sent unchanged.
    """


Fault = ServiceUnavailable | Status | RateLimited | Hang | Drop | Garbage | NotFoundAs503
"""Anything :meth:`DemoToolServer.inject` accepts."""

_FAULT_TYPES = (ServiceUnavailable, Status, RateLimited, Hang, Drop, Garbage, NotFoundAs503)


# ---------------------------------------------------------------------- recorded requests


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server received it.

    ``headers`` has lower-cased names (HTTP header names are case-insensitive; use
    :meth:`header` to look one up by any spelling). ``body`` is the parsed JSON body, or
    ``None`` if there was none or it was not JSON (``raw_body`` keeps the bytes).
    ``received_at`` is ``time.monotonic()``, for checking the delays between retries;
    ``client_port`` tells connections apart (equal ports: a reused keep-alive connection).
    """

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any
    raw_body: bytes
    received_at: float
    client_port: int

    def header(self, name: str, default: str | None = None) -> str | None:
        """The value of header ``name`` (any case), or ``default``."""
        return self.headers.get(name.lower(), default)


# ---------------------------------------------------------------------------- answers


@dataclass
class _Answer:
    """What to send; ``error`` is kept so a fault can re-wrap an envelope error."""

    status: int
    body: bytes
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    error: ToolError | None = None


def _json_answer(status: int, payload: Any, headers: dict[str, str] | None = None) -> _Answer:
    return _Answer(status, json.dumps(payload).encode("utf-8"), headers=dict(headers or {}))


def _ok(data: Any) -> _Answer:
    return _json_answer(200, ToolResponse(success=True, data=data).model_dump(mode="json"))


def _fail(
    error: ToolError, status: int | None = None, headers: dict[str, str] | None = None
) -> _Answer:
    status = http_status_for_category(error.category) if status is None else status
    answer = _json_answer(
        status, ToolResponse(success=False, error=error).model_dump(mode="json"), headers
    )
    answer.error = error
    return answer


def _input_error(code: str, message: str, *, retryable: bool = True, **details: str) -> ToolError:
    return ToolError(
        code=code,
        message=message,
        category=ErrorCategory.INPUT_ERROR,
        retryable=retryable,
        details=details,
    )


def _parse_json(raw: bytes) -> tuple[bool, Any, str]:
    """``(ok, value, problem)``; NaN/Infinity are refused, they are not JSON."""
    if not raw.strip():
        return False, None, "request body is empty; expected a JSON object"

    def refuse(constant: str) -> Any:
        raise ValueError(f"{constant} is not valid JSON")

    try:
        return True, json.loads(raw.decode("utf-8"), parse_constant=refuse), ""
    except (UnicodeDecodeError, ValueError) as exc:
        return False, None, f"request body is not valid JSON: {exc}"


def _fault_answer(fault: Fault) -> _Answer | None:
    """The answer a fault replaces the normal one with (``None``: no fixed answer)."""
    if isinstance(fault, ServiceUnavailable):
        return _fail(
            ToolError(
                code=fault.code,
                message=fault.message,
                category=ErrorCategory.SERVICE_ERROR,
                retryable=fault.retryable,
            )
        )
    if isinstance(fault, RateLimited):
        seconds = f"{fault.retry_after_s:g}"
        return _fail(
            ToolError(
                code="RATE_LIMITED",
                message=f"rate limit exceeded; retry after {seconds} s",
                category=ErrorCategory.RATE_LIMIT,
                retryable=True,
                details={"retry_after": seconds},
            ),
            headers={"Retry-After": seconds},
        )
    if isinstance(fault, Status):
        headers = dict(fault.headers)
        content_type = next((v for k, v in headers.items() if k.lower() == "content-type"), None)
        headers = {k: v for k, v in headers.items() if k.lower() != "content-type"}
        if isinstance(fault.body, dict | list):
            body = json.dumps(fault.body).encode("utf-8")
            content_type = content_type or "application/json"
        else:
            body = fault.body.encode("utf-8") if isinstance(fault.body, str) else fault.body
            content_type = content_type or "text/plain; charset=utf-8"
        return _Answer(fault.code, body, content_type, headers)
    if isinstance(fault, Garbage):
        return _Answer(200, b"<html>oops</html>", "text/html; charset=utf-8")
    return None


def _not_found_as_503(answer: _Answer) -> _Answer:
    if answer.error is None or answer.error.category is not ErrorCategory.NOT_FOUND:
        return answer
    wrapped = answer.error.model_copy(
        update={"category": ErrorCategory.SERVICE_ERROR, "retryable": False}
    )
    return _fail(wrapped, status=503, headers=answer.headers)


# ------------------------------------------------------------------- schema validation


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _error_field(error: ValidationError) -> str:
    """The dotted path of the offending field; ``body`` for the body as a whole."""
    path = ".".join(str(p) for p in error.absolute_path)
    instance = error.instance
    if error.validator == "required" and isinstance(instance, dict):
        required: Any = error.validator_value
        missing = [n for n in required if n not in instance]
        named = [n for n in missing if repr(n) in error.message]
        if named or missing:
            return _join(path, str((named or missing)[0]))
    if error.validator == "additionalProperties" and isinstance(instance, dict):
        allowed = error.schema.get("properties", {}) if isinstance(error.schema, dict) else {}
        extra = [k for k in instance if k not in allowed]
        if extra:
            return _join(path, str(extra[0]))
    return path or "body"


def _expected(error: ValidationError, field_name: str) -> str:
    """What the schema wanted at the offending field, in words an LLM repair can use."""
    kind = error.validator
    value: Any = error.validator_value
    schema = error.schema if isinstance(error.schema, dict) else {}
    properties = schema.get("properties", {})
    if kind == "type":
        return value if isinstance(value, str) else " or ".join(value)
    if kind == "enum":
        return "one of " + ", ".join(repr(v) for v in value)
    if kind == "const":
        return f"exactly {value!r}"
    if kind == "pattern":
        return f"string matching {value}"
    bounds = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">", "exclusiveMaximum": "<"}
    if kind in bounds:
        return f"number {bounds[str(kind)]} {value}"
    if kind == "minLength":
        return f"string of at least {value} character(s)"
    if kind == "required":
        prop = properties.get(field_name.rsplit(".", 1)[-1], {})
        return f"{prop.get('type', 'value')} (required)"
    if kind == "additionalProperties":
        return "no such field; allowed: " + ", ".join(properties)
    return f"{kind} {value!r}"


def _describe(error: ValidationError) -> tuple[str, str, str]:
    """``(field, expected, message)`` with the message naming the field first."""
    name = _error_field(error)
    expected = _expected(error, name)
    if error.validator == "required":
        message = f"{name}: required field is missing"
    elif error.validator == "additionalProperties":
        message = f"{name}: unexpected field ({expected})"
    else:
        message = f"{name}: {error.message}"
    return name, expected, message


def _numeric_string_hint(error: ValidationError, name: str) -> str | None:
    """The commonest LLM mistake, a number sent as a string, gets an explicit fix."""
    if error.validator != "type" or not isinstance(error.instance, str):
        return None
    value: Any = error.validator_value
    wanted = value if isinstance(value, str) else ""
    if wanted not in ("number", "integer"):
        return None
    try:
        float(error.instance)
    except ValueError:
        return None
    return f"send {name} as a JSON {wanted} without quotes: {error.instance.strip()}"


def _error_rank(error: ValidationError) -> int:
    return {"required": 1, "additionalProperties": 2}.get(str(error.validator), 0)


def _schema_failure(
    capability: CapabilitySpec, instance: Any, errors: list[ValidationError]
) -> ToolError:
    """One ``INVALID_REQUEST`` error for all schema violations, the most useful first.

    A wrong value (type, enum, range...) leads, then a missing field, then an unexpected
    one: a repair that fixes the value usually fixes the call. Ties keep the schema's
    property order, so the choice is deterministic.
    """
    ordered = sorted(errors, key=_error_rank)
    best = ordered[0]
    name, expected, message = _describe(best)
    details = {"field": name, "expected": expected, "errors": str(len(errors))}
    if best.validator not in ("required", "additionalProperties"):
        details["received"] = json.dumps(best.instance)[:200]
    hint = _numeric_string_hint(best, name) or (
        capability.input_hint(instance) if capability.input_hint else None
    )
    if hint:
        details["hint"] = hint
    if len(errors) > 1:
        details["all_errors"] = "; ".join(_describe(e)[2] for e in ordered)
    return ToolError(
        code="INVALID_REQUEST",
        message=message,
        category=ErrorCategory.INPUT_ERROR,
        retryable=True,
        details=details,
    )


# ----------------------------------------------------------------------------- server


class _HTTPServer(ThreadingHTTPServer):
    """The socket server; it only knows which :class:`DemoToolServer` it belongs to."""

    daemon_threads = True
    request_queue_size = 128  # the default 5 makes bursts of clients wait for SYN retries

    def __init__(self, address: tuple[str, int], tool: DemoToolServer) -> None:
        self.tool = tool
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hung up (or a connection we cut on close) is not worth a traceback.
        if isinstance(sys.exc_info()[1], OSError):
            logger.debug("connection from %s ended abruptly", client_address)
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    """Reads one request, records it, applies a queued fault or dispatches it."""

    protocol_version = "HTTP/1.1"
    # Headers and body leave in two writes; with Nagle's algorithm on, the client's
    # delayed ACK would add ~40 ms to every keep-alive response.
    disable_nagle_algorithm = True
    server: _HTTPServer

    def setup(self) -> None:
        super().setup()
        self.server.tool._track(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.tool._untrack(self.connection)

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("%s %s", self.server.tool.name, format % args)

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def do_PUT(self) -> None:
        self._handle()

    def do_PATCH(self) -> None:
        self._handle()

    def do_DELETE(self) -> None:
        self._handle()

    def _read_body(self) -> bytes:
        """The request body, so the connection stays usable for the next request."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return self._read_chunked()
        length = int(self.headers.get("Content-Length") or 0)
        if length < 0 or length > MAX_BODY_BYTES:
            raise ValueError(f"request body of {length} bytes refused")
        return self.rfile.read(length)

    def _read_chunked(self) -> bytes:
        chunks: list[bytes] = []
        total = 0
        while True:
            size = int(self.rfile.readline(65537).split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(chunks)
            total += size
            if total > MAX_BODY_BYTES:
                raise ValueError(f"chunked request body over {MAX_BODY_BYTES} bytes refused")
            chunks.append(self.rfile.read(size))
            self.rfile.readline()

    def _handle(self) -> None:
        tool = self.server.tool
        url = urlsplit(self.path)
        path = url.path or "/"
        query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        try:
            raw = self._read_body()
        except ValueError as exc:
            self.close_connection = True  # the unread body makes the stream unusable
            self._send(_fail(_input_error("INVALID_BODY", str(exc), retryable=False)))
            return
        parsed_ok, parsed, _ = _parse_json(raw)
        headers: dict[str, str] = {}
        for key, value in self.headers.items():
            key = key.lower()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        tool._record(
            RecordedRequest(
                method=self.command,
                path=path,
                query=query,
                headers=headers,
                body=parsed if parsed_ok else None,
                raw_body=raw,
                received_at=time.monotonic(),
                client_port=int(self.client_address[1]),
            )
        )

        fault = tool._next_fault(path)
        if isinstance(fault, Drop):
            self.close_connection = True
            return
        if isinstance(fault, Hang) and tool._stopping.wait(fault.seconds):
            self.close_connection = True  # closing: give up instead of answering
            return
        answer = _fault_answer(fault) if fault is not None else None
        if answer is None:
            answer = tool._dispatch(self.command, path, query, raw)
        if isinstance(fault, NotFoundAs503):
            answer = _not_found_as_503(answer)
        self._send(answer)

    def _send(self, answer: _Answer) -> None:
        self.send_response(answer.status)
        self.send_header("Content-Type", answer.content_type)
        self.send_header("Content-Length", str(len(answer.body)))
        for key, value in answer.headers.items():
            if key.lower() != "content-length":
                self.send_header(key, value)
        self.end_headers()
        self.wfile.write(answer.body)


class DemoToolServer:
    """One demo tool served over HTTP in a background thread; started on construction.

    ``port=0`` picks a free ephemeral port; :attr:`url` tells which. Use as a context
    manager or call :meth:`close`, which also cuts open keep-alive connections so that
    nothing is served after it returns.
    """

    def __init__(self, spec: ToolSpec, host: str = DEFAULT_HOST, port: int = 0) -> None:
        self.spec = spec
        self._validators: dict[str, Draft202012Validator] = {}
        for capability in spec.capabilities:
            Draft202012Validator.check_schema(capability.input_schema)
            Draft202012Validator.check_schema(capability.output_schema)
            self._validators[capability.path] = Draft202012Validator(capability.input_schema)
        self._lock = threading.Lock()
        self._faults: dict[str, deque[Fault]] = {}
        self._requests: list[RecordedRequest] = []
        self._connections: set[socket.socket] = set()
        self._stopping = threading.Event()
        self._closed = False
        self._httpd = _HTTPServer((host, port), self)
        address = self._httpd.server_address
        self.host: str = str(address[0])
        self.port: int = int(address[1])
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": _POLL_INTERVAL_S},
            name=f"demo-tool-{spec.name}",
            daemon=True,
        )
        self._thread.start()

    @property
    def name(self) -> str:
        """The tool name, e.g. ``"stocks"``."""
        return self.spec.name

    @property
    def url(self) -> str:
        """Base URL, e.g. ``"http://127.0.0.1:54321"``."""
        return f"http://{self.host}:{self.port}"

    @property
    def paths(self) -> list[str]:
        """Every path this server answers (capabilities, then the built-in ones)."""
        return [c.path for c in self.spec.capabilities] + list(_BUILTIN_PATHS)

    def describe(self) -> dict[str, Any]:
        """The body of ``GET /capabilities``."""
        return self.spec.describe()

    def catalog_entry(self) -> dict[str, Any]:
        """This tool as one entry of :meth:`DemoTools.catalog_dict`."""
        described = self.spec.describe()
        return {
            "name": self.name,
            "description": described["description"],
            "base_url": self.url,
            "capabilities": described["capabilities"],
        }

    # -- fault injection and recording ------------------------------------------------

    def inject(self, path: str, *faults: Fault) -> None:
        """Queue ``faults`` for ``path``; each request to it consumes one, in order.

        Unknown paths and non-fault values are refused at once: a typo would otherwise
        leave the fault silently unused and the test passing for the wrong reason.
        """
        if path not in self.paths:
            raise ValueError(f"{self.name} serves no {path!r}; paths: {', '.join(self.paths)}")
        for fault in faults:
            if not isinstance(fault, _FAULT_TYPES):
                raise TypeError(f"not a fault: {fault!r}")
        with self._lock:
            self._faults.setdefault(path, deque()).extend(faults)

    def pending_faults(self, path: str | None = None) -> int:
        """How many injected faults are still queued (for ``path``, or in total)."""
        with self._lock:
            if path is not None:
                return len(self._faults.get(path, ()))
            return sum(len(q) for q in self._faults.values())

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot (copy) of the requests received so far, oldest first."""
        with self._lock:
            return list(self._requests)

    def requests_to(self, path: str) -> list[RecordedRequest]:
        """The requests received for ``path``, oldest first."""
        return [r for r in self.requests if r.path == path]

    def reset(self) -> None:
        """Forget recorded requests and drop all queued faults."""
        with self._lock:
            self._requests.clear()
            self._faults.clear()

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def _next_fault(self, path: str) -> Fault | None:
        with self._lock:
            queue = self._faults.get(path)
            return queue.popleft() if queue else None

    # -- dispatch ---------------------------------------------------------------------

    def _dispatch(self, method: str, path: str, query: dict[str, str], raw: bytes) -> _Answer:
        """The normal answer to a request (no fault involved)."""
        capability = self.spec.capability_at(path)
        if capability is None and path not in _BUILTIN_PATHS:
            return _fail(
                ToolError(
                    code="UNKNOWN_PATH",
                    message=f"{self.name} has no {path!r}",
                    category=ErrorCategory.NOT_FOUND,
                    retryable=False,
                    details={"paths": ", ".join(self.paths)},
                )
            )
        allowed = capability.method if capability is not None else "GET"
        if method != allowed:
            return _fail(
                _input_error(
                    "METHOD_NOT_ALLOWED",
                    f"{path} takes {allowed}, not {method}",
                    retryable=False,
                    expected=allowed,
                ),
                headers={"Allow": allowed},
            )
        if path == "/capabilities":
            return _json_answer(200, self.describe())
        if path == "/health":
            return _ok({"status": "ok", "tool": self.name})
        assert capability is not None

        instance: Any = query
        if capability.method != "GET":
            parsed_ok, instance, problem = _parse_json(raw)
            if not parsed_ok:
                return _fail(_input_error("INVALID_JSON", problem, expected="JSON object"))
        errors = list(self._validators[path].iter_errors(instance))
        if errors:
            return _fail(_schema_failure(capability, instance, errors))
        try:
            return _ok(capability.handler(instance))
        except ToolFailure as failure:
            return _fail(failure.error)
        except Exception as exc:  # a bug in a handler must still answer with an envelope
            logger.exception("%s %s failed", self.name, path)
            return _fail(
                ToolError(
                    code="INTERNAL_ERROR",
                    message=f"{self.name} failed handling {path}: {type(exc).__name__}",
                    category=ErrorCategory.SERVICE_ERROR,
                    retryable=False,
                )
            )

    # -- lifecycle --------------------------------------------------------------------

    def _track(self, connection: socket.socket) -> None:
        with self._lock:
            self._connections.add(connection)
        if self._stopping.is_set():  # accepted just as we closed
            _cut(connection)

    def _untrack(self, connection: socket.socket) -> None:
        with self._lock:
            self._connections.discard(connection)

    def close(self) -> None:
        """Stop serving: refuse new connections, cut open ones, wake hanging requests."""
        if self._closed:
            return
        self._closed = True
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            _cut(connection)
        self._thread.join(timeout=5)

    def __enter__(self) -> DemoToolServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"DemoToolServer({self.name!r}, {self.url!r})"


def _cut(connection: socket.socket) -> None:
    """Shut a socket down both ways, which wakes a handler blocked reading from it."""
    with contextlib.suppress(OSError):  # already closed by the peer or by the handler
        connection.shutdown(socket.SHUT_RDWR)


# ------------------------------------------------------------------------ public API


class DemoTools:
    """The three running demo tools. A context manager; :meth:`close` stops them all."""

    def __init__(self, servers: Mapping[str, DemoToolServer]) -> None:
        self.servers: dict[str, DemoToolServer] = dict(servers)
        self.urls: dict[str, str] = {name: s.url for name, s in self.servers.items()}

    def __getitem__(self, name: str) -> DemoToolServer:
        return self.servers[name]

    def catalog_dict(self) -> dict[str, Any]:
        """The catalog as plain data: ``{"tools": [{"name", "description", "base_url",
        "capabilities": [...]}]}``, built from the same definitions the servers use."""
        return {"tools": [server.catalog_entry() for server in self.servers.values()]}

    def reset(self) -> None:
        """Reset every server (recorded requests and queued faults)."""
        for server in self.servers.values():
            server.reset()

    def close(self) -> None:
        """Stop every server; safe to call twice."""
        for server in self.servers.values():
            server.close()

    def __enter__(self) -> DemoTools:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def start_demo_tools(host: str = DEFAULT_HOST, port: int = 0) -> DemoTools:
    """Start the stocks, currency and weather tools and return them running.

    ``port=0`` (the default) gives each an ephemeral port; otherwise they take ``port``,
    ``port + 1`` and ``port + 2`` in that order. If one cannot start, those already
    started are stopped before the error propagates.
    """
    servers: dict[str, DemoToolServer] = {}
    try:
        for offset, spec in enumerate(DEMO_TOOL_SPECS):
            servers[spec.name] = DemoToolServer(spec, host, port + offset if port else 0)
    except BaseException:
        for server in servers.values():
            server.close()
        raise
    return DemoTools(servers)


def serve_forever(
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    *,
    out: TextIO | None = None,
    stop: threading.Event | None = None,
) -> None:
    """Run the demo tools on ``port``, ``port + 1``, ``port + 2`` until Ctrl-C.

    Prints each tool's URL and capabilities to ``out`` (stdout by default). ``stop``
    lets a caller other than a terminal (a test, another thread) end it. ``port=0``
    gives every tool an ephemeral port instead.
    """
    out = out if out is not None else sys.stdout
    stop = stop if stop is not None else threading.Event()
    with start_demo_tools(host, port) as tools:
        print("dagwright demo tools:", file=out)
        for name, server in tools.servers.items():
            routes = ", ".join(f"{c.method} {c.path}" for c in server.spec.capabilities)
            print(f"  {name:<9} {server.url}  ({routes})", file=out)
        print("GET /capabilities on each describes it. Press Ctrl-C to stop.", file=out)
        out.flush()
        try:
            while not stop.wait(0.2):
                pass
        except KeyboardInterrupt:
            print("stopping demo tools", file=out)
