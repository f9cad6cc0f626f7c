"""Reading JSON out of LLM answers: code fences and prose around the JSON are tolerated.

The one JSON extraction of the engine, shared by the planner and the defense layers,
which both ask for JSON and both get text.
"""

from __future__ import annotations

import json
from typing import Any

from orchestration.errors import MalformedAnswer


def extract_json(text: str) -> Any:
    """The first JSON object or array in ``text``.

    Raises :class:`MalformedAnswer` with the decoder's message and position when no
    candidate parses.
    """
    if not text or not text.strip():
        raise MalformedAnswer("the answer is empty")
    try:
        return json.loads(text.strip())
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
        raise MalformedAnswer(f"the answer is not valid JSON: {first_error}")
    raise MalformedAnswer("the answer contains no JSON object")


def extract_object(text: str) -> dict[str, Any]:
    """The first JSON object in ``text``; :class:`MalformedAnswer` (a ``ValueError``)
    saying what is wrong when there is none or the JSON is another type."""
    value = extract_json(text)
    if not isinstance(value, dict):
        raise MalformedAnswer(f"expected a JSON object, got {type(value).__name__}")
    return value
