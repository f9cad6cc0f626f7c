"""Classification of tool answers, with and without the envelope."""

from __future__ import annotations

import json

import pytest

from orchestration import ErrorCategory, http_status_for_category
from orchestration.protocol import classify_http_response, parse_retry_after


def envelope_error(category: str, retryable: bool, **details: str) -> bytes:
    return json.dumps({"success": False, "error": {
        "code": "X", "message": "m", "category": category, "retryable": retryable,
        "details": details}}).encode()


def test_status_mapping_matches_the_protocol() -> None:
    assert {c.value: http_status_for_category(c) for c in list(ErrorCategory)[:5]} == {
        "INPUT_ERROR": 400, "NOT_FOUND": 404, "AUTH_ERROR": 401, "RATE_LIMIT": 429,
        "SERVICE_ERROR": 503}


def test_envelope_success_and_error() -> None:
    ok = classify_http_response(200, b'{"success": true, "data": {"x": 1}}')
    assert ok.ok and ok.data == {"x": 1}
    bad = classify_http_response(503, envelope_error("SERVICE_ERROR", False, hint="h"))
    assert not bad.ok and bad.error is not None
    assert bad.error.category == ErrorCategory.SERVICE_ERROR
    assert bad.error.retryable is False and bad.error.http_status == 503
    assert bad.error.details == {"hint": "h"}


def test_envelope_retry_after_from_details_or_header() -> None:
    from_details = classify_http_response(429, envelope_error("RATE_LIMIT", True, retry_after="7"))
    assert from_details.error is not None and from_details.error.retry_after_s == 7.0
    from_header = classify_http_response(
        429, envelope_error("RATE_LIMIT", True), {"Retry-After": "3"})
    assert from_header.error is not None and from_header.error.retry_after_s == 3.0


@pytest.mark.parametrize(
    ("status", "category"),
    [(400, "INPUT_ERROR"), (422, "INPUT_ERROR"), (401, "AUTH_ERROR"), (403, "AUTH_ERROR"),
     (404, "NOT_FOUND"), (429, "RATE_LIMIT"), (500, "SERVICE_ERROR"), (502, "SERVICE_ERROR")],
)
def test_non_envelope_classified_by_status(status: int, category: str) -> None:
    res = classify_http_response(status, b"plain text problem")
    assert res.error is not None and res.error.category.value == category
    assert res.error.message == "plain text problem" and res.error.http_status == status


def test_plain_json_success_and_garbage() -> None:
    assert classify_http_response(200, b'[1, 2]').data == [1, 2]
    garbage = classify_http_response(200, b"<html>oops</html>")
    assert garbage.error is not None
    assert garbage.error.category == ErrorCategory.INVALID_RESPONSE
    assert "<html>oops</html>" in garbage.error.message


def test_retry_after_forms() -> None:
    assert parse_retry_after("2.5") == 2.5
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == 10.0
    assert parse_retry_after("soon") is None
    assert parse_retry_after(None) is None
