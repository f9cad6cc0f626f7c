"""Shared pieces of the layer prompts: size limits, data delimiting, answer parsing.

Tool output, parameters and user text placed in prompts are data, not instructions: they
are wrapped in labelled delimiters and cut to a size limit with a visible marker, so a
huge or hostile value can neither blow the prompt nor pass itself off as instructions.
"""

from __future__ import annotations

import json
from typing import Any

from orchestration.errors import MalformedAnswer
from orchestration.llm.answers import extract_json


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, with a marker saying how much was cut."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"… [truncated {len(text) - limit} chars]"


def to_json(value: Any, limit: int) -> str:
    """Compact JSON of ``value``, clipped to ``limit`` characters."""
    return clip(json.dumps(value, ensure_ascii=False, default=str, sort_keys=True), limit)


def data_block(label: str, text: str) -> str:
    """``text`` between labelled delimiters, so the LLM reads it as data."""
    tag = label.upper().replace(" ", "_")
    # a value that contains our closing delimiter must not close the block early
    safe = text.replace(f"{tag}>>>", f"{tag}>>\u200b>")
    return f"<<<{tag}\n{safe}\n{tag}>>>"


def parse_json_object(text: str) -> dict[str, Any]:
    """The JSON object in an LLM answer; raises ``ValueError`` saying what is wrong."""
    try:
        value = extract_json(text)
    except MalformedAnswer as exc:
        raise ValueError(str(exc)) from exc
    if not isinstance(value, dict):
        raise ValueError(f"expected a JSON object, got {type(value).__name__}")
    return value
