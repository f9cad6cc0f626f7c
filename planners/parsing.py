"""Reading a plan out of LLM text: code fences, prose around the JSON, a bare step list."""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from orchestration.errors import PlanParseError
from orchestration.plan import Plan


def extract_json(text: str) -> Any:
    """The first JSON object or array in ``text``, tolerating fences and surrounding prose.

    Raises :class:`PlanParseError` with the decoder's message and position when no
    candidate parses.
    """
    if not text or not text.strip():
        raise PlanParseError("the answer is empty")
    stripped = text.strip()
    try:
        return json.loads(stripped)
    except ValueError:
        pass
    decoder = json.JSONDecoder()
    first_error: ValueError | None = None
    for index, char in enumerate(text):
        if char not in "{[":
            continue
        try:
            value, _ = decoder.raw_decode(text, index)
        except ValueError as exc:
            first_error = first_error or exc
            continue
        if isinstance(value, dict | list):
            return value
    if first_error is not None:
        raise PlanParseError(f"the answer is not valid JSON: {first_error}")
    raise PlanParseError("the answer contains no JSON object")


def parse_plan(text: str) -> Plan:
    """Parse a plan from LLM output; raises :class:`PlanParseError` naming what is wrong."""
    data = extract_json(text)
    if isinstance(data, list):
        data = {"steps": data}
    if not isinstance(data, dict):
        raise PlanParseError(f"expected a JSON object with 'steps', got {type(data).__name__}")
    if "steps" not in data and isinstance(data.get("plan"), dict | list):
        inner = data["plan"]
        data = inner if isinstance(inner, dict) else {"steps": inner}
    try:
        return Plan.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors()[:10]:
            loc = ".".join(str(p) for p in err["loc"])
            problems.append(f"{loc or '(root)'}: {err['msg']}")
        raise PlanParseError("the plan does not have the expected shape: " + "; ".join(problems)) from exc


PLAN_RESPONSE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "reasoning": {"type": "string"},
        "steps": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "string"},
                    "tool": {"type": "string"},
                    "capability": {"type": "string"},
                    "params": {"type": "object"},
                    "depends_on": {"type": "array", "items": {"type": "string"}},
                },
                "required": ["id", "tool", "capability", "params"],
            },
        },
    },
    "required": ["steps"],
}
