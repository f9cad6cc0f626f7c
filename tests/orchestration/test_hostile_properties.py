"""Property: whatever the plan, the tool reply or the LLM answer — a typed result or a typed
error, never an exception.

Through the public API only (``Orchestrator.run``, ``RunResult.to_dict()``), hypothesis
draws hostile input of three kinds and every run must end in a ``RunResult`` whose steps
carry typed errors and complete histories, and whose ``to_dict()`` is strict JSON that
encodes as UTF-8 (no NaN, no lone surrogate, no depth pydantic cannot serialise).
"""

from __future__ import annotations

import json
import os
from typing import Any, get_args

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from orchestration import (
    Catalog,
    ErrorCategory,
    Orchestrator,
    OrchestratorConfig,
    RunResult,
    ScriptedLLM,
    StepError,
    ToolFailed,
)
from orchestration.clock import ManualClock
from orchestration.llm.base import LLMRequest
from orchestration.result import AttemptOutcome, StepStatus
from tests.support.hostile_tools import HostileTool, Reply

# Derandomised by default, so every run (CI included) checks the same 60 examples per
# property; DAGWRIGHT_PROPERTY_EXAMPLES=800 searches longer with a random seed.
_EXAMPLES = int(os.environ.get("DAGWRIGHT_PROPERTY_EXAMPLES", "0"))
PROPERTY = settings(max_examples=_EXAMPLES or 60, deadline=None, derandomize=not _EXAMPLES,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def nested(depth: int, leaf: Any = 1) -> Any:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


# --- strategies ---------------------------------------------------------------------------

HOSTILE_TEXT = st.sampled_from([
    "{{a}}", "{{a.x}}", "{{a[0].y}}", "{{a[" + "9" * 5000 + "]}}", "{{ghost.x}}", "{{", "}}",
    "{{a.x}} and {{b}}", "\ud800", "\x00\x1f", "x" * 5000, "password=hunter2",
    '{"success": false}', "[" * 500, "invalid api key: " + "a-" * 500, "1e999", "NaN",
    "https://u:p@h/?token=t",
])
SCALARS = (st.none() | st.booleans() | st.integers(-(2 ** 70), 2 ** 70)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12) | HOSTILE_TEXT)
VALUES = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(
        st.text(max_size=6) | st.sampled_from(["x", "n", "s", "token"]), children, max_size=4),
    max_leaves=12,
) | st.integers(1, 400).map(nested)

STEP = st.fixed_dictionaries(
    {"id": st.sampled_from(["a", "b", "c", "1bad", ""]),
     "tool": st.sampled_from(["t", "t", "nope"]),
     "capability": st.sampled_from(["echo", "typed", "odd", "nope"]),
     "params": st.dictionaries(st.sampled_from(["x", "n", "s", "v"]), VALUES, max_size=3) | VALUES},
    optional={"depends_on": st.lists(st.sampled_from(["a", "b", "c", "zz"]), max_size=2) | VALUES,
              "retry": st.fixed_dictionaries({}, optional={"max_attempts": VALUES}) | VALUES},
)
PLANS = st.fixed_dictionaries({"steps": st.lists(STEP, max_size=4) | VALUES}) | VALUES


def odd_tool(**kwargs: Any) -> Any:
    """A Python tool whose reply depends on its input: data, deep data, NaN, a raise."""
    x = kwargs.get("x")
    if x is None:
        return {"ok": True}
    if isinstance(x, bool):
        raise ToolFailed("NOPE", "refused", retryable=x)
    if isinstance(x, int):
        return nested(min(abs(x), 500))
    if isinstance(x, float):
        return {"value": x}
    if isinstance(x, str):
        return x * 3
    raise RuntimeError("odd input")


def catalog() -> Catalog:
    cat = Catalog()
    cat.add_function(lambda **kw: kw, tool="t", capability="echo")
    cat.add_function(lambda **kw: kw, tool="t", capability="typed", input_schema={
        "type": "object", "properties": {"n": {"type": "integer"},
                                         "s": {"type": "string", "enum": ["a", "b"]}},
        "required": ["n"]})
    cat.add_function(odd_tool, tool="t", capability="odd")
    return cat


def assert_typed(result: Any) -> None:
    """The contract every run keeps, whatever came in."""
    assert isinstance(result, RunResult)
    assert result.status in ("succeeded", "partial", "failed")
    if result.status == "failed" and not result.steps:
        assert result.error  # a run that failed before any step says why
    for step in result.steps.values():
        assert step.status in get_args(StepStatus)
        if step.status == "failed":
            assert isinstance(step.error, StepError)
            assert isinstance(step.error.category, ErrorCategory)
            assert step.error.code != "EXECUTOR_ERROR", step.error.message
        for attempt in step.attempts:
            assert attempt.outcome in get_args(AttemptOutcome)
            assert (attempt.error is None) == (attempt.outcome == "succeeded")
    text = json.dumps(result.to_dict(), allow_nan=False, ensure_ascii=False)
    text.encode("utf-8")


def run(orch: Orchestrator, plan: Any = None) -> RunResult:
    return orch.run("hostile query", plan=plan)


# --- plans --------------------------------------------------------------------------------

@PROPERTY
@given(plan=PLANS)
def test_any_plan_gives_a_typed_result(plan: Any) -> None:
    orch = Orchestrator(catalog(), ScriptedLLM(lambda r: "no"), OrchestratorConfig(
        synthesis_enabled=False, max_validation_retries=1, semantic_retry_max_attempts=1),
        registry=CollectorRegistry(), clock=ManualClock())
    assert_typed(run(orch, plan))


