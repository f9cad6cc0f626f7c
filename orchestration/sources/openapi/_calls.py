"""Calling an OpenAPI operation: its request sent on the source's pooled client, its
answer classified.

One :class:`OperationClient` per source sends every request of its operations, on the
catalog's source runtime loop (its single HTTP pool serves every run, loop and thread).
The source's credentials are applied (OAuth2 tokens fetched when needed), unless the run
gave its own for this tool (``credentials=``): those replace them, and nothing of the
document's is sent beside them. The answer is read as a plain REST answer
(:func:`classify_answer`): a 2xx body is the output, an error status is classified by the
status table in docs/tools.md, a transport failure by where it happened.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import httpx

from orchestration._json import (
    MAX_DEPTH_CEILING,
    UnreadableJSON,
    decode,
    depth_problem,
    is_limit,
)
from orchestration._transport import CallResult
from orchestration.protocol import (
    MALFORMED_RESPONSE,
    ErrorCategory,
    ErrorSource,
    StepError,
    classify_http_response,
)
from orchestration.sources.openapi._requests import JSON_MEDIA, Operation, RequestError
from orchestration.sources.openapi._security import Credentials, Scheme

__all__ = ["Endpoint", "OperationClient", "classify_answer"]


class Endpoint(Protocol):
    """What sending a request needs of its source, as the document was last loaded."""

    label: str
    base_url: str
    headers: dict[str, str]
    credentials: Credentials | None
    schemes: dict[str, Scheme]
    default_security: list[list[str]]
    upload_dirs: list[Path]


class OperationClient:
    """The HTTP client of one source's operations: made on the loop that first sends (the
    runtime loop), made again if asked from another loop."""

    def __init__(self, endpoint: Endpoint) -> None:
        self._endpoint = endpoint
        self._client: httpx.AsyncClient | None = None
        self._client_loop: asyncio.AbstractEventLoop | None = None

    def _http(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:
            self._client = httpx.AsyncClient(follow_redirects=False)
            self._client_loop = loop
        return self._client

    async def send(self, operation: Operation, params: dict[str, Any], timeout_s: float,
                   extra_headers: Mapping[str, str],
                   credentials: Mapping[str, str] | None = None) -> CallResult:
        """One request on the runtime loop, its answer or failure classified.

        ``credentials``: a run's own headers for this source, sent in place of the
        source's credentials (none of those is applied or fetched for this request)."""
        endpoint = self._endpoint
        try:
            request = operation.render(params, upload_dirs=endpoint.upload_dirs)
        except RequestError as exc:
            return CallResult(error=StepError(
                category=ErrorCategory.INPUT_ERROR, code="BAD_ARGUMENTS", message=str(exc),
                source=ErrorSource.VALIDATION, retryable=True, request_sent=False))
        alternatives = (operation.security if operation.security is not None
                        else endpoint.default_security)
        headers = {**endpoint.headers, **dict(extra_headers), **request.headers}
        if credentials:
            replaced = {name.lower() for name in credentials}
            headers = {k: v for k, v in headers.items() if k.lower() not in replaced}
            headers.update(credentials)
        elif endpoint.credentials is not None:
            try:
                await endpoint.credentials.fetch_tokens(
                    endpoint.schemes, endpoint.credentials.usable(endpoint.schemes, alternatives),
                    self._http(), timeout_s)
            except (httpx.HTTPError, ValueError) as exc:
                return CallResult(error=StepError(
                    category=ErrorCategory.AUTH_ERROR, code="OAUTH_TOKEN",
                    source=ErrorSource.TRANSPORT, request_sent=False,
                    message=f"{endpoint.label}: no OAuth2 token: {type(exc).__name__}: {exc}"))
            endpoint.credentials.apply(endpoint.schemes, alternatives, headers, request.query,
                                   request.cookies)
        if request.cookies:
            headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in request.cookies.items())
        content = dict(request.content)
        headers.update(content.pop("headers", {}))
        url = endpoint.base_url + request.path
        try:
            response = await self._http().request(
                operation.method, url, params=list(request.query), headers=headers,
                timeout=timeout_s, **content)
        except (httpx.ConnectTimeout, httpx.PoolTimeout):
            return _fault(ErrorCategory.TIMEOUT, "CONNECT_TIMEOUT",
                          f"could not connect to {url} within {timeout_s:g}s", sent=False)
        except httpx.TimeoutException:
            return _fault(ErrorCategory.TIMEOUT, "READ_TIMEOUT",
                          f"{url} did not answer within {timeout_s:g}s", sent=True)
        except httpx.ConnectError as exc:
            return _fault(ErrorCategory.CONNECTION_ERROR, "CONNECTION_REFUSED",
                          f"cannot connect to {url}: {exc}", sent=False)
        except httpx.HTTPError as exc:
            return _fault(ErrorCategory.CONNECTION_ERROR, "CONNECTION_DROPPED",
                          f"{url}: {type(exc).__name__}: {exc}", sent=True)
        result = classify_answer(response.status_code, response.content, dict(response.headers))
        if response.status_code == 401 and endpoint.credentials is not None and not credentials:
            endpoint.credentials.forget_tokens()  # a revoked or expired token: fetch anew next time
        if response.status_code in (401, 403) and result.error is not None and not credentials:
            hint = self._auth_hint(alternatives)
            if hint:
                result = CallResult(error=result.error.model_copy(
                    update={"message": f"{result.error.message} ({hint})"}))
        return result

    def _auth_hint(self, alternatives: list[list[str]]) -> str:
        endpoint = self._endpoint
        names = sorted({n for alt in alternatives for n in alt if n in endpoint.schemes})
        have = endpoint.credentials.names() if endpoint.credentials is not None else set()
        missing = [n for n in names if n not in have]
        if not missing:
            return ""
        return (f"the operation takes security scheme(s) {', '.join(missing)}; give them as "
                "credentials= of the OpenAPI source or in ORCH_OPENAPI_CREDENTIALS")

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None and self._client_loop is asyncio.get_running_loop():
            await client.aclose()
        self._client_loop = None


