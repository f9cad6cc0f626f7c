"""The HTTP API through httpx against a real uvicorn on 127.0.0.1.

Tools are the loopback side-effect server (tests/support/side_effects.py): it counts
what it executed and can hold a payment in flight, which is how these tests catch a run
mid-way. No LLM is called: plans come with the requests.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.orchestration.server.live import LiveServer, live_server, make_orchestrator, wait_for
from tests.orchestration.test_approvals import QUERY, approval_catalog, plan
from tests.support.side_effects import SideEffectTools


@pytest.fixture
def server(tools: SideEffectTools) -> Iterator[LiveServer]:
    with live_server(make_orchestrator(tools.catalog(), serve_max_runs=2)) as live:
        yield live


@pytest.fixture
def approvals(tools: SideEffectTools) -> Iterator[LiveServer]:
    """A server whose bank.pay needs a person's approval."""
    with live_server(make_orchestrator(approval_catalog(tools))) as live:
        yield live


def client(server: LiveServer, **options: Any) -> httpx.Client:
    return httpx.Client(base_url=server.url, timeout=15, **options)


def status_of(http: httpx.Client, run_id: str) -> str:
    return str(http.get(f"/v1/runs/{run_id}").json()["status"])


def error(response: httpx.Response) -> dict[str, Any]:
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "details"}
    return dict(body["error"])


def sse_events(response: httpx.Response) -> Iterator[dict[str, Any]]:
    """Parse a text/event-stream into {id, event, data} dicts (comments skipped)."""
    fields: dict[str, Any] = {}
    for line in response.iter_lines():
        if not line:
            if "data" in fields:
                yield {**fields, "data": json.loads(fields["data"])}
            fields = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            fields[name] = value.removeprefix(" ")


# --- submitting and reading -------------------------------------------------------------
def test_a_run_is_accepted_at_once_then_polled_to_its_end(
    server: LiveServer, tools: SideEffectTools,
) -> None:
    tools.hold.set()
    with client(server) as http:
        response = http.post("/v1/runs", json={"query": QUERY, "plan": plan(), "run_id": "poll-1"})
        assert response.status_code == 202
        assert response.json()["run_id"] == "poll-1" and response.json()["status"] == "running"
        assert response.headers["location"] == "/v1/runs/poll-1"
        assert tools.arrived.wait(10)  # the payment is in flight, the request long answered
        live = http.get("/v1/runs/poll-1").json()
        assert live["status"] == "running" and live["steps"]["quote"]["status"] == "succeeded"
        assert "pay" not in live["steps"]

        tools.release.set()
        wait_for(lambda: status_of(http, "poll-1") == "succeeded")
        result = http.get("/v1/runs/poll-1").json()
        assert result["steps"]["receipt"]["status"] == "succeeded"
        assert result["steps"]["pay"]["attempts"][0]["params"] == {"amount": 250.0, "to": "broker"}
        listed = http.get("/v1/runs", params={"status": "succeeded", "limit": 5}).json()["runs"]
        assert [r["run_id"] for r in listed] == ["poll-1"]
        assert http.get("/v1/runs", params={"status": "failed"}).json()["runs"] == []


def test_wait_returns_the_whole_result_and_a_run_id_never_runs_twice(
    server: LiveServer, tools: SideEffectTools,
) -> None:
    body = {"query": QUERY, "plan": plan(), "run_id": "once", "wait": True}
    with client(server) as http:
        first = http.post("/v1/runs", json=body)
        assert first.status_code == 200 and first.json()["status"] == "succeeded"
        assert first.json()["steps"]["pay"]["output"] == {"paid": 250.0, "number": 1}
        again = http.post("/v1/runs", json=body)  # the stored result, nothing sent again
        assert again.status_code == 200 and again.json() == first.json()
        plain = http.post("/v1/runs", json={**body, "wait": False})
        assert (plain.status_code, plain.json()["status"]) == (200, "succeeded")
        conflict = http.post("/v1/runs", json={**body, "query": "another query"})
        assert conflict.status_code == 409 and error(conflict)["code"] == "run_id_conflict"
        other = plan()
        other["steps"][0]["params"] = {"symbol": "AAPL"}
        replanned = http.post("/v1/runs", json={**body, "plan": other})
        assert replanned.status_code == 409 and error(replanned)["code"] == "run_id_conflict"
        assert "another plan" in error(replanned)["message"]
        no_plan = http.post("/v1/runs", json={k: v for k, v in body.items() if k != "plan"})
        assert no_plan.status_code == 200 and no_plan.json()["run_id"] == "once"
    assert tools.executed["/pay"] == 1


