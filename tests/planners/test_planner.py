"""The planner under inference errors: each class retried (or not) as documented, recorded."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from orchestration import (
    Catalog,
    LLMError,
    LLMErrorKind,
    LLMResponse,
    Orchestrator,
    OrchestratorConfig,
    PlanningError,
    ScriptedLLM,
)
from orchestration.clock import ManualClock
from planners import Planner
from planners.feedback import PlanFeedback
from tests.llm_servers import FakeOpenAIServer

GOOD = {"steps": [{"id": "d", "tool": "m", "capability": "double", "params": {"x": 2}}]}


def catalog() -> Catalog:
    cat = Catalog()
    cat.add_function(lambda x: x * 2, tool="m", capability="double",
                     input_schema={"type": "object", "required": ["x"],
                                   "properties": {"x": {"type": "number"}}})
    return cat


class Harness:
    """An orchestrator with a scripted LLM, a manual clock, in-memory spans and metrics."""

    def __init__(self, script: Any, planner: Planner | None = None, **config: Any) -> None:
        self.llm = ScriptedLLM(script)
        self.clock = ManualClock()
        self.registry = CollectorRegistry()
        self.spans = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.orch = Orchestrator(
            catalog=catalog(), llm=self.llm, registry=self.registry, clock=self.clock,
            tracer_provider=provider, planner=planner,
            config=OrchestratorConfig(**{"synthesis_enabled": False, **config}),
        )

    def plan_error(self) -> PlanningError:
        with pytest.raises(PlanningError) as info:
            asyncio.run(self.orch.plan("double 2"))
        return info.value

    def retries(self, reason: str) -> float:
        value = self.registry.get_sample_value(
            "orchestration_planner_retries_total", {"reason": reason})
        return value or 0.0

    def plan_span(self) -> ReadableSpan:
        return next(s for s in self.spans.get_finished_spans() if s.name == "plan dagwright")

    def attempt_events(self) -> list[dict[str, Any]]:
        return [dict(e.attributes or {}) for e in self.plan_span().events
                if e.name == "plan_attempt"]


def test_malformed_answer_is_retried_with_the_parse_error() -> None:
    h = Harness(['{"steps": [{"id": "d", "tool": "m"', GOOD])
    result = h.orch.run("double 2")
    assert result.status == "succeeded" and result.steps["d"].output == 4
    second = h.llm.requests_for("plan")[1]
    assert second.messages[-2] == {"role": "assistant", "content": '{"steps": [{"id": "d", "tool": "m"'}
    assert "could not be read as a JSON plan: the answer is not valid JSON" in second.messages[-1]["content"]
    assert h.retries("malformed") == 1 and h.retries("validation") == 0
    events = h.attempt_events()
    assert [(e["outcome"], e["reason"], e["will_retry"]) for e in events] == [
        ("rejected", "malformed", True), ("accepted", "accepted", False)]


def test_cut_off_answer_asks_for_a_more_concise_plan() -> None:
    truncated = LLMResponse(content='{"steps": [{"id": "d", "tool": "m", "capab',
                            finish_reason="length")
    # even a cut-off answer that happens to parse is refused: its tail is missing
    parses = LLMResponse(content='{"steps": []}', finish_reason="length")
    h = Harness([truncated, parses, GOOD])
    assert h.orch.run("double 2").status == "succeeded"
    requests = h.llm.requests_for("plan")
    assert len(requests) == 3
    feedback = requests[1].messages[-1]["content"]
    assert "cut off" in feedback and "more concise plan" in feedback
    # the truncated text is not quoted back: only the instruction is added
    assert len(requests[1].messages) == len(requests[0].messages) + 1
    assert h.retries("length") == 2
    assert [e["finish_reason"] for e in h.attempt_events()] == ["length", "length", "stop"]


def test_invalid_plan_is_retried_listing_every_issue() -> None:
    bad = {"steps": [{"id": "a", "tool": "m", "capability": "triple"},
                     {"id": "b", "tool": "m", "capability": "double", "params": {"x": "{{zz.v}}"}}]}
    h = Harness([bad, GOOD])
    assert h.orch.run("q").status == "succeeded"
    feedback = h.llm.requests_for("plan")[1].messages[-1]["content"]
    assert "- step 'a': tool 'm' has no capability 'triple'" in feedback
    assert "- step 'b': param $.x refers to unknown step 'zz'" in feedback
    assert h.retries("validation") == 1


def test_rate_limit_is_left_to_the_gateway_backoff_then_reported() -> None:
    limited = LLMError(LLMErrorKind.RATE_LIMIT, "slow down", status=429, retry_after_s=2.0)
    h = Harness(lambda r: limited, llm_max_retries=2, planner_max_retries=3)
    result = h.orch.run("double 2")
    assert result.status == "failed"
    assert len(h.llm.requests) == 3  # 1 + llm_max_retries, all by the gateway
    assert h.clock.sleeps == [2.0, 2.0]  # Retry-After honoured, no real waiting
    assert result.error is not None
    assert "LLM call failed (rate_limit) after the gateway's retries with backoff" in result.error
    assert sum(h.retries(r) for r in ("malformed", "length", "validation")) == 0


def test_rate_limit_then_success_plans_normally() -> None:
    answers: list[Any] = [LLMError(LLMErrorKind.RATE_LIMIT, "busy", status=429), GOOD]
    h = Harness(answers)
    assert h.orch.run("double 2").status == "succeeded"
    assert h.clock.sleeps == [0.5]
    assert [e["outcome"] for e in h.attempt_events()] == ["accepted"]


@pytest.mark.parametrize(("kind", "phrase"), [
    (LLMErrorKind.TIMEOUT, "failed (timeout) after the gateway's retries"),
    (LLMErrorKind.AUTH, "failed (auth, not retried)"),
    (LLMErrorKind.OTHER, "failed (other, not retried)"),
])
def test_other_llm_errors_end_planning_with_the_reason(kind: LLMErrorKind, phrase: str) -> None:
    h = Harness(lambda r: LLMError(kind, "nope"))
    err = h.plan_error()
    assert phrase in str(err)
    calls = 3 if kind is LLMErrorKind.TIMEOUT else 1  # the gateway retries timeouts only
    assert len(h.llm.requests) == calls
    assert [a.kind for a in err.attempts] == [kind.value]  # type: ignore[attr-defined]
    assert isinstance(err.__cause__, LLMError) and err.__cause__.kind is kind


def test_content_filter_is_not_retried(openai_server: FakeOpenAIServer,
                                       registry: CollectorRegistry) -> None:
    openai_server.answer(None, finish_reason="content_filter")
    config = OrchestratorConfig(llm_provider="openai", llm_base_url=openai_server.base_url,
                                llm_model="m", synthesis_enabled=False)
    result = Orchestrator(catalog=catalog(), config=config, registry=registry).run("q")
    assert result.status == "failed"
    assert len(openai_server.requests) == 1
    assert "content filter stopped the planner's answer (not retried)" in (result.error or "")


def test_unreadable_provider_answer_is_retried(openai_server: FakeOpenAIServer,
                                               registry: CollectorRegistry) -> None:
    openai_server.reply({"id": "x", "choices": []})  # 200 without choices: MALFORMED
    openai_server.answer('{"steps": [{"id": "d", "tool": "m", "capability": "double", "params": {"x": 3}}]}')
    config = OrchestratorConfig(llm_provider="openai", llm_base_url=openai_server.base_url,
                                llm_model="m", synthesis_enabled=False)
    result = Orchestrator(catalog=catalog(), config=config, registry=registry).run("q")
    assert result.status == "succeeded", result.error
    assert result.steps["d"].output == 6
    retry = openai_server.requests[1].body["messages"][-1]["content"]
    assert "answer has no choices" in retry
    assert registry.get_sample_value("orchestration_planner_retries_total",
                                     {"reason": "malformed"}) == 1


def test_every_attempt_is_kept_on_the_error_and_in_the_trace() -> None:
    long = LLMResponse(content='{"steps": [', finish_reason="length")
    h = Harness(["not json", {"steps": [{"id": "a", "tool": "x", "capability": "y"}]}, long],
                planner_max_retries=2)
    err = h.plan_error()
    assert str(err).startswith("no valid plan after 3 attempt(s)")
    assert [(a.number, a.kind) for a in err.attempts] == [  # type: ignore[attr-defined]
        (1, "malformed"), (2, "validation"), (3, "length")]
    assert err.attempts[0].raw_output == "not json"
    assert err.attempts[2].finish_reason == "length"
    assert err.attempts[1].to_dict()["purpose"] == "plan"
    events = h.attempt_events()
    assert [(e["dagwright.attempt"], e["reason"], e["will_retry"]) for e in events] == [
        (1, "malformed", True), (2, "validation", True), (3, "length", False)]
    assert "unknown tool 'x'" in events[1]["error"]
    assert h.plan_span().status.status_code.name == "ERROR"
    assert h.retries("malformed") == 1 and h.retries("validation") == 1
    assert h.retries("length") == 0  # the last attempt is not followed by a retry


def test_max_retries_zero_means_one_call() -> None:
    h = Harness(["nope", GOOD], planner_max_retries=0)
    err = h.plan_error()
    assert len(h.llm.requests) == 1 and len(err.attempts) == 1


def test_feedback_goes_through_a_replaceable_formatter() -> None:
    seen: list[PlanFeedback] = []

    class Terse:
        def format(self, feedback: PlanFeedback) -> str:
            seen.append(feedback)
            return f"WRONG ({feedback.kind}) #{feedback.attempt}"

    h = Harness(["nope", {"steps": [{"id": "a", "tool": "m", "capability": "zz"}]}, GOOD],
                planner=Planner(feedback=Terse()))
    assert h.orch.run("q").status == "succeeded"
    msgs = [r.messages[-1]["content"] for r in h.llm.requests_for("plan")[1:]]
    assert msgs == ["WRONG (malformed) #1", "WRONG (validation) #2"]
    assert seen[1].issues and "has no capability 'zz'" in seen[1].issues[0]


def test_provider_answers_unreadable_every_time() -> None:
    h = Harness(lambda r: LLMError(LLMErrorKind.MALFORMED, "answer is not JSON (text/html)"))
    err = h.plan_error()
    assert str(err).startswith("no valid plan after 3 attempt(s)")
    assert [a.kind for a in err.attempts] == ["malformed"] * 3  # type: ignore[attr-defined]
    assert "answer is not JSON (text/html)" in h.llm.requests[1].messages[-1]["content"]
    assert h.retries("malformed") == 2
