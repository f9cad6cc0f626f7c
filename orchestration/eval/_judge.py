"""The LLM judge: an answer graded against a case's rubric by a model the eval is given.

Off unless the eval is given a judge; its verdicts are reported apart from the pass rate
(a judge is itself a model that can be wrong), and its LLM calls and tokens are counted
apart from the runs'. One call per judged run; a judge that fails or answers something
unreadable gives no verdict (``passed`` None) with the reason, rather than a guess.
"""

from __future__ import annotations

from pydantic import BaseModel

from orchestration._json import UnreadableJSON, extract_object
from orchestration._text import data_block, to_json
from orchestration.errors import LLMError
from orchestration.eval._checks import CheckResult
from orchestration.eval._dataset import JudgeCheck
from orchestration.llm.base import LLMClient, LLMRequest
from orchestration.result import RunResult

__all__ = ["JUDGE_PURPOSE", "JudgeUsage", "judge_answer"]

JUDGE_PURPOSE = "eval_judge"
_SCHEMA = {
    "type": "object",
    "properties": {"pass": {"type": "boolean"}, "reason": {"type": "string"}},
    "required": ["pass", "reason"],
    "additionalProperties": False,
}
_SYSTEM = (
    "You grade the answer an assistant gave to a user's request, against a rubric. "
    "Judge only what the rubric asks; the tool results are what the assistant knew. "
    'Reply with JSON only: {"pass": true or false, "reason": "one sentence"}.'
)
_MAX_OUTPUTS_CHARS = 6000


class JudgeUsage(BaseModel):
    """What the judge spent (apart from the runs)."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    failures: int = 0


async def judge_answer(judge: LLMClient, check: JudgeCheck, result: RunResult,
                       usage: JudgeUsage) -> CheckResult:
    """One verdict of ``judge`` on ``result``'s answer against ``check.rubric``."""
    name = f"judge: {check.rubric}"
    if result.answer is None:
        return CheckResult(kind="judge", name=name, passed=False, detail="the run has no answer")
    outputs = to_json(result.outputs(), _MAX_OUTPUTS_CHARS)
    prompt = "\n\n".join([data_block("USER_REQUEST", result.query),
                          data_block("TOOL_RESULTS", outputs),
                          data_block("ANSWER", result.answer),
                          data_block("RUBRIC", check.rubric)])
    request = LLMRequest(purpose=JUDGE_PURPOSE, run_id=result.run_id,
                         messages=[{"role": "system", "content": _SYSTEM},
                                   {"role": "user", "content": prompt}],
                         response_schema=_SCHEMA, schema_name="verdict")
    usage.calls += 1
    try:
        response = await judge.complete(request)
        verdict = extract_object(response.content)
    except (LLMError, UnreadableJSON) as exc:
        usage.failures += 1
        return CheckResult(kind="judge", name=name, passed=None, detail=f"no verdict: {exc}")
    usage.input_tokens += response.usage.input_tokens
    usage.output_tokens += response.usage.output_tokens
    passed = verdict.get("pass")
    if not isinstance(passed, bool):
        usage.failures += 1
        return CheckResult(kind="judge", name=name, passed=None,
                           detail="no verdict: the judge's answer has no boolean \"pass\"")
    return CheckResult(kind="judge", name=name, passed=passed,
                       detail=str(verdict.get("reason", ""))[:300])