def test_the_same_run_id_while_it_runs_is_the_same_run(
    server: LiveServer, tools: SideEffectTools,
) -> None:
    tools.hold.set()
    body = {"query": QUERY, "plan": plan(), "run_id": "dup"}
    with client(server) as http:
        assert http.post("/v1/runs", json=body).status_code == 202
        assert tools.arrived.wait(10)
        second = http.post("/v1/runs", json=body)
        assert (second.status_code, second.json()["status"]) == (202, "running")
        tools.release.set()
        wait_for(lambda: status_of(http, "dup") == "succeeded")
    assert tools.executed["/pay"] == 1 and tools.executed["/receipt"] == 1


def test_unknown_runs_and_endpoints_are_404_in_the_error_shape(server: LiveServer) -> None:
    with client(server) as http:
        missing = http.get("/v1/runs/nope")
        assert missing.status_code == 404 and error(missing)["code"] == "run_not_found"
        assert error(http.get("/v1/nothing-here"))["code"] == "not_found"
        wrong = http.delete("/v1/runs")
        assert wrong.status_code == 405 and error(wrong)["code"] == "method_not_allowed"
        assert http.get("/v1/runs/nope/events").status_code == 404
        assert http.post("/v1/runs/nope/cancel").status_code == 404
        decision = http.post("/v1/runs/nope/approvals/pay", json={"approved": True})
        assert decision.status_code == 404


# --- bad input -------------------------------------------------------------------------
@pytest.mark.parametrize(("body", "field"), [
    ({"plan": {"steps": []}}, "query"),
    ({"query": 42}, "query"),
    ({"query": "q", "wait": "yes"}, "wait"),
    ({"query": "q", "run_id": "no spaces allowed"}, "run_id"),
    ({"query": "q", "priority": 1}, "priority"),
    ({"query": "q", "plan": {"steps": [{"id": "a", "tool": "stocks"}]}}, "plan.steps[0].capability"),
])
def test_a_wrong_field_is_a_422_naming_it(server: LiveServer, body: dict[str, Any], field: str) -> None:
    with client(server) as http:
        response = http.post("/v1/runs", json=body)
    assert response.status_code == 422
    problem = error(response)
    assert field in [f["field"] for f in problem["details"]["fields"]]
    assert field in problem["message"]


def test_bad_json_a_plan_that_cannot_run_and_the_wrong_media_type(
    server: LiveServer, tools: SideEffectTools,
) -> None:
    with client(server) as http:
        broken = http.post("/v1/runs", content=b'{"query": ', headers={"Content-Type": "application/json"})
        assert broken.status_code == 422 and error(broken)["code"] == "invalid_json"
        assert "not valid JSON" in error(broken)["message"]
        # nested past ORCH_MAX_JSON_DEPTH (990 levels would be a RecursionError in a
        # plain decoder or in validation): the same 422 shape, naming the bound
        for deep in (b'{"query": "q", "plan": ' + b"[" * 990 + b"]" * 990 + b"}",
                     b'{"approved": true, "params": {"a": ' + b"{\"b\": " * 995 + b"1" + b"}" * 997):
            for path in ("/v1/runs", "/v1/runs/nope/approvals/pay"):
                too_deep = http.post(path, content=deep, headers={"Content-Type": "application/json"})
                assert too_deep.status_code == 422, too_deep.text
                assert error(too_deep)["code"] == "invalid_json"
                assert "ORCH_MAX_JSON_DEPTH" in error(too_deep)["message"]
        nan = http.post("/v1/runs", content=b'{"query": "q", "x": NaN}',
                        headers={"Content-Type": "application/json"})
        assert nan.status_code == 422 and error(nan)["code"] == "invalid_json"
        listed = http.post("/v1/runs", json=["query"])
        assert listed.status_code == 422 and "JSON object" in error(listed)["message"]
        bad_plan = {"steps": [{"id": "a", "tool": "stocks", "capability": "nope", "params": {}}]}
        refused = http.post("/v1/runs", json={"query": "q", "plan": bad_plan})
        assert refused.status_code == 422 and error(refused)["code"] == "invalid_plan"
        assert error(refused)["details"]["issues"][0]["step_id"] == "a"
        form = http.post("/v1/runs", data={"query": "q"})
        assert form.status_code == 415 and "application/json" in error(form)["message"]
        assert http.get("/v1/runs", params={"status": "weird"}).status_code == 422
        assert "limit" in error(http.get("/v1/runs", params={"limit": "0"}))["message"]
    assert tools.requests == []  # nothing was run


