"""The tool wire protocol and the classification of everything a tool call can return.

Every HTTP tool should answer with a ``ToolResponse`` envelope; tools that don't are still
usable because :func:`classify_http_response` reads their status code and body. The
classification produces a :class:`StepError`, the one error shape the executor, the
defense layers, telemetry and the attempt history all share.
"""

from __future__ import annotations

import email.utils
import time
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import to_json

from orchestration._json import DEFAULT_MAX_DEPTH, UnreadableJSON, decode, is_limit, json_safe
from orchestration._text import clip, describe_validation_error

__all__ = [
    "HTTP_STATUS_FOR_CATEGORY",
    "MALFORMED_RESPONSE",
    "MAX_ERROR_BODY_CHARS",
    "MAX_RETRY_AFTER_S",
    "OUTCOME_UNKNOWN",
    "ClassifiedResponse",
    "ErrorCategory",
    "ErrorSource",
    "StepError",
    "ToolError",
    "ToolResponse",
    "category_for_status",
    "classify_http_response",
    "http_status_for_category",
    "parse_retry_after"
]


class ErrorCategory(StrEnum):
    """Why a call failed; decides which defense layer (if any) may act on it.

    The first five travel on the wire (tools set them). The rest are assigned by the
    client for failures that never produced a tool answer.
    """

    INPUT_ERROR = "INPUT_ERROR"
    NOT_FOUND = "NOT_FOUND"
    AUTH_ERROR = "AUTH_ERROR"
    RATE_LIMIT = "RATE_LIMIT"
    SERVICE_ERROR = "SERVICE_ERROR"
    # client-side classifications
    TIMEOUT = "TIMEOUT"
    CONNECTION_ERROR = "CONNECTION_ERROR"
    INVALID_RESPONSE = "INVALID_RESPONSE"
    VALIDATION_ERROR = "VALIDATION_ERROR"
    BINDING_ERROR = "BINDING_ERROR"
    INTERNAL_ERROR = "INTERNAL_ERROR"
    REJECTED = "REJECTED"  # a person rejected the call, or its approval expired
    BUDGET_EXCEEDED = "BUDGET_EXCEEDED"  # a run budget refused the call; nothing was sent
    CANCELLED = "CANCELLED"  # the run was cancelled while the attempt was in flight
    CIRCUIT_OPEN = "CIRCUIT_OPEN"  # the tool's circuit breaker is open: nothing was sent


class ErrorSource(StrEnum):
    """Where a failure came from. What a layer may conclude depends on it, so it is
    recorded explicitly when the error is made instead of being guessed from its code.

    ``envelope`` is a tool's own structured error (the ``ToolResponse`` envelope, or a
    :class:`~orchestration.errors.ToolFailed` raised by a Python tool): its category and
    ``retryable`` are the tool's word. ``http_status`` is an HTTP answer without the
    envelope, classified from its status code and body text. The others never reached
    a tool's judgement: ``binding`` and ``validation`` stopped before sending,
    ``transport`` got no answer, ``raised`` is a Python tool that crashed, ``response``
    a success answer whose data is unusable, ``engine`` a guard of the engine itself
    (a deadline, the re-send guard, an internal error).
    """

    ENVELOPE = "envelope"
    HTTP_STATUS = "http_status"
    BINDING = "binding"
    VALIDATION = "validation"
    TRANSPORT = "transport"
    RAISED = "raised"
    RESPONSE = "response"
    ENGINE = "engine"


HTTP_STATUS_FOR_CATEGORY: dict[ErrorCategory, int] = {
    ErrorCategory.INPUT_ERROR: 400,
    ErrorCategory.NOT_FOUND: 404,
    ErrorCategory.AUTH_ERROR: 401,
    ErrorCategory.RATE_LIMIT: 429,
    ErrorCategory.SERVICE_ERROR: 503,
}


def http_status_for_category(category: ErrorCategory) -> int:
    """The HTTP status a tool should send with an error of ``category`` (500 if unmapped)."""
    return HTTP_STATUS_FOR_CATEGORY.get(category, 500)


class ToolError(BaseModel):
    """A structured tool error, as tools put it on the wire."""

    model_config = ConfigDict(extra="ignore")

    code: str
    message: str
    category: ErrorCategory
    retryable: bool = False
    details: dict[str, str] = Field(default_factory=dict)


class ToolResponse(BaseModel):
    """The envelope every tool answer should use: ``success`` with ``data`` or ``error``."""

    model_config = ConfigDict(extra="ignore")

    success: bool
    data: Any = None
    error: ToolError | None = None


