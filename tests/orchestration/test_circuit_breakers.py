"""Circuit breakers per tool, through the orchestrator and real HTTP on 127.0.0.1.

A demo tool server goes down (stopped: connections refused, or hanging past the
timeout) and comes back on the same port; the breaker opens, refuses calls without
sending anything, lets one probe through after the cool-down (a manual clock) and closes.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from orchestration import Catalog, Orchestrator, OrchestratorConfig, ScriptedLLM
from orchestration.circuit import CircuitBreakers, CircuitSettings, failure_kind
from orchestration.clock import ManualClock
from orchestration.demo.tool_data import STOCKS
from orchestration.demo.tools import DemoToolServer, Hang, Status
from orchestration.errors import CatalogError
from orchestration.events import RunEvent
from orchestration.protocol import ErrorCategory, ErrorSource, StepError
from orchestration.result import RunResult

QUOTE = {"steps": [{"id": "q", "tool": "stocks", "capability": "quote",
                    "params": {"symbol": "TSLA"}}]}


@pytest.fixture
def stocks() -> Iterator[DemoToolServer]:
    server = DemoToolServer(STOCKS)
    yield server
    server.close()


def catalog_for(server: DemoToolServer, circuit: Any) -> Catalog:
    entry = server.catalog_entry()
    entry["circuit"] = circuit
    return Catalog.from_dict({"tools": [entry]}, source="stocks")


def orchestrator(catalog: Catalog, clock: ManualClock, registry: CollectorRegistry,
                 **config: Any) -> Orchestrator:
    settings = {"retry_max_attempts": 1, "synthesis_enabled": False, **config}
    return Orchestrator(catalog, ScriptedLLM([]), OrchestratorConfig(**settings),
                        clock=clock, registry=registry)


def run(orch: Orchestrator, events: list[RunEvent] | None = None) -> RunResult:
    return orch.run("quote TSLA", plan=QUOTE,
                    on_event=events.append if events is not None else None)


def state(registry: CollectorRegistry) -> float | None:
    return registry.get_sample_value("orchestration_circuit_state", {"tool": "stocks"})


def circuit_events(events: list[RunEvent]) -> list[tuple[str, str | None]]:
    return [(e.data["state"], e.data["previous"]) for e in events if e.type == "circuit_changed"]


def restart(server: DemoToolServer) -> DemoToolServer:
    """The tool comes back on the port it had."""
    return DemoToolServer(STOCKS, port=server.port)


def test_a_tool_that_goes_down_opens_its_breaker_fails_fast_and_closes_when_it_is_back(
    stocks: DemoToolServer, registry: CollectorRegistry,
) -> None:
    clock = ManualClock()
    orch = orchestrator(catalog_for(stocks, {"failure_threshold": 3, "cool_down_s": 30}),
                        clock, registry)
    assert run(orch).status == "succeeded"
    assert state(registry) == 0  # closed, made on the tool's first call
    stocks.close()  # the tool goes down: connections are refused

    events: list[RunEvent] = []
    for _ in range(3):
        events.clear()
        failed = run(orch, events)
        assert failed.steps["q"].error is not None
        assert failed.steps["q"].error.code == "CONNECTION_REFUSED"
    # the third consecutive failure opened it, and that run says so
    assert circuit_events(events) == [("open", "closed")]
    assert state(registry) == 1
    assert orch.circuits.states() == {"stocks": "open"}

    back = restart(stocks)  # back already, but the breaker does not know it yet
    try:
        events.clear()
        refused = run(orch, events)
        step = refused.steps["q"]
        assert step.status == "failed"
        assert step.error is not None and step.error.code == "CIRCUIT_OPEN"
        assert step.error.category is ErrorCategory.CIRCUIT_OPEN
        assert step.error.retryable and not step.error.request_sent
        assert step.error.retry_after_s == pytest.approx(30.0)
        assert "failed fast" in step.error.details["gave_up"]
        assert [a.outcome for a in step.attempts] == ["not_sent"]
        assert back.requests == []  # nothing reached the tool
        assert [e.data["error_code"] for e in events if e.type == "attempt_finished"] == [
            "CIRCUIT_OPEN"]

        clock.advance(29.0)
        assert run(orch).steps["q"].error.code == "CIRCUIT_OPEN"  # type: ignore[union-attr]
        clock.advance(1.0)  # the cool-down is over: the next call is the probe
        events.clear()
        probed = run(orch, events)
        assert probed.status == "succeeded"
        assert circuit_events(events) == [("half_open", "open"), ("closed", "half_open")]
        assert len(back.requests) == 1
        assert state(registry) == 0
        assert orch.circuits.states() == {"stocks": "closed"}
        transitions = {s: registry.get_sample_value("orchestration_circuit_transitions_total",
                                                    {"tool": "stocks", "state": s})
                       for s in ("open", "half_open", "closed")}
        assert transitions == {"open": 1.0, "half_open": 1.0, "closed": 1.0}
    finally:
        back.close()


def test_a_probe_that_fails_opens_the_breaker_for_another_cool_down(
    stocks: DemoToolServer, registry: CollectorRegistry,
) -> None:
    clock = ManualClock()
    orch = orchestrator(catalog_for(stocks, {"failure_threshold": 2, "cool_down_s": 10}),
                        clock, registry)
    stocks.close()
    for _ in range(2):
        run(orch)
    assert orch.circuits.states() == {"stocks": "open"}
    clock.advance(10.0)
    events: list[RunEvent] = []
    probe = run(orch, events)  # still down: the probe is refused by the OS, not the breaker
    assert probe.steps["q"].error.code == "CONNECTION_REFUSED"  # type: ignore[union-attr]
    assert circuit_events(events) == [("half_open", "open"), ("open", "half_open")]
    assert state(registry) == 1
    clock.advance(9.0)
    assert run(orch).steps["q"].error.code == "CIRCUIT_OPEN"  # type: ignore[union-attr]
    back = restart(stocks)
    try:
        clock.advance(1.0)
        assert run(orch).status == "succeeded"
        assert orch.circuits.states() == {"stocks": "closed"}
    finally:
        back.close()


def test_an_open_breaker_answers_at_once_instead_of_waiting_for_timeouts(
    stocks: DemoToolServer, registry: CollectorRegistry,
) -> None:
    catalog = catalog_for(stocks, {"failure_threshold": 2, "cool_down_s": 30})
    orch = orchestrator(catalog, ManualClock(), registry, tool_timeout_s=0.3)
    stocks.inject("/quote", Hang(5.0), Hang(5.0))
    for _ in range(2):
        timed_out = run(orch)
        assert timed_out.steps["q"].error.code == "READ_TIMEOUT"  # type: ignore[union-attr]
        assert timed_out.steps["q"].attempts[0].latency_s >= 0.29
    started = time.perf_counter()
    refused = run(orch)
    assert refused.steps["q"].error.code == "CIRCUIT_OPEN"  # type: ignore[union-attr]
    assert refused.steps["q"].attempts[0].latency_s < 0.05
    assert time.perf_counter() - started < 1.0
    assert len(stocks.requests_to("/quote")) == 2  # the refused call never left


def test_a_step_may_wait_for_the_cool_down_and_try_again_as_the_probe(
    stocks: DemoToolServer, registry: CollectorRegistry,
) -> None:
    clock = ManualClock()
    catalog = catalog_for(stocks, {"failure_threshold": 2, "cool_down_s": 5, "max_wait_s": 10})
    orch = orchestrator(catalog, clock, registry, retry_max_attempts=2, retry_base_delay_s=0)
    stocks.inject("/quote", Status(503, "down"), Status(503, "down"))
    assert run(orch).status == "failed"  # a 503, its retry a 503: the breaker opens
    assert orch.circuits.states() == {"stocks": "open"}
    clock.advance(2.0)
    clock.sleeps.clear()
    waited = run(orch)  # refused; waits the 3 s left, then its retry is the probe
    step = waited.steps["q"]
    assert waited.status == "succeeded", step.error
    assert [(a.layer, a.outcome) for a in step.attempts] == [
        ("plan", "not_sent"), ("resilience", "succeeded")]
    assert step.attempts[0].error.code == "CIRCUIT_OPEN"  # type: ignore[union-attr]
    assert clock.sleeps == [pytest.approx(3.001)]
    assert orch.circuits.states() == {"stocks": "closed"}


def test_a_tool_can_turn_its_breaker_off(stocks: DemoToolServer,
                                         registry: CollectorRegistry) -> None:
    orch = orchestrator(catalog_for(stocks, False), ManualClock(), registry,
                        circuit_failure_threshold=2)
    stocks.inject("/quote", *[Status(500, "boom")] * 4)
    codes = [run(orch).steps["q"].error.code for _ in range(4)]  # type: ignore[union-attr]
    assert codes == ["HTTP_500"] * 4
    assert len(stocks.requests_to("/quote")) == 4
    assert orch.circuits.states() == {}
    assert state(registry) is None


def test_4xx_answers_prove_the_tool_is_up_and_reset_the_count(
    stocks: DemoToolServer, registry: CollectorRegistry,
) -> None:
    orch = orchestrator(catalog_for(stocks, {"failure_threshold": 2}), ManualClock(), registry,
                        validation_feedback_enabled=False, semantic_retry_enabled=False)
    stocks.inject("/quote", Status(503, "busy"), Status(404, "no"), Status(503, "busy"))
    for _ in range(3):
        run(orch)
    assert orch.circuits.states() == {"stocks": "closed"}


def test_failures_outside_the_window_do_not_count(stocks: DemoToolServer,
                                                 registry: CollectorRegistry) -> None:
    clock = ManualClock()
    orch = orchestrator(catalog_for(stocks, {"failure_threshold": 2, "window_s": 10}),
                        clock, registry)
    stocks.inject("/quote", Status(502, "bad gateway"), Status(502, "bad gateway"))
    run(orch)
    clock.advance(11.0)
    run(orch)
    assert orch.circuits.states() == {"stocks": "closed"}


def test_circuit_settings_in_the_catalog_are_checked_when_it_loads() -> None:
    entry = {"name": "t", "base_url": "http://127.0.0.1:9", "circuit": {"failure_treshold": 3},
             "capabilities": [{"name": "c", "path": "/c"},
                              {"name": "d", "path": "/d", "circuit": {"cool_down_s": -1}}]}
    with pytest.raises(CatalogError) as caught:
        Catalog.from_dict({"tools": [entry]}, source="cat.yaml")
    text = str(caught.value)
    assert "failure_treshold" in text and "did you mean 'failure_threshold'" in text
    assert "cool_down_s" in text and "t.d" in text


def test_one_probe_at_a_time_while_half_open() -> None:
    clock = ManualClock()
    breakers = CircuitBreakers(OrchestratorConfig(circuit_failure_threshold=1,
                                                  circuit_cool_down_s=5), clock=clock)
    catalog = Catalog()
    cap = catalog.add_function(lambda: 1, tool="t", capability="c")
    down = StepError(category=ErrorCategory.CONNECTION_ERROR, code="CONNECTION_REFUSED",
                     message="refused", source=ErrorSource.TRANSPORT, request_sent=False)
    first = breakers.admit(cap)
    assert not isinstance(first, StepError)
    assert [t.after for t in breakers.record(first, down)] == ["open"]
    clock.advance(5.0)
    probe = breakers.admit(cap)
    assert not isinstance(probe, StepError) and probe.probe
    second = breakers.admit(cap)
    assert isinstance(second, StepError) and second.code == "CIRCUIT_OPEN"
    assert second.retry_after_s is None and "probe call is in flight" in second.message
    breakers.abandon(probe)  # the probe was cancelled: another call may probe
    again = breakers.admit(cap)
    assert not isinstance(again, StepError) and again.probe
    assert [t.after for t in breakers.record(again, None)] == ["closed"]


@pytest.mark.parametrize(("error", "kind"), [
    (dict(category=ErrorCategory.TIMEOUT, code="READ_TIMEOUT", source=ErrorSource.TRANSPORT),
     "failure"),
    (dict(category=ErrorCategory.SERVICE_ERROR, code="HTTP_503", source=ErrorSource.HTTP_STATUS,
          http_status=503), "failure"),
    (dict(category=ErrorCategory.SERVICE_ERROR, code="DOWN", source=ErrorSource.ENVELOPE,
          retryable=True, http_status=503), "failure"),
    (dict(category=ErrorCategory.SERVICE_ERROR, code="NOT_FOUND", source=ErrorSource.ENVELOPE,
          retryable=False, http_status=503), "success"),
    (dict(category=ErrorCategory.RATE_LIMIT, code="HTTP_429", source=ErrorSource.HTTP_STATUS,
          http_status=429), "neutral"),
    (dict(category=ErrorCategory.INPUT_ERROR, code="BAD", source=ErrorSource.ENVELOPE,
          http_status=400), "success"),
    (dict(category=ErrorCategory.BUDGET_EXCEEDED, code="BUDGET_EXCEEDED",
          source=ErrorSource.ENGINE), "neutral"),
    (dict(category=ErrorCategory.TIMEOUT, code="POOL_TIMEOUT", source=ErrorSource.TRANSPORT,
          request_sent=False), "neutral"),
    (dict(category=ErrorCategory.TIMEOUT, code="TOOL_STILL_RUNNING",
          source=ErrorSource.TRANSPORT, details={"still_running": True}), "neutral"),
])
def test_what_counts_as_a_failure_of_the_tool(error: dict[str, Any], kind: str) -> None:
    assert failure_kind(StepError(message="m", **error)) == kind


def test_settings_come_from_the_environment_then_the_catalog() -> None:
    config = OrchestratorConfig(circuit_failure_threshold=7, circuit_cool_down_s=12)
    catalog = Catalog()
    cap = catalog.add_function(lambda: 1, tool="t", capability="c")
    assert CircuitSettings.for_capability(config, cap).failure_threshold == 7
    cap2 = cap.model_copy(update={"circuit": {"cool_down_s": 3}})
    settings = CircuitSettings.for_capability(config, cap2)
    assert (settings.failure_threshold, settings.cool_down_s) == (7, 3)