def test_a_body_over_the_limit_is_refused_before_it_is_read(tools: SideEffectTools) -> None:
    with live_server(make_orchestrator(tools.catalog()), max_body_bytes=2048) as server, \
            client(server) as http:
        big = http.post("/v1/runs", json={"query": "x" * 5000})
        assert big.status_code == 413 and error(big)["code"] == "payload_too_large"
        assert error(big)["details"]["max_bytes"] == 2048

        def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
            yield b'{"query": "'
            yield b"y" * 4000
            yield b'"}'

        streamed = http.post("/v1/runs", content=chunks(), headers={"Content-Type": "application/json"})
        assert streamed.status_code == 413
        assert http.post("/v1/runs", json={"query": "small", "plan": {"steps": [
            {"id": "q", "tool": "stocks", "capability": "quote", "params": {"symbol": "X"}}]},
            "wait": True}).json()["status"] == "succeeded"


# --- the bound on concurrent runs ----------------------------------------------------------
def test_past_the_bound_a_run_gets_429_with_retry_after(
    server: LiveServer, tools: SideEffectTools,
) -> None:
    tools.hold.set()
    pay_only = {"steps": [{"id": "pay", "tool": "bank", "capability": "pay", "params": {"amount": 1}}]}
    with client(server) as http:
        for n in (1, 2):  # serve_max_runs=2: two payments held in flight
            assert http.post("/v1/runs", json={"query": f"pay {n}", "plan": pay_only}).status_code == 202
        wait_for(lambda: tools.executed["/pay"] == 2)
        third = http.post("/v1/runs", json={"query": "pay 3", "plan": pay_only})
        assert third.status_code == 429 and error(third)["code"] == "too_many_runs"
        assert int(third.headers["retry-after"]) > 0
        assert "ORCH_SERVE_MAX_RUNS=2" in error(third)["message"]
        assert http.get("/healthz").json()["active_runs"] == 2

        tools.release.set()
        wait_for(lambda: http.get("/healthz").json()["active_runs"] == 0)
        assert http.post("/v1/runs", json={"query": "pay 3", "plan": pay_only}).status_code == 202


