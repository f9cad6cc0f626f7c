"""Every attempt is recorded — invalid, sent, timed out or cancelled — with whether the
request may have reached the tool."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from executors import Decision
from orchestration import Catalog, ErrorCategory, Orchestrator, OrchestratorConfig, ScriptedLLM
from tests.support.hostile_tools import Drip, Hang, HostileTool


def orch(catalog: Catalog, **config: Any) -> Orchestrator:
    config.setdefault("synthesis_enabled", False)
    return Orchestrator(catalog=catalog, llm=ScriptedLLM([]), registry=CollectorRegistry(),
                        config=OrchestratorConfig(**config))


# --- 3. parameters JSON cannot carry ----------------------------------------------------

@pytest.mark.parametrize("value", [float("nan"), float("inf"), "\ud800 lone surrogate"],
                         ids=["nan", "1e999", "surrogate"])
@pytest.mark.parametrize("method", ["POST", "GET"])
def test_unencodable_params_in_a_given_plan_fail_it_naming_the_value(
    hostile_tool: HostileTool, value: Any, method: str,
) -> None:
    catalog = Catalog()
    catalog.add_http(tool="t", capability="c", url=hostile_tool.url("/c"), method=method)
    plan = {"steps": [{"id": "a", "tool": "t", "capability": "c", "params": {"v": value}}]}
    result = orch(catalog).run("q", plan=plan)
    assert result.status == "failed"
    assert "step 'a': param $.v:" in (result.error or "")
    assert hostile_tool.requests_to("/c") == []
    json.dumps(result.to_dict())


ANY_V = {"properties": {"v": {}}, "required": ["v"]}


class HandsOut:
    """A custom recovery handler (public API) that proposes ``values`` one after another."""

    def __init__(self, *values: Any) -> None:
        self.values = list(values)

    async def decide(self, state: Any, error: Any) -> Any:
        return Decision(params={"v": self.values.pop(0)}, layer="validation_feedback")


@pytest.mark.parametrize("value", [float("nan"), float("inf"), "\ud800 lone surrogate"],
                         ids=["nan", "1e999", "surrogate"])
@pytest.mark.parametrize("method", ["POST", "GET"])
def test_unencodable_params_from_a_handler_are_refused_before_sending_and_recorded(
    hostile_tool: HostileTool, method: str, value: Any,
) -> None:
    catalog = Catalog()
    catalog.add_http(tool="t", capability="c", url=hostile_tool.url("/c"), method=method,
                     input_schema={"type": "object", **ANY_V})
    plan = {"steps": [{"id": "a", "tool": "t", "capability": "c", "params": {}}]}
    result = Orchestrator(catalog=catalog, llm=ScriptedLLM([]), registry=CollectorRegistry(),
                          handlers=[HandsOut(value, 0)],
                          config=OrchestratorConfig(synthesis_enabled=False)).run("q", plan=plan)
    step = result.steps["a"]
    assert step.status == "succeeded", result.error
    assert [(a.layer, a.outcome) for a in step.attempts] == [
        ("plan", "invalid"), ("validation_feedback", "invalid"), ("validation_feedback", "succeeded")]
    refused = step.attempts[1]
    assert refused.error is not None and refused.error.request_sent is False
    assert refused.validation_errors[0]["path"] == "$.v"
    assert refused.validation_errors[0]["validator"] == "json"
    assert [r.body if method == "POST" else r.query for r in hostile_tool.requests_to("/c")] == [
        {"v": 0} if method == "POST" else {"v": ["0"]}]
    json.dumps(result.to_dict(), allow_nan=False, ensure_ascii=False).encode("utf-8")


@pytest.mark.parametrize(("literal", "problem"), [
    ("NaN", "NaN is not a JSON number"), ("1e999", "1e999 does not fit a float"),
    ('"\\ud800"', "lone surrogate")])
def test_a_value_json_cannot_carry_in_an_llm_answer_makes_the_answer_unusable(
    literal: str, problem: str,
) -> None:
    catalog = Catalog()
    catalog.add_function(lambda v: v, tool="t", capability="c",
                         input_schema={"type": "object", "required": ["v"],
                                       "properties": {"v": {"type": "number"}}})
    # a value of the wrong form (not a placeholder): layer 3 is asked to fix it
    plan = {"steps": [{"id": "a", "tool": "t", "capability": "c", "params": {"v": "abc"}}]}
    nan = '{"can_fix": true, "analysis": "a", "corrected_parameters": {"v": ' + literal + "}}"
    result = Orchestrator(catalog=catalog, llm=ScriptedLLM([nan, nan]),
                          registry=CollectorRegistry(),
                          config=OrchestratorConfig(synthesis_enabled=False,
                                                    semantic_retry_enabled=False)
                          ).run("q", plan=plan)
    error = result.steps["a"].error
    assert error is not None
    assert problem in error.details["validation_feedback"]["reason"]


# --- 4. slow drip and cancelled attempts ------------------------------------------------

def test_a_slow_drip_body_is_cut_by_the_tool_timeout(hostile_tool: HostileTool) -> None:
    hostile_tool.queue("/drip", Drip(b'{"x": "' + b"a" * 40 + b'"}', every_s=0.25))
    catalog = Catalog()
    catalog.add_http(tool="t", capability="drip", url=hostile_tool.url("/drip"), method="GET")
    plan = {"steps": [{"id": "a", "tool": "t", "capability": "drip"}]}
    started = time.perf_counter()
    result = orch(catalog, tool_timeout_s=1.0, step_timeout_s=5.0,
                  retry_max_attempts=1).run("q", plan=plan)
    elapsed = time.perf_counter() - started
    step = result.steps["a"]
    assert step.error is not None
    assert (step.error.category, step.error.code) == (ErrorCategory.TIMEOUT, "READ_TIMEOUT")
    assert step.error.request_sent is True
    assert [a.outcome for a in step.attempts] == ["failed"]
    assert 0.9 < elapsed < 2.5


def test_an_attempt_cut_by_the_step_deadline_is_recorded_as_cancelled(
    hostile_tool: HostileTool,
) -> None:
    hostile_tool.always("/hang", Hang(10))
    catalog = Catalog()
    catalog.add_http(tool="t", capability="hang", url=hostile_tool.url("/hang"))
    plan = {"steps": [{"id": "a", "tool": "t", "capability": "hang", "params": {"n": 1}}]}
    result = orch(catalog, tool_timeout_s=5.0, step_timeout_s=0.5).run("q", plan=plan)
    step = result.steps["a"]
    assert step.error is not None and step.error.code == "STEP_DEADLINE_EXCEEDED"
    assert "after 1 attempt(s)" in step.error.message
    assert step.error.request_sent is True  # the POST may have reached the tool
    (attempt,) = step.attempts
    assert attempt.outcome == "cancelled"
    assert attempt.params == {"n": 1}
    assert attempt.error is not None and attempt.error.request_sent is True
    assert attempt.latency_s > 0.3


def test_a_retry_the_deadline_stops_during_its_backoff_is_recorded_as_not_sent(
    hostile_tool: HostileTool,
) -> None:
    hostile_tool.always("/slow", Hang(10))
    catalog = Catalog()
    catalog.add_http(tool="t", capability="slow", url=hostile_tool.url("/slow"), method="GET")
    plan = {"steps": [{"id": "a", "tool": "t", "capability": "slow"}]}
    result = orch(catalog, tool_timeout_s=0.2, step_timeout_s=0.6, retry_base_delay_s=5.0,
                  retry_max_attempts=3).run("q", plan=plan)
    step = result.steps["a"]
    assert [a.outcome for a in step.attempts] == ["failed", "not_sent"]
    assert step.attempts[1].layer == "resilience"
    assert step.attempts[1].error is not None and step.attempts[1].error.request_sent is False
    assert step.error is not None and step.error.request_sent is False


@pytest.mark.parametrize(("idempotent", "status", "code"), [
    (True, "cancelled", "RUN_CANCELLED"),  # safe to send again: a resume re-runs it
    (False, "unknown", "OUTCOME_UNKNOWN"),  # a side effect may have happened: we say so
])
async def test_cancelling_a_run_records_the_attempt_in_flight(
    hostile_tool: HostileTool, idempotent: bool, status: str, code: str,
) -> None:
    hostile_tool.always("/hang", Hang(10))
    catalog = Catalog()
    catalog.add_http(tool="t", capability="hang", url=hostile_tool.url("/hang"),
                     idempotent=idempotent)
    orchestrator = orch(catalog)
    seen: list[Any] = []
    original = orchestrator.executor.execute

    async def spy(plan: Any, run: Any, services: Any, **kwargs: Any) -> Any:
        seen.append(run)
        return await original(plan, run, services, **kwargs)

    orchestrator.executor.execute = spy  # type: ignore[method-assign]
    plan = {"steps": [{"id": "a", "tool": "t", "capability": "hang"}]}
    task = asyncio.ensure_future(orchestrator.arun("q", plan=plan))
    async with asyncio.timeout(10):
        while not hostile_tool.requests_to("/hang"):
            await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await orchestrator.aclose()
    (run,) = seen
    step = run.steps["a"]
    assert step.status == status and step.error is not None
    assert step.error.code == code and step.error.request_sent is True
    assert [a.outcome for a in step.attempts] == ["cancelled"]
