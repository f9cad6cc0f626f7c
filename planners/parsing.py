"""Reading a plan out of LLM text: code fences, prose around the JSON, a bare step list."""

from __future__ import annotations

import json
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

from pydantic import ValidationError

from orchestration._json import DEFAULT_MAX_DEPTH, extract_json
from orchestration._text import describe_validation_error
from orchestration.capability import Capability
from orchestration.errors import PlanParseError
from orchestration.plan import STEP_ID_PATTERN, Plan

__all__ = ["PLAN_RESPONSE_SCHEMA", "parse_plan", "plan_response_schema"]


def parse_plan(text: str, *, max_depth: int = DEFAULT_MAX_DEPTH) -> Plan:
    """Parse a plan from LLM output; raises :class:`PlanParseError` naming what is wrong
    (JSON nested deeper than ``max_depth`` included)."""
    try:
        data = extract_json(text, max_depth=max_depth)
    except ValueError as exc:  # UnreadableJSON: invalid, too deep, no JSON at all
        raise PlanParseError(str(exc)) from exc
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
        raise PlanParseError("the plan does not have the expected shape: "
                             + describe_validation_error(exc)) from exc


PLAN_RESPONSE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "reasoning": {"type": "string"},
        "steps": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "string", "pattern": f"^{STEP_ID_PATTERN}$"},
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
"""The shape of a plan answer, sent as the structured-output schema."""
_PLAN_RESPONSE_SCHEMA_JSON = json.dumps(PLAN_RESPONSE_SCHEMA)


def plan_response_schema(capabilities: Iterable[Capability] | None = None) -> dict[str, Any]:
    """:data:`PLAN_RESPONSE_SCHEMA`, with ``tool``/``capability`` limited to those offered.

    A provider that enforces the schema (grammar-constrained decoding) then cannot emit a
    tool the prompt did not list; one that does not loses nothing.

    The schema is shared, not a copy: one per set of offered tools and names, reused by
    every run that offers them (a copy per run was ten containers each run kept alive
    through its LLM call, for the garbage collector to walk). Callers never change it
    (:func:`~planners._catalog_request.allow_request` widens a copy).
    """
    caps = list(capabilities or [])
    return _schema_offering(tuple(sorted({c.tool for c in caps})),
                            tuple(sorted({c.name for c in caps})))


@lru_cache(maxsize=256)
def _schema_offering(tools: tuple[str, ...], names: tuple[str, ...]) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(_PLAN_RESPONSE_SCHEMA_JSON)
    if tools:
        props = schema["properties"]["steps"]["items"]["properties"]
        props["tool"]["enum"] = list(tools)
        props["capability"]["enum"] = list(names)
    return schema
