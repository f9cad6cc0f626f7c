"""Real HTTP servers on 127.0.0.1 that speak the OpenAI and Anthropic protocols.

The provider clients are tested against these instead of mocked transports, so that
what is exercised is real: sockets, HTTP/1.1 keep-alive, headers, status codes, a
connection dropped mid-request, a server that never answers. Each server answers
from a queue of scripted behaviours and records every request it receives.

Usage::

    with FakeOpenAIServer() as srv:
        srv.answer("hello")
        srv.error(429, "slow down", headers={"Retry-After": "2"})
        client = OpenAICompatibleClient(base_url=srv.base_url, model="m")
        ...
        assert srv.requests[0].body["model"] == "m"

or through the fixtures ``openai_server`` / ``anthropic_server`` / ``closed_port_url``.

Streamed answers (``"stream": true``) are scripted with ``stream_answer`` and friends:
server-sent events written one by one with chunked transfer encoding, as the providers
send them, optionally ``delay_s`` apart, dropped midway (``cut_after``), interrupted by
an error event (``error_after``) or trickled a byte at a time (``byte_delay_s``).

When the queue is empty a server answers 500 "no scripted reply left", so an
unexpected extra call fails loudly instead of getting a plausible answer.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import socket
import socketserver
import sys
import threading
from collections import deque
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

import pytest

JSONBody = Any
BodyBuilder = Callable[["ReceivedRequest"], JSONBody]
StreamBuilder = Callable[["ReceivedRequest"], list[bytes]]


@dataclass
class ReceivedRequest:
    """One request as the server saw it; header names are lower-cased."""

    method: str
    path: str
    headers: dict[str, str]
    raw: bytes
    body: Any  # the parsed JSON body, None when it was not JSON
    client_port: int = 0  # tells connections apart: equal on a reused keep-alive connection


@dataclass
class Behaviour:
    """How the server reacts to one request.

    ``body`` is JSON (or a function of the request returning JSON); ``raw`` overrides it
    with literal bytes. ``delay_s`` waits before answering; ``drop`` closes the
    connection without answering (after the delay, so ``hang`` is delay + drop).

    ``stream`` makes it a streamed answer instead: the events it builds are written as
    HTTP chunks, ``event_delay_s`` apart (each byte ``byte_delay_s`` apart when set);
    with ``drop`` the connection is closed after the last event without ending the
    chunked body, the way a connection lost mid-stream looks to the client.
    """

    status: int = 200
    body: JSONBody | BodyBuilder = None
    raw: bytes | None = None
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    drop: bool = False
    stream: StreamBuilder | None = None
    event_delay_s: float = 0.0
    byte_delay_s: float = 0.0


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    # Do not join handler threads on close: a keep-alive connection the client still
    # holds would block it. Open connections are shut down explicitly instead.
    block_on_close = False

    def __init__(self, fake: _FakeLLMServer) -> None:
        self.fake = fake
        super().__init__(("127.0.0.1", 0), _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind does a reverse DNS lookup of the host, which can take
        # seconds on a machine without a resolver; the name is not needed.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = "127.0.0.1", self.server_address[1]

    def handle_error(self, request: Any, client_address: Any) -> None:
        # a client that hangs up on a kept-alive connection (the tests that cut or leave a
        # stream do it on purpose) is not a server fault; anything else still prints
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as real providers do
    # Headers and body go out in separate writes; with Nagle on, the body would wait for
    # the client's delayed ACK (~40 ms a request).
    disable_nagle_algorithm = True
    server: _HTTPServer

    def setup(self) -> None:
        super().setup()
        self.server.fake._connections.add(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.fake._connections.discard(self.connection)

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the per-request log lines on stderr."""

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def _serve(self) -> None:
        fake = self.server.fake
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        request = ReceivedRequest(
            method=self.command,
            path=self.path,
            headers={k.lower(): v for k, v in self.headers.items()},
            raw=raw,
            body=body,
            client_port=int(self.client_address[1]),
        )
        with fake._lock:
            fake.requests.append(request)
        behaviour = fake._behaviour_for(request)

        if behaviour.delay_s:
            fake._stopping.wait(behaviour.delay_s)  # cut short when the server stops
        if behaviour.stream is not None:
            self._send_stream(behaviour, behaviour.stream(request))
            return
        if behaviour.drop or fake._stopping.is_set():
            self.close_connection = True
            return
        if behaviour.raw is not None:
            payload = behaviour.raw
        else:
            value = behaviour.body(request) if callable(behaviour.body) else behaviour.body
            payload = json.dumps(value).encode()
        try:
            self.send_response(behaviour.status)
            self.send_header("Content-Type", behaviour.content_type)
            self.send_header("Content-Length", str(len(payload)))
            for name, value in behaviour.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)
        except OSError:  # the client gave up (timed out) meanwhile
            self.close_connection = True


    def _send_stream(self, behaviour: Behaviour, events: list[bytes]) -> None:
        """Write ``events`` as a chunked ``text/event-stream`` body, paced as scripted."""
        stopping = self.server.fake._stopping
        try:
            self.send_response(behaviour.status)
            self.send_header("Content-Type", behaviour.content_type)
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Cache-Control", "no-cache")
            for name, value in behaviour.headers.items():
                self.send_header(name, value)
            self.end_headers()
            for number, event in enumerate(events):
                if number and behaviour.event_delay_s and stopping.wait(behaviour.event_delay_s):
                    break
                pieces = ([event[i:i + 1] for i in range(len(event))]
                          if behaviour.byte_delay_s else [event])
                for piece in pieces:
                    if behaviour.byte_delay_s and stopping.wait(behaviour.byte_delay_s):
                        break
                    if piece:  # an empty chunk would end the body
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            if behaviour.drop or stopping.is_set():
                self.close_connection = True
                return
            self.wfile.write(b"0\r\n\r\n")
        except OSError:  # the client gave up meanwhile
            self.close_connection = True