# --- approvals ------------------------------------------------------------------------
def test_an_approval_continues_the_run_and_wrong_decisions_say_why(
    approvals: LiveServer, tools: SideEffectTools,
) -> None:
    with client(approvals) as http:
        paused = http.post("/v1/runs", json={"query": QUERY, "plan": plan(), "run_id": "ok-pay",
                                             "wait": True}).json()
        assert paused["status"] == "awaiting_approval"
        assert paused["pending_approvals"][0]["params"] == {"amount": 250.0, "to": "broker"}

        not_pending = http.post("/v1/runs/ok-pay/approvals/quote", json={"approved": True})
        assert not_pending.status_code == 409 and error(not_pending)["code"] == "not_pending"
        assert error(not_pending)["details"]["pending"] == ["pay"]
        bad_edit = http.post("/v1/runs/ok-pay/approvals/pay",
                             json={"approved": True, "params": {"amount": "lots"}})
        assert bad_edit.status_code == 422 and error(bad_edit)["code"] == "invalid_decision"
        missing = http.post("/v1/runs/ok-pay/approvals/pay", json={"params": {}})
        assert missing.status_code == 422 and "approved" in error(missing)["message"]
        # an edit is merged onto the proposed parameters (RFC 7396): null removes a key,
        # and the whole is validated — 'amount' is required
        removed = http.post("/v1/runs/ok-pay/approvals/pay",
                            json={"approved": True, "params": {"amount": None}})
        assert removed.status_code == 422 and error(removed)["code"] == "invalid_decision"
        assert "'amount' is a required property" in error(removed)["message"]
        assert "/pay" not in tools.executed

        # docs/serve.md's edit: only the amount, the rest as proposed
        accepted = http.post("/v1/runs/ok-pay/approvals/pay",
                             json={"approved": True, "params": {"amount": "200"}, "note": "capped"})
        assert accepted.status_code == 202 and accepted.json()["status"] == "running"
        wait_for(lambda: status_of(http, "ok-pay") == "succeeded")
        done = http.get("/v1/runs/ok-pay").json()
        assert done["steps"]["pay"]["attempts"][-1]["layer"] == "approval"
        assert done["steps"]["pay"]["attempts"][-1]["params"] == {"amount": 200, "to": "broker"}
        assert done["steps"]["pay"]["output"]["paid"] == 200
        late = http.post("/v1/runs/ok-pay/approvals/pay", json={"approved": True})
        assert late.status_code == 409
    assert tools.executed["/pay"] == 1


def test_a_rejection_fails_the_step_and_skips_what_depends_on_it(
    approvals: LiveServer, tools: SideEffectTools,
) -> None:
    with client(approvals) as http:
        http.post("/v1/runs", json={"query": QUERY, "plan": plan(), "run_id": "no-pay", "wait": True})
        rejected = http.post("/v1/runs/no-pay/approvals/pay",
                             json={"approved": False, "note": "wrong account"})
        assert rejected.status_code in (200, 202)
        wait_for(lambda: status_of(http, "no-pay") == "partial")
        result = http.get("/v1/runs/no-pay").json()
        assert result["steps"]["pay"]["error"]["code"] == "REJECTED"
        assert "wrong account" in result["steps"]["pay"]["error"]["message"]
        assert result["steps"]["receipt"]["status"] == "skipped"
    assert "/pay" not in tools.executed


# --- cancelling -----------------------------------------------------------------------
def test_cancel_stops_the_steps_in_flight_and_the_run_ends_cancelled(
    server: LiveServer, tools: SideEffectTools,
) -> None:
    tools.hold.set()
    with client(server) as http:
        http.post("/v1/runs", json={"query": QUERY, "plan": plan(), "run_id": "stop"})
        assert tools.arrived.wait(10)
        cancelled = http.post("/v1/runs/stop/cancel")
        assert cancelled.status_code == 200
        result = cancelled.json()
        assert result["status"] == "cancelled" and result["error"] == "cancelled: cancelled through the API"
        # the payment was in flight: it may have happened, so it is not called cancelled
        assert result["steps"]["pay"]["status"] == "unknown"
        assert result["steps"]["pay"]["error"]["details"]["request"] == {"amount": 250.0, "to": "broker"}
        assert result["steps"]["receipt"]["status"] == "skipped"
        assert status_of(http, "stop") == "cancelled"
        again = http.post("/v1/runs/stop/cancel")  # a cancelled run has finished too
        assert again.status_code == 409 and error(again)["details"]["status"] == "cancelled"
        assert error(again)["code"] == "run_finished"
        tools.release.set()
        http.post("/v1/runs", json={"query": QUERY, "plan": plan(), "run_id": "done", "wait": True})
        finished = http.post("/v1/runs/done/cancel")
        assert finished.status_code == 409 and error(finished)["code"] == "run_finished"
        assert http.get("/healthz").json()["active_runs"] == 0
    assert tools.executed["/receipt"] == 1  # only the finished run's