class StepError(BaseModel):
    """One failed attempt at a step, whatever failed: binding, validation, transport, tool.

    ``source`` says where it came from (see :class:`ErrorSource`); ``request_sent`` tells
    whether the tool may have acted on the request (it matters for non-idempotent
    capabilities); ``retry_after_s`` carries a rate limit's wait.
    """

    model_config = ConfigDict(extra="ignore")

    category: ErrorCategory
    code: str
    message: str
    source: ErrorSource = ErrorSource.ENVELOPE
    retryable: bool = False
    details: dict[str, Any] = Field(default_factory=dict)
    http_status: int | None = None
    request_sent: bool = True
    retry_after_s: float | None = None
    step_id: str | None = None
    tool: str | None = None
    capability: str | None = None

    @field_validator("code", "message")
    @classmethod
    def _recordable_text(cls, text: str) -> str:
        """An error's text comes from tools and their exceptions, and may not be valid
        Unicode (a file name Python decoded with ``surrogateescape`` holds ``\\udcff``):
        such a character is kept as its escape, so the error can be recorded and shown
        (a run store, ``to_dict()``, every sink write UTF-8)."""
        return str(json_safe(text, 0))

    @field_validator("details")
    @classmethod
    def _recordable_details(cls, details: dict[str, Any]) -> dict[str, Any]:
        try:
            to_json(details)
        except ValueError:  # text that is not valid Unicode, or a value JSON lacks
            return dict(json_safe(details, 10_000))
        return details

    def describe(self) -> str:
        """One line naming the step, the tool and the cause, for logs and exceptions."""
        where = ""
        if self.step_id:
            where = f"step {self.step_id!r}"
            if self.tool:
                where += f" ({self.tool}.{self.capability})"
            where += ": "
        status = f" (HTTP {self.http_status})" if self.http_status is not None else ""
        return f"{where}{self.category.value}/{self.code}{status}: {self.message}"

    def __str__(self) -> str:
        return self.describe()


OUTCOME_UNKNOWN = "OUTCOME_UNKNOWN"
"""The code of a call with a side effect whose outcome nobody knows: it was sent, the
process (or Temporal worker) sending it was lost before the answer came, and the
capability has no idempotency key, so it is never sent again. A step that ends with it
has status ``unknown``, and nothing that depends on it is sent."""


_STATUS_CATEGORY: dict[int, ErrorCategory] = {
    400: ErrorCategory.INPUT_ERROR,
    401: ErrorCategory.AUTH_ERROR,
    403: ErrorCategory.AUTH_ERROR,
    404: ErrorCategory.NOT_FOUND,
    409: ErrorCategory.INPUT_ERROR,
    422: ErrorCategory.INPUT_ERROR,
    429: ErrorCategory.RATE_LIMIT,
}

MAX_ERROR_BODY_CHARS = 2000


