"""Shared pieces of the layer prompts: size limits, data delimiting, answer parsing.

Tool output, parameters and user text placed in prompts are data, not instructions: they
are wrapped in labelled delimiters and cut to a size limit with a visible marker, so a
huge or hostile value can neither blow the prompt nor pass itself off as instructions.
"""

from __future__ import annotations

from typing import Any

from orchestration._json import extract_json
from orchestration._text import clip, data_block, to_json
from orchestration.errors import MalformedAnswer


def parse_json_object(text: str) -> dict[str, Any]:
    """The JSON object in an LLM answer; raises ``ValueError`` saying what is wrong."""
    try:
        value = extract_json(text)
    except MalformedAnswer as exc:
        raise ValueError(str(exc)) from exc
    if not isinstance(value, dict):
        raise ValueError(f"expected a JSON object, got {type(value).__name__}")
    return value


__all__ = ["clip", "data_block", "parse_json_object", "to_json"]
