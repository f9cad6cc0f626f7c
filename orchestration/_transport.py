"""Calling a capability once: over HTTP with one pooled client, in-process, or through
the invoker of a source (MCP server, OpenAPI spec).

One call, no retries: deciding whether to try again is the executor's job. Every way a
call can go wrong (refused, timed out, dropped, garbage, an error envelope, a raised
``ToolFailed``, a crashing Python tool) comes back as a classified :class:`StepError`;
nothing raises past this module except cancellation.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
from dataclasses import dataclass
from typing import Any

import httpx

from orchestration.capability import Capability
from orchestration.errors import ToolFailed
from orchestration.protocol import ErrorCategory, ErrorSource, StepError, classify_http_response


@dataclass
class CallResult:
    """The outcome of one call: ``data`` when ``error`` is None; ``http_status`` the status
    code of an HTTP tool's answer (on success too, for the HTTP client span)."""

    data: Any = None
    error: StepError | None = None
    latency_s: float = 0.0
    http_status: int | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


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
            out[key] = json.dumps(value)
    return out


class ToolTransport:
    """Sends capability calls. One instance per event loop (it owns an httpx pool)."""

    def __init__(
        self,
        http_client: httpx.AsyncClient | None = None,
        *,
        max_connections: int = 100,
    ) -> None:
        self._owns_client = http_client is None
        self._client = http_client
        self._max_connections = max_connections

    def _http(self) -> httpx.AsyncClient:
        """The pooled client, created on the first HTTP call: building it (its TLS
        context above all) costs ~20 ms, wasted on runs whose tools are all in-process."""
        if self._client is None:
            limits = httpx.Limits(
                max_connections=self._max_connections,
                max_keepalive_connections=self._max_connections,
            )
            self._client = httpx.AsyncClient(limits=limits, follow_redirects=False)
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
    ) -> CallResult:
        """Call ``capability`` once with ``params``; never raises except on cancellation."""
        started = time.perf_counter()
        if capability.invoker is not None:
            result = await self._call_invoker(capability, params, timeout_s, headers or {})
        elif capability.function is not None:
            result = await self._call_function(capability, params, timeout_s)
        else:
            result = await self._call_http(capability, params, timeout_s, headers or {})
        result.latency_s = time.perf_counter() - started
        return result

    async def _call_invoker(
        self, capability: Capability, params: dict[str, Any], timeout_s: float,
        headers: dict[str, str],
    ) -> CallResult:
        """A source's own call (MCP, OpenAPI); it classifies its failures itself, and
        anything it lets escape is reported rather than raised."""
        assert capability.invoker is not None
        try:
            return await capability.invoker.call(params, timeout_s=timeout_s, headers=headers)
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
        self, capability: Capability, params: dict[str, Any], timeout_s: float
    ) -> CallResult:
        fn = capability.function
        assert fn is not None
        try:
            if capability.run_in_thread:
                async with asyncio.timeout(timeout_s):
                    value = await asyncio.to_thread(fn, **params)
            else:
                # a sync function runs on the loop and cannot be interrupted, so only an
                # awaitable result gets a timer
                value = fn(**params)
                if inspect.isawaitable(value):
                    async with asyncio.timeout(timeout_s):
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
        try:
            json.dumps(value)
        except (TypeError, ValueError) as exc:
            return CallResult(
                error=StepError(
                    category=ErrorCategory.INVALID_RESPONSE,
                    code="NOT_JSON_SERIALISABLE",
                    message=f"Python tool returned a value that is not JSON: {exc}",
                    source=ErrorSource.RESPONSE,
                )
            )
        return CallResult(data=value)

    async def _call_http(
        self,
        capability: Capability,
        params: dict[str, Any],
        timeout_s: float,
        extra_headers: dict[str, str],
    ) -> CallResult:
        assert capability.url is not None
        headers = {**capability.headers, **extra_headers}
        method = capability.method
        kwargs: dict[str, Any] = {"headers": headers, "timeout": timeout_s}
        if method in ("GET", "HEAD", "DELETE"):
            kwargs["params"] = _query_params(params)
        else:
            kwargs["json"] = params
        try:
            response = await self._http().request(method, capability.url, **kwargs)
        except httpx.ConnectTimeout:
            return _transport_error(
                ErrorCategory.TIMEOUT, "CONNECT_TIMEOUT",
                f"could not connect to {capability.url} within {timeout_s:g}s", sent=False)
        except httpx.PoolTimeout:
            return _transport_error(
                ErrorCategory.TIMEOUT, "POOL_TIMEOUT",
                "no free connection in the pool within the timeout", sent=False)
        except httpx.TimeoutException:
            return _transport_error(
                ErrorCategory.TIMEOUT, "READ_TIMEOUT",
                f"{capability.url} did not answer within {timeout_s:g}s", sent=True)
        except httpx.ConnectError as exc:
            return _transport_error(
                ErrorCategory.CONNECTION_ERROR, "CONNECTION_REFUSED",
                f"cannot connect to {capability.url}: {exc}", sent=False)
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
            return _transport_error(
                ErrorCategory.CONNECTION_ERROR, "CONNECTION_DROPPED",
                f"{capability.url} dropped the connection: {exc or type(exc).__name__}",
                sent=True)
        except httpx.HTTPError as exc:
            return _transport_error(
                ErrorCategory.CONNECTION_ERROR, "TRANSPORT_ERROR",
                f"{type(exc).__name__}: {exc}", sent=True)
        classified = classify_http_response(
            response.status_code, response.content, dict(response.headers)
        )
        if classified.ok:
            return CallResult(data=classified.data, http_status=response.status_code)
        return CallResult(error=classified.error, http_status=response.status_code)


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