def _fault(category: ErrorCategory, code: str, message: str, *, sent: bool) -> CallResult:
    return CallResult(error=StepError(category=category, code=code, message=message,
                                      source=ErrorSource.TRANSPORT, retryable=True,
                                      request_sent=sent))


def classify_answer(status: int, body: bytes, headers: dict[str, str]) -> CallResult:
    """A plain REST answer: 2xx → its JSON (or text, or None when empty); an error status
    → the protocol's status table, with a 400/422 body kept in ``details["body"]``.

    The body is read by the engine's bounded decoder, as an HTTP tool's is: a 2xx body
    holding what JSON cannot carry on (non-finite numbers, a lone surrogate, nesting past
    the deepest ``ORCH_MAX_JSON_DEPTH`` allows) is a ``MALFORMED_RESPONSE``; the
    transport checks the configured depth and size of what is read."""
    content_type = {k.lower(): v for k, v in headers.items()}.get("content-type", "")
    text = body.decode("utf-8", errors="replace")
    parsed: Any = None
    is_json = False
    if text.strip():
        try:
            parsed, is_json = decode(text, max_depth=MAX_DEPTH_CEILING), True
        except UnreadableJSON as exc:
            if is_limit(exc) and 200 <= status < 300:
                problem = (f"JSON nested deeper than {MAX_DEPTH_CEILING} levels, the most "
                           "ORCH_MAX_JSON_DEPTH allows"
                           if str(exc) == depth_problem(MAX_DEPTH_CEILING) else str(exc))
                return CallResult(error=StepError(
                    category=ErrorCategory.INVALID_RESPONSE, code=MALFORMED_RESPONSE,
                    source=ErrorSource.RESPONSE, http_status=status,
                    message=f"HTTP {status}: malformed answer ({problem}): {text[:200]!r}"))
    if 200 <= status < 300:
        if not text.strip():
            return CallResult(data=None)
        if is_json:
            return CallResult(data=parsed)
        if JSON_MEDIA.match(content_type) and "*" not in content_type:
            return CallResult(error=StepError(
                category=ErrorCategory.INVALID_RESPONSE, code="NON_JSON_RESPONSE",
                source=ErrorSource.RESPONSE,
                message=f"HTTP {status} says JSON but the body is not: {text[:200]!r}",
                http_status=status))
        return CallResult(data=text)
    classified = classify_http_response(status, body, headers)
    error = classified.error
    assert error is not None
    if status in (400, 422) and is_json:
        error = error.model_copy(update={"details": {**error.details, "body": parsed}})
    return CallResult(error=error)