def category_for_status(status: int) -> ErrorCategory:
    """Category of a non-2xx status from a tool that does not use the envelope."""
    if status in _STATUS_CATEGORY:
        return _STATUS_CATEGORY[status]
    if status >= 500:
        return ErrorCategory.SERVICE_ERROR
    return ErrorCategory.INPUT_ERROR


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or HTTP date).

    Never raises: text that is neither form is None, a date in the past or NaN is 0, and
    an absurd value (``1e999``, year 9999) is held to :data:`MAX_RETRY_AFTER_S` so the
    record stays a finite JSON number — the retry policy caps every wait at
    ``retry_after_cap_s`` anyway.
    """
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
            seconds = when.timestamp() - (time.time() if now is None else now)
        except (TypeError, ValueError, IndexError, OverflowError, OSError):
            return None
    if seconds != seconds or seconds < 0:  # NaN or in the past
        return 0.0
    return min(seconds, MAX_RETRY_AFTER_S)


MAX_RETRY_AFTER_S = 1e9
"""The largest ``Retry-After`` recorded (about 31 years): "later than anyone waits"."""


class ClassifiedResponse(BaseModel):
    """What one HTTP answer meant: data on success, a :class:`StepError` otherwise."""

    ok: bool
    data: Any = None
    error: StepError | None = None


MALFORMED_RESPONSE = "MALFORMED_RESPONSE"
"""The code of an answer the engine cannot read as the protocol says: an envelope pydantic
rejects, ``success: false`` without an error, JSON nested too deep or with non-finite
numbers."""


def _looks_like_envelope(body: Any) -> bool:
    """A dict with a boolean ``success`` that carries ``data`` or ``error`` — or says
    ``success: false``, which no tool says of a call that worked."""
    return isinstance(body, dict) and isinstance(body.get("success"), bool) and (
        "data" in body or "error" in body or body["success"] is False
    )


def classify_http_response(
    status: int,
    body: bytes,
    headers: dict[str, str] | None = None,
    *,
    max_depth: int = DEFAULT_MAX_DEPTH,
) -> ClassifiedResponse:
    """Turn a tool's HTTP answer into data or a :class:`StepError`; never raises.

    Envelope answers are trusted for category and retryability (the HTTP status only fills
    gaps); other answers are classified by status code, with the body text as message.
    A 2xx whose body is not JSON is an ``INVALID_RESPONSE``: the tool returned garbage.
    Anything malformed — an envelope that does not validate, ``success: false`` without
    an error, JSON nested deeper than ``max_depth`` — is a ``MALFORMED_RESPONSE`` with the
    body clipped into the message; its category comes from the status when there is one
    to go by (a malformed 429 is still a rate limit, and is retried as one).
    """
    headers = {k.lower(): v for k, v in (headers or {}).items()}
    retry_after = parse_retry_after(headers.get("retry-after"))
    text = body.decode("utf-8", errors="replace")
    parsed: Any = None
    is_json = False
    if text.strip():
        try:
            parsed, is_json = decode(text, max_depth=max_depth), True
        except UnreadableJSON as exc:
            if is_limit(exc) and 200 <= status < 300:
                return _malformed(status, text, str(exc), retry_after)

    if _looks_like_envelope(parsed):
        try:
            envelope = ToolResponse.model_validate(parsed)
        except ValidationError as exc:
            problem = "the envelope is invalid: " + describe_validation_error(exc, root="body")
            return _malformed(status, text, problem, retry_after or _salvaged_retry_after(parsed))
        if envelope.success and 200 <= status < 300:
            return ClassifiedResponse(ok=True, data=envelope.data)
        if envelope.error is not None:
            err = envelope.error
            ra = retry_after
            if ra is None and "retry_after" in err.details:
                ra = parse_retry_after(str(err.details["retry_after"]))
            return ClassifiedResponse(
                ok=False,
                error=StepError(
                    category=err.category,
                    code=err.code,
                    message=err.message,
                    retryable=err.retryable,
                    details=dict(err.details),
                    http_status=status,
                    retry_after_s=ra,
                ),
            )
        if not envelope.success:
            return _malformed(status, text, "success is false but the envelope has no error",
                              retry_after)
        # success flag and status disagree, no error object: fall through to status rules

    if 200 <= status < 300:
        if not is_json:
            return ClassifiedResponse(
                ok=False,
                error=StepError(
                    category=ErrorCategory.INVALID_RESPONSE,
                    code="NON_JSON_RESPONSE",
                    source=ErrorSource.RESPONSE,
                    message=f"tool answered HTTP {status} with a body that is not JSON: "
                    f"{clip(text, 200)!r}",
                    retryable=False,
                    http_status=status,
                ),
            )
        return ClassifiedResponse(ok=True, data=parsed)

    category = category_for_status(status)
    message = clip(text.strip(), MAX_ERROR_BODY_CHARS) or f"HTTP {status} with an empty body"
    return ClassifiedResponse(
        ok=False,
        error=StepError(
            category=category,
            code=f"HTTP_{status}",
            message=message,
            source=ErrorSource.HTTP_STATUS,
            retryable=_status_retryable(category),
            http_status=status,
            retry_after_s=retry_after,
        ),
    )


def _status_retryable(category: ErrorCategory) -> bool:
    return category in (ErrorCategory.RATE_LIMIT, ErrorCategory.SERVICE_ERROR,
                        ErrorCategory.INPUT_ERROR, ErrorCategory.NOT_FOUND)


def _malformed(
    status: int, text: str, problem: str, retry_after: float | None
) -> ClassifiedResponse:
    """A ``MALFORMED_RESPONSE``: on a 2xx an unusable answer (``INVALID_RESPONSE``, not
    retried); otherwise classified from the status as if the body were plain text (it
    cannot be read as the tool's own word), so a 429 waits and a 503 is a service error."""
    ok_status = 200 <= status < 300
    category = ErrorCategory.INVALID_RESPONSE if ok_status else category_for_status(status)
    return ClassifiedResponse(
        ok=False,
        error=StepError(
            category=category,
            code=MALFORMED_RESPONSE,
            message=f"HTTP {status}: malformed tool answer ({problem}); body: "
                    f"{clip(text.strip(), MAX_MALFORMED_BODY_CHARS)}",
            source=ErrorSource.RESPONSE if ok_status else ErrorSource.HTTP_STATUS,
            retryable=False if ok_status else _status_retryable(category),
            details={"problem": clip(problem, 500)},
            http_status=status,
            retry_after_s=retry_after,
        ),
    )


MAX_MALFORMED_BODY_CHARS = 500


def _salvaged_retry_after(parsed: Any) -> float | None:
    """``error.details.retry_after`` of an envelope that did not validate, read leniently
    (a number where the protocol wants text)."""
    error = parsed.get("error") if isinstance(parsed, dict) else None
    details = error.get("details") if isinstance(error, dict) else None
    value = details.get("retry_after") if isinstance(details, dict) else None
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    return parse_retry_after(str(value))