class _FakeLLMServer:
    """The protocol-independent part: lifecycle, queue, request log, generic replies."""

    path = "/"

    def __init__(self, *, api_key: str | None = None) -> None:
        self.api_key = api_key
        self.requests: list[ReceivedRequest] = []
        self._queue: deque[Behaviour] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle -----------------------------------------------------------------

    def start(self) -> Self:
        self._httpd = _HTTPServer(self)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.01},  # how fast stop() is noticed
            name=f"{type(self).__name__}:{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, release hanging handlers and close every open connection."""
        self._stopping.set()
        if self._httpd is None:
            return
        self._httpd.shutdown()
        self._httpd.server_close()
        for conn in list(self._connections):
            with contextlib.suppress(OSError):  # already closed by the client
                conn.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=2)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._httpd is not None, "server not started"
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` without any path."""
        return f"http://127.0.0.1:{self.port}"

    # --- scripting -----------------------------------------------------------------

    def push(self, behaviour: Behaviour) -> Self:
        """Queue a behaviour for the next request that reaches the script."""
        with self._lock:
            self._queue.append(behaviour)
        return self

    @property
    def pending(self) -> int:
        """Scripted behaviours not yet consumed."""
        return len(self._queue)

    def reply(
        self,
        body: JSONBody | BodyBuilder,
        *,
        status: int = 200,
        headers: dict[str, str] | None = None,
        delay_s: float = 0.0,
    ) -> Self:
        """Answer with this exact JSON body (e.g. one that lacks required fields)."""
        return self.push(Behaviour(status=status, body=body, headers=dict(headers or {}),
                                   delay_s=delay_s))

    def raw(
        self, body: bytes | str, *, status: int = 200, content_type: str = "text/html"
    ) -> Self:
        """Answer with literal bytes, e.g. a proxy's HTML error page with status 200."""
        data = body.encode() if isinstance(body, str) else body
        return self.push(Behaviour(status=status, raw=data, content_type=content_type))

    def error(
        self,
        status: int,
        message: str = "error",
        *,
        headers: dict[str, str] | None = None,
        error_type: str | None = None,
    ) -> Self:
        """Answer with an HTTP error in this provider's error format."""
        return self.push(
            Behaviour(status=status, body=self._error_body(status, message, error_type),
                      headers=dict(headers or {}))
        )

    def hang(self, seconds: float) -> Self:
        """Say nothing for ``seconds`` (or until the server stops), then drop the connection."""
        return self.push(Behaviour(delay_s=seconds, drop=True))

    def drop(self) -> Self:
        """Close the connection after reading the request, without any answer."""
        return self.push(Behaviour(drop=True))

    def stream_raw(
        self,
        events: list[bytes] | StreamBuilder,
        *,
        cut: bool = False,
        event_delay_s: float = 0.0,
        byte_delay_s: float = 0.0,
        content_type: str = "text/event-stream",
    ) -> Self:
        """Stream these literal server-sent events (framing edge cases, odd servers)."""
        build = events if callable(events) else (lambda _request: list(events))
        return self.push(Behaviour(stream=build, drop=cut, event_delay_s=event_delay_s,
                                   byte_delay_s=byte_delay_s, content_type=content_type))

    # --- to be specialised per protocol ----------------------------------------------

    def _error_body(self, status: int, message: str, error_type: str | None) -> JSONBody:
        raise NotImplementedError

    def _check(self, request: ReceivedRequest) -> Behaviour | None:
        """A protocol-level rejection of the request, before the script is consulted."""
        return None

    def _behaviour_for(self, request: ReceivedRequest) -> Behaviour:
        if request.path.split("?")[0] != self.path:
            return Behaviour(status=404, body=self._error_body(404, f"no route {request.path}",
                                                              None))
        rejection = self._check(request)
        if rejection is not None:
            return rejection
        with self._lock:
            if self._queue:
                return self._queue.popleft()
        return Behaviour(status=500, body=self._error_body(500, "no scripted reply left", None))


# --- OpenAI Chat Completions ---------------------------------------------------------------


class FakeOpenAIServer(_FakeLLMServer):
    """An OpenAI-compatible ``POST /v1/chat/completions`` endpoint.

    ``api_key``: require ``Authorization: Bearer <api_key>``; a wrong key gets a 401 that
    echoes the key received (as some servers do), to prove clients redact it.
    ``unsupported_response_formats``: ``response_format`` types answered with a 400,
    like servers without structured-output support, e.g. ``{"json_schema"}``.
    """

    path = "/v1/chat/completions"

    def __init__(
        self,
        *,
        api_key: str | None = None,
        unsupported_response_formats: Collection[str] = (),
    ) -> None:
        super().__init__(api_key=api_key)
        self.unsupported_response_formats = set(unsupported_response_formats)

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    def answer(
        self,
        text: str | None,
        *,
        finish_reason: str | None = "stop",
        prompt_tokens: int = 11,
        completion_tokens: int = 7,
        model: str | None = None,
        delay_s: float = 0.0,
        usage: bool = True,
    ) -> Self:
        """Answer with one choice whose message content is ``text``."""

        def build(request: ReceivedRequest) -> JSONBody:
            return self._completion(
                request, {"role": "assistant", "content": text}, finish_reason,
                (prompt_tokens, completion_tokens) if usage else None, model,
            )

        return self.push(Behaviour(body=build, delay_s=delay_s))

    def answer_tool_call(
        self, arguments: str | dict[str, Any], *, name: str = "response",
        finish_reason: str = "tool_calls",
    ) -> Self:
        """Answer with a tool call (content null), as function-calling models do."""
        args = arguments if isinstance(arguments, str) else json.dumps(arguments)
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": name, "arguments": args}}
            ],
        }
        return self.push(Behaviour(
            body=lambda r: self._completion(r, message, finish_reason, (11, 7), None)
        ))

    def stream_answer(
        self,
        chunks: Sequence[str],
        *,
        finish_reason: str | None = "stop",
        prompt_tokens: int = 11,
        completion_tokens: int = 7,
        model: str | None = None,
        delay_s: float = 0.0,
        first_delay_s: float = 0.0,
        cut_after: int | None = None,
        error_after: int | None = None,
        error: tuple[str, str] = ("server_error", "The server had an error"),
        byte_delay_s: float = 0.0,
        done: bool = True,
    ) -> Self:
        """Stream ``chunks`` as ``choices[0].delta.content``, the way OpenAI does.

        A first chunk with the role, one per text chunk, one with ``finish_reason``, one
        with ``usage`` when the request asked for it (``stream_options.include_usage``),
        then ``data: [DONE]`` (unless ``done`` is False). ``cut_after=n`` drops the
        connection after the n-th text chunk; ``error_after=n`` sends an error chunk
        ``(type, message)`` after it and ends the stream.
        """

        def build(request: ReceivedRequest) -> list[bytes]:
            base = {"id": f"chatcmpl-{len(self.requests)}", "object": "chat.completion.chunk",
                    "created": 1_700_000_000, "model": model or request.body.get("model")}

            def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
                choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
                return _data({**base, "choices": [choice]})

            events = [chunk({"role": "assistant", "content": ""})]
            for number, text in enumerate(chunks, start=1):
                events.append(chunk({"content": text}))
                if number == cut_after:
                    return events
                if number == error_after:
                    return [*events, _data({"error": {"message": error[1], "type": error[0],
                                                      "param": None, "code": None}})]
            events.append(chunk({}, finish_reason))
            options = request.body.get("stream_options") or {}
            if options.get("include_usage"):
                events.append(_data({**base, "choices": [], "usage": {
                    "prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                    "total_tokens": prompt_tokens + completion_tokens}}))
            if done:
                events.append(b"data: [DONE]\n\n")
            return events

        return self.push(Behaviour(stream=build, delay_s=first_delay_s, event_delay_s=delay_s,
                                   byte_delay_s=byte_delay_s, drop=cut_after is not None,
                                   content_type="text/event-stream"))

    def stream_tool_call(self, argument_chunks: Sequence[str], *, name: str = "response") -> Self:
        """Stream a tool call's arguments (content null), as function-calling servers do."""

        def build(request: ReceivedRequest) -> list[bytes]:
            base = {"id": "chatcmpl-tool", "object": "chat.completion.chunk",
                    "created": 1_700_000_000, "model": request.body.get("model")}
            calls = [{"index": 0, "id": "call_1", "type": "function",
                      "function": {"name": name, "arguments": ""}}]
            events = [_data({**base, "choices": [{"index": 0, "finish_reason": None, "delta": {
                "role": "assistant", "content": None, "tool_calls": calls}}]})]
            for piece in argument_chunks:
                delta = {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}
                events.append(_data({**base, "choices": [
                    {"index": 0, "delta": delta, "finish_reason": None}]}))
            events.append(_data({**base, "choices": [
                {"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}))
            return [*events, b"data: [DONE]\n\n"]

        return self.push(Behaviour(stream=build, content_type="text/event-stream"))

    def _completion(
        self,
        request: ReceivedRequest,
        message: dict[str, Any],
        finish_reason: str | None,
        usage: tuple[int, int] | None,
        model: str | None,
    ) -> JSONBody:
        body: dict[str, Any] = {
            "id": f"chatcmpl-{len(self.requests)}",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": model or request.body.get("model"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        }
        if usage is not None:
            body["usage"] = {
                "prompt_tokens": usage[0],
                "completion_tokens": usage[1],
                "total_tokens": sum(usage),
            }
        return body

    def _error_body(self, status: int, message: str, error_type: str | None) -> JSONBody:
        default_type = "invalid_request_error" if status < 500 else "server_error"
        return {"error": {"message": message, "type": error_type or default_type,
                          "param": None, "code": None}}

    def _check(self, request: ReceivedRequest) -> Behaviour | None:
        if self.api_key is not None:
            auth = request.headers.get("authorization", "")
            if auth != f"Bearer {self.api_key}":
                given = auth.removeprefix("Bearer ") or "none"
                return Behaviour(status=401, body={"error": {
                    "message": f"Incorrect API key provided: {given}.",
                    "type": "invalid_request_error", "param": None, "code": "invalid_api_key",
                }})
        body = request.body
        if not isinstance(body, dict) or not isinstance(body.get("model"), str):
            return Behaviour(status=400, body=self._error_body(400, "'model' is required", None))
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return Behaviour(
                status=400, body=self._error_body(400, "'messages' must be a non-empty array",
                                                  None)
            )
        fmt = body.get("response_format")
        if isinstance(fmt, dict) and fmt.get("type") in self.unsupported_response_formats:
            return Behaviour(status=400, body={"error": {
                "message": f"response_format type {fmt['type']!r} is not supported",
                "type": "invalid_request_error", "param": "response_format", "code": None,
            }})
        return None


# --- Anthropic Messages --------------------------------------------------------------------

_ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


class FakeAnthropicServer(_FakeLLMServer):
    """An Anthropic ``POST /v1/messages`` endpoint.

    It validates requests the way the API does where it matters to clients: an
    ``anthropic-version`` header, ``model`` and ``max_tokens``, only user/assistant roles
    in ``messages`` (system goes top-level), starting with user. It is stricter than
    today's API in one way: turns must alternate, to prove clients merge them.
    ``api_key``: require ``x-api-key``; a wrong key gets a 401 that echoes it.
    """

    path = "/v1/messages"

    @property
    def base_url(self) -> str:
        return self.url

    def answer(
        self,
        text: str,
        *,
        stop_reason: str | None = "end_turn",
        input_tokens: int = 13,
        output_tokens: int = 5,
        delay_s: float = 0.0,
    ) -> Self:
        """Answer with one text block."""
        return self.answer_blocks([{"type": "text", "text": text}], stop_reason=stop_reason,
                                  input_tokens=input_tokens, output_tokens=output_tokens,
                                  delay_s=delay_s)

    def answer_tool_use(
        self,
        tool_input: Any,
        *,
        name: str | None = None,
        text: str | None = None,
        stop_reason: str = "tool_use",
        input_tokens: int = 13,
        output_tokens: int = 5,
        delay_s: float = 0.0,
    ) -> Self:
        """Answer with a ``tool_use`` block, named after the request's forced tool by
        default, after ``delay_s``."""

        def build(request: ReceivedRequest) -> JSONBody:
            tool = name or (request.body.get("tool_choice") or {}).get("name") or "tool"
            blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
            blocks.append({"type": "tool_use", "id": "toolu_01", "name": tool,
                           "input": tool_input})
            return self._message(request, blocks, stop_reason, input_tokens, output_tokens)

        return self.push(Behaviour(body=build, delay_s=delay_s))

    def answer_blocks(
        self,
        blocks: list[dict[str, Any]],
        *,
        stop_reason: str | None = "end_turn",
        input_tokens: int = 13,
        output_tokens: int = 5,
        delay_s: float = 0.0,
    ) -> Self:
        """Answer with these content blocks."""
        return self.push(Behaviour(
            body=lambda r: self._message(r, blocks, stop_reason, input_tokens, output_tokens),
            delay_s=delay_s,
        ))

    def stream_answer(
        self,
        chunks: Sequence[str],
        *,
        stop_reason: str = "end_turn",
        input_tokens: int = 13,
        output_tokens: int = 5,
        delay_s: float = 0.0,
        cut_after: int | None = None,
        error_after: int | None = None,
        error: tuple[str, str] = ("overloaded_error", "Overloaded"),
        byte_delay_s: float = 0.0,
    ) -> Self:
        """Stream ``chunks`` as ``text_delta`` events, the way the Messages API does.

        ``message_start``, ``content_block_start``, a ``ping``, one
        ``content_block_delta`` per chunk, ``content_block_stop``, ``message_delta``
        (stop reason, output usage), ``message_stop``. ``cut_after=n`` drops the
        connection after the n-th delta; ``error_after=n`` sends an ``error`` event
        ``(type, message)`` after it and ends the stream.
        """

        def build(request: ReceivedRequest) -> list[bytes]:
            events = [self._message_start(request, input_tokens),
                      _event("content_block_start", {
                          "type": "content_block_start", "index": 0,
                          "content_block": {"type": "text", "text": ""}}),
                      _event("ping", {"type": "ping"})]
            for number, text in enumerate(chunks, start=1):
                events.append(_event("content_block_delta", {
                    "type": "content_block_delta", "index": 0,
                    "delta": {"type": "text_delta", "text": text}}))
                if number == cut_after:
                    return events
                if number == error_after:
                    return [*events, _event("error", {
                        "type": "error", "error": {"type": error[0], "message": error[1]}})]
            return [*events, *self._message_end(0, stop_reason, output_tokens)]

        return self.push(Behaviour(stream=build, event_delay_s=delay_s,
                                   byte_delay_s=byte_delay_s, drop=cut_after is not None,
                                   content_type="text/event-stream"))

    def stream_tool_use(
        self,
        json_chunks: Sequence[str],
        *,
        text_before: str | None = None,
        input_tokens: int = 13,
        output_tokens: int = 5,
        delay_s: float = 0.0,
        first_delay_s: float = 0.0,
    ) -> Self:
        """Stream a forced tool call: its input as ``input_json_delta`` pieces, after an
        optional text block, the tool named after the request's ``tool_choice``; events
        ``delay_s`` apart, the first after ``first_delay_s``."""

        def build(request: ReceivedRequest) -> list[bytes]:
            tool = (request.body.get("tool_choice") or {}).get("name") or "tool"
            events = [self._message_start(request, input_tokens)]
            index = 0
            if text_before:
                events += [
                    _event("content_block_start", {"type": "content_block_start", "index": 0,
                                                   "content_block": {"type": "text",
                                                                     "text": ""}}),
                    _event("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                   "delta": {"type": "text_delta",
                                                             "text": text_before}}),
                    _event("content_block_stop", {"type": "content_block_stop", "index": 0}),
                ]
                index = 1
            events.append(_event("content_block_start", {
                "type": "content_block_start", "index": index,
                "content_block": {"type": "tool_use", "id": "toolu_01", "name": tool,
                                  "input": {}}}))
            for piece in json_chunks:
                events.append(_event("content_block_delta", {
                    "type": "content_block_delta", "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": piece}}))
            return [*events, *self._message_end(index, "tool_use", output_tokens)]

        return self.push(Behaviour(stream=build, delay_s=first_delay_s, event_delay_s=delay_s,
                                   content_type="text/event-stream"))

    def _message_start(self, request: ReceivedRequest, input_tokens: int) -> bytes:
        return _event("message_start", {"type": "message_start", "message": {
            "id": f"msg_{len(self.requests)}", "type": "message", "role": "assistant",
            "model": request.body.get("model"), "content": [], "stop_reason": None,
            "stop_sequence": None, "usage": {"input_tokens": input_tokens, "output_tokens": 1}}})

    def _message_end(self, index: int, stop_reason: str, output_tokens: int) -> list[bytes]:
        return [
            _event("content_block_stop", {"type": "content_block_stop", "index": index}),
            _event("message_delta", {"type": "message_delta",
                                     "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                                     "usage": {"output_tokens": output_tokens}}),
            _event("message_stop", {"type": "message_stop"}),
        ]

    def _message(
        self,
        request: ReceivedRequest,
        blocks: list[dict[str, Any]],
        stop_reason: str | None,
        input_tokens: int,
        output_tokens: int,
    ) -> JSONBody:
        return {
            "id": f"msg_{len(self.requests)}",
            "type": "message",
            "role": "assistant",
            "model": request.body.get("model"),
            "content": blocks,
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
        }

    def _error_body(self, status: int, message: str, error_type: str | None) -> JSONBody:
        kind = error_type or _ANTHROPIC_ERROR_TYPES.get(status) or (
            "api_error" if status >= 500 else "invalid_request_error"
        )
        return {"type": "error", "error": {"type": kind, "message": message}}

    def _invalid(self, message: str) -> Behaviour:
        return Behaviour(status=400, body=self._error_body(400, message, None))

    def _check(self, request: ReceivedRequest) -> Behaviour | None:
        if self.api_key is not None:
            given = request.headers.get("x-api-key")
            if given != self.api_key:
                return Behaviour(status=401, body=self._error_body(
                    401, f"invalid x-api-key: {given or 'none'}", None
                ))
        if "anthropic-version" not in request.headers:
            return self._invalid("anthropic-version: header is required")
        body = request.body
        if not isinstance(body, dict):
            return self._invalid("request body is not valid JSON")
        if not isinstance(body.get("model"), str):
            return self._invalid("model: Field required")
        if not isinstance(body.get("max_tokens"), int):
            return self._invalid("max_tokens: Field required")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return self._invalid("messages: at least one message is required")
        previous = None
        for i, message in enumerate(messages):
            role = message.get("role") if isinstance(message, dict) else None
            if role not in ("user", "assistant"):
                return self._invalid(
                    f"messages.{i}.role: Unexpected role {role!r}. The Messages API accepts "
                    "a top-level `system` parameter, not \"system\" as an input message role."
                )
            if role == previous:
                return self._invalid(f"messages.{i}: roles must alternate between user and "
                                     "assistant")
            if i == 0 and role != "user":
                return self._invalid("messages.0.role: first message must use the user role")
            previous = role
        choice = body.get("tool_choice")
        if isinstance(choice, dict) and choice.get("type") == "tool":
            names = [t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)]
            if choice.get("name") not in names:
                return self._invalid(f"tool_choice: tool {choice.get('name')!r} not in tools")
        return None


# --- OpenAI-compatible embeddings -----------------------------------------------------------


class FakeEmbeddingsServer(FakeOpenAIServer):
    """An OpenAI-compatible ``POST /v1/embeddings`` endpoint.

    Unscripted requests are answered by a toy model: a text's vector counts its words by
    *concept* (``concepts`` maps a lower-case word to a concept; other words are their own
    concept), hashed into ``dimensions`` slots, so texts sharing a concept are similar
    even when they share no word. Scripted replies (``reply``, ``error``...) come first.
    """

    path = "/v1/embeddings"

    def __init__(self, *, api_key: str | None = None, dimensions: int = 64,
                 concepts: dict[str, str] | None = None) -> None:
        super().__init__(api_key=api_key)
        self.dimensions = dimensions
        self.concepts = dict(concepts or {})

    def vector(self, text: str) -> list[float]:
        out = [0.0] * self.dimensions
        for word in re.findall(r"[a-z]+", text.lower()):
            concept = self.concepts.get(word, word)
            slot = int(hashlib.sha256(concept.encode()).hexdigest(), 16) % self.dimensions
            out[slot] += 1.0
        return out

    def _embeddings(self, request: ReceivedRequest) -> JSONBody:
        texts = request.body["input"]
        texts = [texts] if isinstance(texts, str) else texts
        return {"object": "list", "model": request.body["model"],
                "data": [{"object": "embedding", "index": i, "embedding": self.vector(t)}
                         for i, t in enumerate(texts)],
                "usage": {"prompt_tokens": 1, "total_tokens": 1}}

    def _check(self, request: ReceivedRequest) -> Behaviour | None:
        if self.api_key is not None:
            auth = request.headers.get("authorization", "")
            if auth != f"Bearer {self.api_key}":
                given = auth.removeprefix("Bearer ") or "none"
                return Behaviour(status=401, body=self._error_body(
                    401, f"Incorrect API key provided: {given}.", "invalid_request_error"))
        body = request.body
        if not isinstance(body, dict) or not isinstance(body.get("model"), str):
            return Behaviour(status=400, body=self._error_body(400, "'model' is required", None))
        texts = body.get("input")
        if not (isinstance(texts, str) or (isinstance(texts, list) and texts
                                           and all(isinstance(t, str) for t in texts))):
            return Behaviour(status=400, body=self._error_body(
                400, "'input' must be a string or a non-empty array of strings", None))
        return None

    def _behaviour_for(self, request: ReceivedRequest) -> Behaviour:
        if request.path.split("?")[0] == self.path and self._check(request) is None:
            with self._lock:
                if not self._queue:
                    return Behaviour(body=self._embeddings)
        return super()._behaviour_for(request)


# --- server-sent events ----------------------------------------------------------------------


def _data(value: JSONBody) -> bytes:
    """One ``data:`` event, the OpenAI framing."""
    return b"data: " + json.dumps(value).encode() + b"\n\n"


def _event(name: str, value: JSONBody) -> bytes:
    """One named event, the Anthropic framing."""
    return f"event: {name}\n".encode() + _data(value)


# --- fixtures --------------------------------------------------------------------------------


def free_port_url() -> str:
    """A loopback URL on which nothing listens (connections are refused)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest.fixture
def openai_server() -> Iterator[FakeOpenAIServer]:
    """A running :class:`FakeOpenAIServer`, stopped after the test."""
    with FakeOpenAIServer() as srv:
        yield srv


@pytest.fixture
def anthropic_server() -> Iterator[FakeAnthropicServer]:
    """A running :class:`FakeAnthropicServer`, stopped after the test."""
    with FakeAnthropicServer() as srv:
        yield srv


@pytest.fixture
def closed_port_url() -> str:
    """A loopback URL on which nothing listens."""
    return free_port_url()