# --- LLM answers ----------------------------------------------------------------------------

ANSWER_OBJECTS = st.one_of(
    st.fixed_dictionaries({"steps": st.lists(STEP, max_size=3) | VALUES},
                          optional={"reasoning": VALUES}),
    st.fixed_dictionaries({}, optional={"can_fix": VALUES | st.booleans(),
                                        "analysis": VALUES,
                                        "corrected_parameters": VALUES}),
    st.fixed_dictionaries({}, optional={"should_retry": VALUES | st.booleans(),
                                        "is_transient_error": VALUES | st.booleans(),
                                        "analysis": VALUES,
                                        "corrected_parameters": VALUES}),
    VALUES,
)
ANSWERS = st.one_of(
    ANSWER_OBJECTS.map(lambda v: json.dumps(v, allow_nan=True)),
    ANSWER_OBJECTS.map(lambda v: "Sure:\n```json\n" + json.dumps(v) + "\n```"),
    st.text(max_size=200),
    st.integers(1, 2000).map(lambda d: "[" * d + "]" * d),
    HOSTILE_TEXT,
)


def scripted(answers: list[str]) -> ScriptedLLM:
    count = {"n": 0}

    def answer(request: LLMRequest) -> str:
        count["n"] += 1
        return answers[count["n"] % len(answers)]

    return ScriptedLLM(answer)


@PROPERTY
@given(answers=st.lists(ANSWERS, min_size=1, max_size=6), planned=st.booleans())
def test_any_llm_answer_gives_a_typed_result(answers: list[str], planned: bool) -> None:
    """Plans, layer-3 and layer-4 answers, repair plans and synthesis all from the drawn
    answers: with ``planned`` the LLM writes the plan, else a given plan fails validation
    so the layers (and a repair round) ask the LLM."""
    orch = Orchestrator(catalog(), scripted(answers), OrchestratorConfig(
        replan_max=1, max_llm_calls_per_run=12, planner_max_retries=1),
        registry=CollectorRegistry(), clock=ManualClock())
    plan = None if planned else {"steps": [
        {"id": "a", "tool": "t", "capability": "typed", "params": {"n": "not a number"}},
        {"id": "b", "tool": "t", "capability": "echo", "params": {"x": "{{a.n}}"}}]}
    assert_typed(run(orch, plan))


# --- tool replies ---------------------------------------------------------------------------

ENVELOPE_ERRORS = st.fixed_dictionaries({}, optional={
    "code": VALUES, "message": VALUES,
    "category": st.sampled_from(["INPUT_ERROR", "NOT_FOUND", "AUTH_ERROR", "RATE_LIMIT",
                                 "SERVICE_ERROR", "WEIRD"]) | VALUES,
    "retryable": st.booleans() | VALUES, "details": VALUES})
ENVELOPES = st.fixed_dictionaries({"success": st.booleans() | VALUES},
                                  optional={"data": VALUES, "error": ENVELOPE_ERRORS | VALUES})
BODIES = st.one_of(
    ENVELOPES.map(lambda v: json.dumps(v, allow_nan=True).encode("utf-8", "surrogatepass")),
    VALUES.map(lambda v: json.dumps(v, allow_nan=True).encode("utf-8", "surrogatepass")),
    st.binary(max_size=300),
    st.integers(1, 3000).map(lambda d: b"[" * d + b"]" * d),
)
RETRY_AFTER = st.none() | st.sampled_from(
    ["0", "-5", "1e999", "nan", "inf", "99999999999999999999", "Wed, 21 Oct 2015 07:28:00 GMT",
     "Fri, 31 Dec 9999 23:59:59 GMT", "soon"]) | st.text(
    alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7e), max_size=20)


@PROPERTY
@given(status=st.sampled_from([200, 201, 204, 400, 401, 404, 409, 422, 429, 500, 503]),
       body=BODIES, retry_after=RETRY_AFTER, method=st.sampled_from(["GET", "POST"]))
def test_any_tool_reply_gives_a_typed_result_with_every_request_recorded(
    hostile_tool_session: HostileTool, status: int, body: bytes, retry_after: str | None,
    method: str,
) -> None:
    tool = hostile_tool_session  # session-scoped: reset for every drawn reply
    tool.reset()
    headers = {"Retry-After": retry_after.strip()} if retry_after and retry_after.strip() else {}
    tool.always("/reply", Reply(status, raw=body, headers=headers))
    cat = Catalog()
    cat.add_http(tool="h", capability="reply", url=tool.url("/reply"), method=method,
                 timeout_s=2.0)
    cat.add_function(lambda **kw: kw, tool="t", capability="echo")
    orch = Orchestrator(cat, ScriptedLLM(lambda r: "{}"), OrchestratorConfig(
        synthesis_enabled=False, retry_max_attempts=2, max_validation_retries=1,
        semantic_retry_max_attempts=1, max_response_bytes=100_000),
        registry=CollectorRegistry(), clock=ManualClock())
    plan = {"steps": [{"id": "r", "tool": "h", "capability": "reply", "params": {"q": 1}},
                      {"id": "e", "tool": "t", "capability": "echo", "params": {"v": "{{r}}"}}]}
    result = run(orch, plan)
    assert_typed(result)
    step = result.steps["r"]
    reached = [a for a in step.attempts if a.outcome in ("succeeded", "failed", "cancelled")]
    assert len(tool.requests_to("/reply")) == len(reached)  # every send is in the history
