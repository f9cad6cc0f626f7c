"""One shape for every error the API answers: ``{"error": {"code", "message", "details"}}``.

Handlers raise :class:`ApiError`; the exception handlers installed by ``create_app`` turn
it — and Starlette's own 404/405, and anything unexpected (500, logged) — into that
shape, so a client parses one thing whatever went wrong. Codes are stable snake_case
words; messages say what was wrong and what to do.
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import ValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

__all__ = ["ApiError", "error_response", "field_errors", "handle_api_error",
           "handle_http_exception", "handle_unexpected"]

log = logging.getLogger("dagwright.serve")


class ApiError(Exception):
    """An answer other than success: HTTP ``status``, a stable ``code``, a message that
    says what to do, and ``details`` (always an object)."""

    def __init__(self, status: int, code: str, message: str, *,
                 details: dict[str, Any] | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details or {}
        self.headers = headers or {}


def error_response(status: int, code: str, message: str, details: dict[str, Any] | None = None,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message, "details": details or {}}},
                        status_code=status, headers=headers)


def field_errors(exc: ValidationError, prefix: str = "") -> ApiError:
    """A 422 naming every field pydantic rejected (``plan.steps[0].id``), and why."""
    fields = []
    for item in exc.errors(include_url=False, include_input=False):
        path = prefix
        for part in item["loc"]:
            path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
        fields.append({"field": path or "(body)", "problem": item["msg"]})
    summary = "; ".join(f"{f['field']}: {f['problem']}" for f in fields)
    return ApiError(422, "invalid_request", f"invalid request: {summary}",
                    details={"fields": fields})


async def handle_api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_response(exc.status, exc.code, exc.message, exc.details, exc.headers)


_HTTP_CODES = {404: "not_found", 405: "method_not_allowed"}


async def handle_http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    message = {404: f"no such endpoint: {request.method} {request.url.path}; the API is under "
                    "/v1 (see docs/serve.md)",
               405: f"{request.method} is not allowed on {request.url.path}"}.get(
        exc.status_code, str(exc.detail))
    return error_response(exc.status_code, code, message,
                          headers=dict(exc.headers) if exc.headers else None)


async def handle_unexpected(request: Request, exc: Exception) -> Response:
    log.exception("unexpected error on %s %s", request.method, request.url.path)
    return error_response(500, "internal_error",
                          f"the server failed on this request ({type(exc).__name__}); it is "
                          "logged on the server")