def test_a_run_waiting_for_approval_can_be_cancelled(approvals: LiveServer, tools: SideEffectTools) -> None:
    with client(approvals) as http:
        http.post("/v1/runs", json={"query": QUERY, "plan": plan(), "run_id": "drop", "wait": True})
        result = http.post("/v1/runs/drop/cancel").json()
        assert result["status"] == "cancelled" and result["pending_approvals"] == []
        assert result["steps"]["pay"]["status"] == "cancelled"
        # the code docs/serve.md names (not CANCELLED, the category)
        assert result["steps"]["pay"]["error"]["code"] == "RUN_CANCELLED"
        assert result["steps"]["pay"]["error"]["category"] == "CANCELLED"
    assert "/pay" not in tools.executed


# --- the event stream ---------------------------------------------------------------------
def test_events_stream_the_stored_ones_then_live_ones_until_the_run_ends(
    server: LiveServer, tools: SideEffectTools,
) -> None:
    tools.hold.set()
    with client(server) as http:
        http.post("/v1/runs", json={"query": QUERY, "plan": plan(), "run_id": "watch"})
        assert tools.arrived.wait(10)
        with http.stream("GET", "/v1/runs/watch/events") as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            seen = []
            for event in sse_events(response):
                seen.append(event)
                if event["event"] == "step_started" and event["data"]["data"]["step_id"] == "pay":
                    tools.release.set()  # what follows can only come live
        assert [int(e["id"]) for e in seen] == list(range(1, len(seen) + 1))
        assert all(e["data"]["seq"] == int(e["id"]) and e["data"]["type"] == e["event"] for e in seen)
        assert seen[0]["event"] == "plan_ready" and seen[-1]["event"] == "run_finished"
        assert seen[-1]["data"]["data"]["status"] == "succeeded"
        stored = http.get("/v1/runs/watch").json()
        assert stored["status"] == "succeeded"

        # a browser reconnecting with Last-Event-ID gets only what it missed
        with http.stream("GET", "/v1/runs/watch/events", headers={"Last-Event-ID": "5"}) as response:
            resumed = [int(e["id"]) for e in sse_events(response)]
        assert resumed == list(range(6, len(seen) + 1))
        # nothing more will come: 204 tells an EventSource to stop reconnecting
        done = http.get("/v1/runs/watch/events", headers={"Last-Event-ID": str(len(seen))})
        assert done.status_code == 204
        assert http.get("/v1/runs/watch/events", params={"after": "x"}).status_code == 422


def test_a_stream_stays_open_through_an_approval_and_follows_the_run_on(
    approvals: LiveServer, tools: SideEffectTools,
) -> None:
    with client(approvals) as http:
        http.post("/v1/runs", json={"query": QUERY, "plan": plan(), "run_id": "wait-on", "wait": True})
        types = []
        with http.stream("GET", "/v1/runs/wait-on/events") as response:
            for event in sse_events(response):
                types.append((event["event"], event["data"]["data"].get("status")))
                if event["event"] == "run_finished" and event["data"]["data"]["status"] == "awaiting_approval":
                    decision = http.post("/v1/runs/wait-on/approvals/pay", json={"approved": True})
                    assert decision.status_code == 202
        assert ("approval_required", None) in types
        assert types[-1] == ("run_finished", "succeeded")
        assert ("step_finished", "succeeded") in types[types.index(("run_finished", "awaiting_approval")):]


# --- health and metrics -----------------------------------------------------------------
def test_healthz_and_metrics(server: LiveServer) -> None:
    with client(server) as http:
        health = http.get("/healthz")
        assert health.status_code == 200 and health.json()["status"] == "ok"
        http.post("/v1/runs", json={"query": "one quote", "wait": True, "plan": {"steps": [
            {"id": "q", "tool": "stocks", "capability": "quote", "params": {"symbol": "X"}}]}})
        metrics = http.get("/metrics")
        assert metrics.headers["content-type"].startswith("text/plain")
        assert 'orchestration_runs_total{status="succeeded"} 1.0' in metrics.text
