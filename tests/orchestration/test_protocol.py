"""Classification of tool answers, with and without the envelope."""

from __future__ import annotations

import json

import pytest
from prometheus_client import CollectorRegistry

from orchestration import (
    Catalog,
    ErrorCategory,
    Orchestrator,
    OrchestratorConfig,
    ScriptedLLM,
    http_status_for_category,
)
from orchestration.clock import ManualClock
from orchestration.protocol import classify_http_response, parse_retry_after
from tests.support.hostile_tools import HostileTool, Reply


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


# --- malformed envelopes: typed, recorded, retried when the status says so ---------------

MALFORMED_ENVELOPES = {
    "missing message": (400, {"success": False, "error": {"code": "BAD", "category": "INPUT_ERROR"}}),
    "unknown category": (503, {"success": False, "error": {
        "code": "X", "message": "m", "category": "WEIRD"}}),
    "error is a string": (500, {"success": False, "error": "boom"}),
    "details not strings": (400, {"success": False, "error": {
        "code": "X", "message": "m", "category": "INPUT_ERROR", "details": {"n": [1, 2]}}}),
    "success without error at 200": (200, {"success": False}),
    "success false with data at 200": (200, {"success": False, "data": {"x": 1}}),
}


@pytest.mark.parametrize("case", list(MALFORMED_ENVELOPES))
def test_a_malformed_envelope_is_a_typed_failure_with_an_attempt(
    case: str, hostile_tool: HostileTool,
) -> None:
    status, body = MALFORMED_ENVELOPES[case]
    hostile_tool.always("/m", Reply(status, body))
    catalog = Catalog()
    catalog.add_http(tool="t", capability="m", url=hostile_tool.url("/m"))
    plan = {"steps": [{"id": "a", "tool": "t", "capability": "m"}]}
    result = Orchestrator(
        catalog=catalog, llm=ScriptedLLM([]), registry=CollectorRegistry(),
        config=OrchestratorConfig(retry_max_attempts=1, synthesis_enabled=False,
                                  validation_feedback_enabled=False,
                                  semantic_retry_enabled=False),
    ).run("q", plan=plan)
    step = result.steps["a"]
    assert step.status == "failed" and step.error is not None
    assert step.error.code == "MALFORMED_RESPONSE"
    assert step.error.http_status == status
    assert json.dumps(body)[:40] in step.error.message  # the raw body, clipped
    assert [a.outcome for a in step.attempts] == ["failed"]
    assert step.attempts[0].error is not None and step.attempts[0].error.code == "MALFORMED_RESPONSE"


def test_a_malformed_429_is_still_a_rate_limit_and_is_retried(hostile_tool: HostileTool) -> None:
    hostile_tool.queue("/r", Reply(429, {"success": False, "error": {
        "code": "SLOW", "message": "slow down", "category": "RATE_LIMIT", "retryable": True,
        "details": {"retry_after": 0}}}))
    hostile_tool.queue("/r", Reply(200, {"success": True, "data": {"ok": 1}}))
    catalog = Catalog()
    catalog.add_http(tool="t", capability="r", url=hostile_tool.url("/r"))
    plan = {"steps": [{"id": "a", "tool": "t", "capability": "r"}]}
    result = Orchestrator(catalog=catalog, llm=ScriptedLLM([]), registry=CollectorRegistry(),
                          config=OrchestratorConfig(synthesis_enabled=False),
                          clock=ManualClock()).run("q", plan=plan)
    step = result.steps["a"]
    assert step.status == "succeeded", result.error
    assert step.output == {"ok": 1}
    first = step.attempts[0].error
    assert first is not None and first.category is ErrorCategory.RATE_LIMIT
    assert first.code == "MALFORMED_RESPONSE" and first.retry_after_s == 0.0
    assert len(hostile_tool.requests_to("/r")) == 2


def test_classification_never_raises_on_odd_envelopes() -> None:
    for body in (b'{"success": false, "error": null}', b'{"success": true, "error": 5}',
                 b'{"success": false, "error": {"code": 1, "message": [], "category": 2}}',
                 b'{"success": false, "error": {"details": "x"}}', b"[" * 5000, b"\xff\xfe"):
        for status in (200, 400, 429, 503):
            res = classify_http_response(status, body, {"Retry-After": "1e999"})
            assert res.ok or res.error is not None
