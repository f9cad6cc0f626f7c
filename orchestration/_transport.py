"""Calling a capability once: over HTTP with one pooled client, in-process, or through
the invoker of a source (MCP server, OpenAPI spec).

One call, no retries: deciding whether to try again is the executor's job. Every way a
call can go wrong (refused, timed out, dropped, dripped, garbage, too large, an error
envelope, a raised ``ToolFailed``, a crashing Python tool, parameters JSON cannot carry)
comes back as a classified :class:`StepError`; nothing raises past this module except
cancellation. Two bounds hold whatever the tool does:

* the timeout covers the *whole* call — connecting, sending and reading the body — so
  a body that trickles in a byte at a time cannot outlive it (httpx's own timeouts are
  per socket operation);
* a reply larger than ``max_response_bytes`` is refused while it streams, before it is
  held whole; what is read is decoded within ``max_json_depth``.

A :class:`CallTrace` tells the caller how far a call got, which matters when the caller
is cancelled mid-call and must record whether the request may have reached the tool. Its
``gate`` is awaited at the last moment before the request can reach the tool — an HTTP
request's first byte, a Python tool's or a source's call — and may stop the call there:
the engine commits a side-effect call's marker in it, so that a call still waiting for a
connection when its process dies is known never to have been sent.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from orchestration._deadlines import watchdog
from orchestration._json import DEFAULT_MAX_DEPTH, UnreadableJSON, encode, flat_size_bound
from orchestration._thread_calls import ThreadCall, ThreadCalls, in_tool_thread
from orchestration.capability import Capability
from orchestration.circuit import CircuitBreakers, CircuitTransition
from orchestration.errors import ToolFailed
from orchestration.logging_setup import protect_logger
from orchestration.protocol import ErrorCategory, ErrorSource, StepError, classify_http_response
from orchestration.redaction import Redactor

if TYPE_CHECKING:
    from orchestration.config import OrchestratorConfig

DEFAULT_MAX_RESPONSE_BYTES = 10_000_000
"""Default of ``ORCH_MAX_RESPONSE_BYTES``."""


@dataclass
class CallResult:
    """The outcome of one call: ``data`` when ``error`` is None; ``http_status`` the status
    of an HTTP answer (success included), for the HTTP client span; ``circuit`` the
    changes of the tool's circuit breaker this call caused (it opened it, probed it,
    closed it)."""

    data: Any = None
    error: StepError | None = None
    latency_s: float = 0.0
    http_status: int | None = None
    circuit: tuple[CircuitTransition, ...] = ()

    @property
    def ok(self) -> bool:
        return self.error is None

    def with_echoes_masked(self, redactor: Redactor | None) -> CallResult:
        """This result with every secret ``redactor`` knows by value (a catalog's or a
        run's credentials, the LLM key) masked wherever the tool echoed one back — in its
        data or its error —, the document's shape kept. The engine keeps what this returns
        (outputs, the run store, prompts to the LLM): a tool's echo of a credential the
        engine sent it is never worth keeping, and nothing downstream needs it back."""
        literals = redactor.known_secrets() if redactor is not None else ()
        if not literals:
            return self
        assert redactor is not None
        text = f"{self.data!r}{self.error!r}"
        if not any(literal in text for literal in literals):
            return self
        if self.data is not None:
            self.data = redactor.redact_value(self.data)
        if self.error is not None:
            self.error = self.error.model_copy(update={
                "message": redactor.redact(self.error.message),
                "details": redactor.redact_value(self.error.details)})
        return self


@dataclass(slots=True)
class CallTrace:
    """How far one call got. ``dispatched`` turns True the moment the request may reach
    the tool: an HTTP request's first bytes are about to be written, or a Python tool is
    about to be called. A caller cancelled mid-call reads it to know whether the tool may
    have acted."""

    dispatched: bool = False
    gate: Callable[[], Awaitable[StepError | None]] | None = None
    """Awaited once, right before the request can reach the tool; an error it returns
    stops the call there (not sent), and the call's result is that error."""

    async def pass_gate(self) -> StepError | None:
        """Run the gate (once); then the request may reach the tool, unless refused."""
        gate, self.gate = self.gate, None
        refused = await gate() if gate is not None else None
        if refused is None:
            self.dispatched = True
        return refused


class _GateClosed(Exception):
    """Raised inside the HTTP client's trace hook to stop a request the gate refused."""

    def __init__(self, error: StepError) -> None:
        super().__init__(error.message)
        self.error = error


def _query_params(params: dict[str, Any]) -> dict[str, str]:
    """GET parameters as query strings; non-scalars are sent as JSON text."""
    out: dict[str, str] = {}
    for key, value in params.items():
        if value is None:
            continue
        if isinstance(value, bool):
            out[key] = "true" if value else "false"
        elif isinstance(value, str | int | float):
            out[key] = str(value)
        else:
            out[key] = json.dumps(value, allow_nan=False)
    return out


def _encode(params: dict[str, Any], *, query: bool) -> tuple[dict[str, str] | None, bytes | None]:
    """The query parameters or the JSON body of a call, encoded here rather than inside
    the HTTP client, so a value JSON cannot carry is a classified error, not an exception
    from deep in the client. Raises ``ValueError`` naming the problem and its path."""
    body = encode(params, max_depth=10_000)  # depth is prepare's job; this is encoding
    return (_query_params(params), None) if query else (None, body)


def _without_userinfo(url: str) -> str:
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


class ToolTransport:
    """Sends capability calls. One instance per event loop (it owns an httpx pool).

    ``circuits``, when given, are the tools' circuit breakers (shared by every transport
    of the orchestrator): a call to a tool whose breaker is open is refused before
    anything is sent, and every call's outcome is reported to its breaker."""

    gates_calls = True
    """This transport awaits a call's ``CallTrace.gate`` itself, at the last moment (a
    transport that does not is gated by the engine before it is called)."""

    def __init__(
        self,
        http_client: httpx.AsyncClient | None = None,
        *,
        max_connections: int = 100,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        max_json_depth: int = DEFAULT_MAX_DEPTH,
        circuits: CircuitBreakers | None = None,
    ) -> None:
        self.circuits = circuits
        self._owns_client = http_client is None
        self._client = http_client
        self._max_connections = max_connections
        self.max_response_bytes = max_response_bytes
        self.max_json_depth = max_json_depth
        self.thread_calls = ThreadCalls()


    @classmethod
    def for_config(cls, config: OrchestratorConfig,
                   circuits: CircuitBreakers | None = None) -> ToolTransport:
        """A pooled transport with the limits of ``config`` (pool size from
        ``ORCH_MAX_CONCURRENCY``, ``ORCH_MAX_RESPONSE_BYTES``, ``ORCH_MAX_JSON_DEPTH``)
        and the tools' circuit breakers."""
        return cls(max_connections=max(10, config.max_concurrency * 2),
                   max_response_bytes=config.max_response_bytes,
                   max_json_depth=config.max_json_depth, circuits=circuits)
    def _http(self) -> httpx.AsyncClient:
        """The pooled client, created on the first HTTP call: building it (its TLS
        context above all) costs ~20 ms, wasted on runs whose tools are all in-process."""
        if self._client is None:
            limits = httpx.Limits(
                max_connections=self._max_connections,
                max_keepalive_connections=self._max_connections,
            )
            self._client = httpx.AsyncClient(limits=limits, follow_redirects=False)
            protect_logger("httpx")  # its INFO lines print request URLs, query included
        return self._client

    async def aclose(self) -> None:
        if self._owns_client and self._client is not None:
            await self._client.aclose()
            self._client = None

    async def call(
        self,
        capability: Capability,
        params: dict[str, Any],
        *,
        timeout_s: float,
        headers: dict[str, str] | None = None,
        trace: CallTrace | None = None,
        credentials: dict[str, str] | None = None,
    ) -> CallResult:
        """Call ``capability`` once with ``params``; never raises except on cancellation.

        ``trace`` (optional) is updated as the call progresses (see :class:`CallTrace`).
        ``credentials`` are the run's own headers for this tool: they replace the
        catalog's (an HTTP tool's headers, a source's credentials) for this call only.
        A call the tool's circuit breaker refuses comes back at once as a
        ``CIRCUIT_OPEN`` error: nothing was sent, the gate was not run.
        """
        started = time.perf_counter()
        trace = trace if trace is not None else CallTrace()
        circuits = self.circuits
        permit = None
        if circuits is not None:
            admitted = circuits.admit(capability)
            if isinstance(admitted, StepError):
                return CallResult(error=admitted, latency_s=time.perf_counter() - started)
            permit = admitted
        try:
            if capability.invoker is not None:
                # the source sends it: once past the gate, assume it may reach the tool
                refused = await trace.pass_gate()
                result = (CallResult(error=refused) if refused is not None else
                          await self._call_invoker(capability, params, timeout_s,
                                                   headers or {}, credentials))
                if result.error is None:
                    # a source's answer (an MCP result, an OpenAPI body) meets the rules an
                    # HTTP tool's meets: JSON, within ORCH_MAX_JSON_DEPTH and
                    # ORCH_MAX_RESPONSE_BYTES
                    result = self._checked_output(result.data, f"tool {capability.key!r}",
                                                  base=result)
            elif capability.function is not None:
                result = await self._call_function(capability, params, timeout_s, trace)
            else:
                sent = headers or {}
                if credentials:
                    sent = {**_without(capability.headers, credentials), **sent, **credentials}
                result = await self._call_http(capability, params, timeout_s, sent, trace,
                                               own_headers=not credentials)
        except BaseException:
            if permit is not None:  # cancelled: no verdict on the tool, free a probe slot
                CircuitBreakers.abandon(permit)
            raise
        if permit is not None:
            result.circuit = CircuitBreakers.record(permit, result.error)
        result.latency_s = time.perf_counter() - started
        return result

    async def _call_invoker(
        self, capability: Capability, params: dict[str, Any], timeout_s: float,
        headers: dict[str, str], credentials: dict[str, str] | None = None,
    ) -> CallResult:
        """A source's own call (MCP, OpenAPI); it classifies its failures itself, and
        anything it lets escape is reported rather than raised. A source that takes
        per-run credentials (``accepts_credentials``) gets them apart from the trace
        headers, to put in place of its own."""
        invoker = capability.invoker
        assert invoker is not None
        try:
            if credentials:
                if getattr(invoker, "accepts_credentials", False):
                    return await invoker.call(params, timeout_s=timeout_s, headers=headers,
                                              credentials=credentials)  # type: ignore[call-arg]
                headers = {**headers, **credentials}
            return await invoker.call(params, timeout_s=timeout_s, headers=headers)
        except Exception as exc:
            return CallResult(
                error=StepError(
                    category=ErrorCategory.INTERNAL_ERROR,
                    code="INVOKER_RAISED",
                    message=f"{capability.source} invoker raised {type(exc).__name__}: {exc}",
                    source=ErrorSource.ENGINE,
                    retryable=False,
                )
            )

    async def _call_function(
        self, capability: Capability, params: dict[str, Any], timeout_s: float,
        trace: CallTrace,
    ) -> CallResult:
        fn = capability.function
        assert fn is not None
        refused = await trace.pass_gate()
        if refused is not None:
            return CallResult(error=refused)
        try:
            if capability.run_in_thread:
                value = await self._in_thread(capability, fn, params, timeout_s)
                if isinstance(value, CallResult):
                    return value
            else:
                # a sync function runs on the loop and cannot be interrupted, so only an
                # awaitable result gets a deadline
                value = fn(**params)
                if inspect.isawaitable(value):
                    with watchdog().deadline(asyncio.get_running_loop().time() + timeout_s):
                        value = await value
        except ToolFailed as exc:
            return CallResult(
                error=StepError(
                    category=exc.category,
                    code=exc.code,
                    message=exc.message,
                    retryable=exc.retryable,
                    details=dict(exc.details),
                )
            )
        except TimeoutError:
            return CallResult(
                error=StepError(
                    category=ErrorCategory.TIMEOUT,
                    code="TOOL_TIMEOUT",
                    message=f"Python tool did not return within {timeout_s:g}s",
                    source=ErrorSource.TRANSPORT,
                    retryable=True,
                )
            )
        except Exception as exc:
            if isinstance(exc, TypeError) and not _fits_signature(fn, params):
                # the parameters do not match the function's signature: nothing ran
                return CallResult(
                    error=StepError(
                        category=ErrorCategory.INPUT_ERROR,
                        code="BAD_ARGUMENTS",
                        message=f"{type(exc).__name__}: {exc}",
                        source=ErrorSource.VALIDATION,
                        retryable=True,
                        request_sent=False,
                    )
                )
            return CallResult(
                error=StepError(
                    category=ErrorCategory.INTERNAL_ERROR,
                    code="TOOL_RAISED",
                    message=f"Python tool raised {type(exc).__name__}: {exc}",
                    source=ErrorSource.RAISED,
                    retryable=False,
                )
            )
        return self._checked_output(value)

    async def _in_thread(self, capability: Capability, fn: Any, params: dict[str, Any],
                         timeout_s: float) -> Any:
        """The function's value, or a CallResult refusing a call whose earlier,
        timed-out run is still going in its thread (see :mod:`orchestration._thread_calls`)."""
        if self.thread_calls.still_running(capability.key, params):
            return CallResult(error=StepError(
                category=ErrorCategory.TIMEOUT, code="TOOL_STILL_RUNNING",
                message="this call timed out before and is still running in its thread; it "
                        "is not started again while it runs (raise the capability's "
                        "timeout_s, or make the tool async so a timeout can stop it)",
                source=ErrorSource.TRANSPORT, retryable=False, request_sent=False,
                details={"still_running": True}))
        call = ThreadCall(fn, params)
        try:
            with watchdog().deadline(asyncio.get_running_loop().time() + timeout_s):
                return await in_tool_thread(call)
        except TimeoutError:
            if not self.thread_calls.timed_out(capability.key, params, call):
                raise
            return CallResult(error=StepError(
                category=ErrorCategory.TIMEOUT, code="TOOL_TIMEOUT",
                message=f"Python tool did not return within {timeout_s:g}s and is still "
                        "running in its thread; it is not run again while it runs (raise "
                        "the capability's timeout_s for a slow tool)",
                source=ErrorSource.TRANSPORT, retryable=False,
                details={"still_running": True}))

    def _checked_output(self, value: Any, who: str = "Python tool",
                        base: CallResult | None = None) -> CallResult:
        """A Python tool's or a source's result under the rules an HTTP reply meets: JSON
        (finite numbers, valid text, at most ``max_json_depth`` deep) and at most
        ``max_response_bytes`` as JSON text. ``base``: the result ``value`` came in (a
        source's, with its HTTP status), returned as it is when the value passes."""
        passed = base if base is not None else CallResult(data=value)
        bound = flat_size_bound(value) if self.max_json_depth >= 1 else None
        if bound is not None and bound <= self.max_response_bytes:
            return passed  # a small flat object: certainly fits
        try:
            size = len(encode(value, self.max_json_depth))
        except UnreadableJSON as exc:
            return CallResult(
                error=StepError(
                    category=ErrorCategory.INVALID_RESPONSE,
                    code="NOT_JSON_SERIALISABLE",
                    message=f"{who} returned a value that is not JSON: {exc.args[0]}",
                    source=ErrorSource.RESPONSE,
                    http_status=passed.http_status,
                ),
                http_status=passed.http_status,
            )
        if size > self.max_response_bytes:
            return CallResult(error=_too_large(self.max_response_bytes, passed.http_status),
                              http_status=passed.http_status)
        return passed

    async def _call_http(
        self,
        capability: Capability,
        params: dict[str, Any],
        timeout_s: float,
        extra_headers: dict[str, str],
        trace: CallTrace,
        *,
        own_headers: bool = True,
    ) -> CallResult:
        assert capability.url is not None
        url = capability.url
        headers = {**capability.headers, **extra_headers} if own_headers else extra_headers
        if "@" in url and any(name.lower() == "authorization" for name in headers):
            # the configured Authorization header wins: httpx would replace it with Basic
            # auth built from the URL's user:password (docs/tools.md)
            url = _without_userinfo(url)
        query = capability.method in ("GET", "HEAD", "DELETE")
        try:
            query_params, body = _encode(params, query=query)
        except ValueError as exc:
            return CallResult(error=StepError(
                category=ErrorCategory.VALIDATION_ERROR, code="UNENCODABLE_PARAMETERS",
                message=f"the parameters cannot be sent as JSON: {exc}",
                source=ErrorSource.VALIDATION, retryable=True, request_sent=False))
        if body is not None:
            headers.setdefault("Content-Type", "application/json")

        async def on_progress(event: str, info: dict[str, Any]) -> None:
            if event.endswith("send_request_headers.started"):
                refused = await trace.pass_gate()
                if refused is not None:
                    raise _GateClosed(refused)

        try:
            client = self._http()
            request = client.build_request(
                capability.method, url, headers=headers, params=query_params, content=body,
                timeout=timeout_s, extensions={"trace": on_progress})
            with watchdog().deadline(asyncio.get_running_loop().time() + timeout_s):
                response = await client.send(request, stream=True)
                try:
                    raw = await self._read_body(response)
                finally:
                    await response.aclose()
        except _GateClosed as closed:
            return CallResult(error=closed.error)
        except (TimeoutError, httpx.TimeoutException) as exc:
            if isinstance(exc, httpx.PoolTimeout):
                return _transport_error(
                    ErrorCategory.TIMEOUT, "POOL_TIMEOUT",
                    "no free connection in the pool within the timeout", sent=False)
            if isinstance(exc, httpx.ConnectTimeout) or not trace.dispatched:
                return _transport_error(
                    ErrorCategory.TIMEOUT, "CONNECT_TIMEOUT",
                    f"could not connect to {url} within {timeout_s:g}s", sent=False)
            return _transport_error(
                ErrorCategory.TIMEOUT, "READ_TIMEOUT",
                f"{url} did not answer within {timeout_s:g}s (the whole answer, body "
                "included, must arrive within the tool timeout)", sent=True)
        except httpx.ConnectError as exc:
            return _transport_error(
                ErrorCategory.CONNECTION_ERROR, "CONNECTION_REFUSED",
                f"cannot connect to {url}: {exc}", sent=False)
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
            return _transport_error(
                ErrorCategory.CONNECTION_ERROR, "CONNECTION_DROPPED",
                f"{url} dropped the connection: {exc or type(exc).__name__}",
                sent=True)
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            return _transport_error(
                ErrorCategory.CONNECTION_ERROR, "TRANSPORT_ERROR",
                f"{type(exc).__name__}: {exc}", sent=trace.dispatched)
        if raw is None:
            return CallResult(error=_too_large(self.max_response_bytes, response.status_code))
        classified = classify_http_response(
            response.status_code, raw, dict(response.headers), max_depth=self.max_json_depth
        )
        if classified.ok:
            return CallResult(data=classified.data, http_status=response.status_code)
        return CallResult(error=classified.error, http_status=response.status_code)

    async def _read_body(self, response: httpx.Response) -> bytes | None:
        """The body, or None as soon as it is known to exceed ``max_response_bytes``
        (from ``Content-Length``, else while it streams — decompressed size counted)."""
        limit = self.max_response_bytes
        declared = response.headers.get("content-length", "")
        if declared.isascii() and declared.isdigit() and (
                len(declared) > 18 or int(declared) > limit):
            return None
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.aiter_bytes():
            size += len(chunk)
            if size > limit:
                return None
            chunks.append(chunk)
        return b"".join(chunks)




def _without(headers: dict[str, str], replaced: dict[str, str]) -> dict[str, str]:
    """``headers`` less those ``replaced`` names (case-insensitively: one header sent)."""
    names = {name.lower() for name in replaced}
    return {k: v for k, v in headers.items() if k.lower() not in names}


def _too_large(limit: int, status: int | None) -> StepError:
    return StepError(
        category=ErrorCategory.INVALID_RESPONSE, code="RESPONSE_TOO_LARGE",
        message=f"the tool's reply is larger than {limit} bytes "
                f"(ORCH_MAX_RESPONSE_BYTES={limit}); it was not read further",
        source=ErrorSource.RESPONSE, retryable=False, request_sent=True, http_status=status,
    )


def _transport_error(category: ErrorCategory, code: str, message: str, *, sent: bool) -> CallResult:
    return CallResult(
        error=StepError(
            category=category, code=code, message=message, source=ErrorSource.TRANSPORT,
            retryable=True, request_sent=sent,
        )
    )


def _fits_signature(fn: Any, params: dict[str, Any]) -> bool:
    """Whether ``fn`` accepts ``params`` as keywords (checked only after a TypeError, to
    tell a call that never started from a tool that raised TypeError itself)."""
    try:
        inspect.signature(fn).bind(**params)
    except TypeError:
        return False
    except ValueError:  # no signature to read (some builtins): assume it was the call
        return False
    return True
