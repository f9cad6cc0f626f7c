"""Grading one run against its case: each expectation becomes a named check that passed
or failed, with what was found when it failed.

"A call was made" means some attempt that reached the tool (``succeeded``, ``failed`` or
``cancelled``; not a call validation, binding or a guard stopped) was sent with those
parameters — the parameters as sent, after layer 2 and any correction. The LLM judge is
not graded here (it is asynchronous and optional: :mod:`orchestration.eval._judge`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any, Literal

from pydantic import BaseModel

from orchestration._schema import validator
from orchestration.eval._dataset import CallExpectation, Case, OutputCheck, PathPart
from orchestration.result import RunResult, StepResult

__all__ = ["CheckKind", "CheckResult", "grade", "same_value"]

CheckKind = Literal["status", "call", "not_call", "output", "answer_contains", "answer_regex",
                    "judge"]
_SENT = ("succeeded", "failed", "cancelled")
_MISSING = object()


class CheckResult(BaseModel):
    """One expectation of a case, checked: ``passed`` is None when it was not run (the
    judge, when the eval has none)."""

    kind: CheckKind
    name: str
    passed: bool | None
    detail: str = ""


def grade(case: Case, result: RunResult) -> list[CheckResult]:
    """Every check of ``case.expect`` against ``result`` (the judge excluded), in the
    order: status, calls, calls that must not be made, outputs, answer."""
    expect = case.expect
    checks = [_status(expect.statuses, result)]
    sent = list(_sent_calls(result))
    checks += [_call(call, sent) for call in expect.calls]
    checks += [_not_call(call, sent) for call in expect.not_calls]
    checks += [_output(check, result) for check in expect.outputs]
    answer = expect.answer
    if answer is not None:
        checks += [_contains(text, result.answer) for text in answer.contains]
        if answer.regex is not None:
            checks.append(_regex(answer.regex, result.answer))
    return checks


def same_value(expected: Any, actual: Any) -> bool:
    """JSON equality where numbers compare by value (``7 == 7.0``) but never with booleans."""
    if isinstance(expected, bool) or isinstance(actual, bool):
        return type(expected) is type(actual) and expected == actual
    if isinstance(expected, int | float) and isinstance(actual, int | float):
        return expected == actual
    if isinstance(expected, dict) and isinstance(actual, dict):
        return expected.keys() == actual.keys() and all(
            same_value(v, actual[k]) for k, v in expected.items())
    if isinstance(expected, list) and isinstance(actual, list):
        return len(expected) == len(actual) and all(
            same_value(e, a) for e, a in zip(expected, actual, strict=True))
    return bool(expected == actual)


# --- status and calls ---------------------------------------------------------------------
def _status(allowed: list[str], result: RunResult) -> CheckResult:
    ok = result.status in allowed
    detail = "" if ok else f"the run ended {result.status}" + (
        f": {_clip(result.error)}" if result.error else "")
    return CheckResult(kind="status", name=f"status is {' or '.join(allowed)}", passed=ok,
                       detail=detail)


def _sent_calls(result: RunResult) -> Iterator[tuple[StepResult, dict[str, Any]]]:
    for step in result.steps.values():
        for attempt in step.attempts:
            if attempt.outcome in _SENT:
                yield step, attempt.params


def _matches(call: CallExpectation, step: StepResult, params: dict[str, Any]) -> bool:
    if (step.tool, step.capability) != (call.tool, call.capability):
        return False
    for name, value in call.params.items():
        if name not in params or not same_value(value, params[name]):
            return False
    if call.params_schema is not None:
        return validator(call.params_schema).is_valid(params)
    return True


def _call(call: CallExpectation, sent: list[tuple[StepResult, dict[str, Any]]]) -> CheckResult:
    ok = any(_matches(call, step, params) for step, params in sent)
    detail = ""
    if not ok:
        same_capability = [params for step, params in sent
                           if (step.tool, step.capability) == (call.tool, call.capability)]
        detail = (f"sent instead: {_calls_text(call.key, same_capability)}" if same_capability
                  else f"no call of {call.key} reached the tool")
    return CheckResult(kind="call", name=f"called {call.describe()}", passed=ok, detail=detail)


def _not_call(call: CallExpectation, sent: list[tuple[StepResult, dict[str, Any]]]) -> CheckResult:
    made = [params for step, params in sent if _matches(call, step, params)]
    detail = f"sent: {_calls_text(call.key, made)}" if made else ""
    return CheckResult(kind="not_call", name=f"did not call {call.describe()}", passed=not made,
                       detail=detail)


def _calls_text(key: str, calls: list[dict[str, Any]]) -> str:
    shown = "; ".join(f"{key}({_json(p)})" for p in calls[:3])
    return shown + (f" and {len(calls) - 3} more" if len(calls) > 3 else "")


# --- outputs ------------------------------------------------------------------------------
def _output(check: OutputCheck, result: RunResult) -> CheckResult:
    name = f"output {check.target()}" + (
        f" equals {_json(check.equals)}" if check.checks_equality else "") + (
        " matches its schema" if check.schema_ is not None else "")
    if check.step is not None:
        step = result.steps.get(check.step)
        if step is None or step.status != "succeeded":
            found = "the run has no step " + repr(check.step) if step is None else \
                f"step {check.step!r} {step.status}"
            return CheckResult(kind="output", name=name, passed=False, detail=found)
        candidates = [step]
    else:
        candidates = [s for s in result.steps.values() if s.status == "succeeded"
                      and (s.tool, s.capability) == (check.tool, check.capability)]
        if not candidates:
            return CheckResult(kind="output", name=name, passed=False,
                               detail=f"no step of {check.tool}.{check.capability} succeeded")
    problems = []
    for step in candidates:
        problem = _output_problem(check, step.output)
        if problem is None:
            return CheckResult(kind="output", name=name, passed=True)
        problems.append(f"step {step.id}: {problem}")
    return CheckResult(kind="output", name=name, passed=False, detail="; ".join(problems[:3]))


def _output_problem(check: OutputCheck, output: Any) -> str | None:
    values = _at(output, check.parts)
    if values is _MISSING:
        return f"nothing at {check.path}"
    assert isinstance(values, list)
    for value in values:
        if check.checks_equality and not same_value(check.equals, value):
            return f"{check.path} is {_json(value)}"
        if check.schema_ is not None:
            errors = sorted(validator(check.schema_).iter_errors(value), key=lambda e: list(map(str, e.path)))
            if errors:
                return f"{check.path} = {_json(value)}: {errors[0].message}"
    return None


def _at(value: Any, parts: tuple[PathPart, ...]) -> list[Any] | object:
    """The values at ``parts`` (several through ``[*]``), or ``_MISSING``."""
    current = [value]
    for part in parts:
        following: list[Any] = []
        for item in current:
            if part == "*":
                if not isinstance(item, list):
                    return _MISSING
                following.extend(item)
            elif isinstance(part, int):
                if not isinstance(item, list) or part >= len(item):
                    return _MISSING
                following.append(item[part])
            else:
                if not isinstance(item, dict) or part not in item:
                    return _MISSING
                following.append(item[part])
        current = following
    return current


# --- the answer ---------------------------------------------------------------------------
def _contains(text: str, answer: str | None) -> CheckResult:
    name = f"answer contains {text!r}"
    if answer is None:
        return CheckResult(kind="answer_contains", name=name, passed=False,
                           detail="the run has no answer")
    ok = text.casefold() in answer.casefold()
    return CheckResult(kind="answer_contains", name=name, passed=ok,
                       detail="" if ok else f"answer: {_clip(answer)}")


def _regex(pattern: str, answer: str | None) -> CheckResult:
    name = f"answer matches /{pattern}/"
    if answer is None:
        return CheckResult(kind="answer_regex", name=name, passed=False,
                           detail="the run has no answer")
    ok = re.search(pattern, answer) is not None
    return CheckResult(kind="answer_regex", name=name, passed=ok,
                       detail="" if ok else f"answer: {_clip(answer)}")


def _json(value: Any) -> str:
    return _clip(json.dumps(value, ensure_ascii=False, sort_keys=True, default=str), 160)


def _clip(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"
