"""Text put in prompts and error messages: size limits and data delimiting.

One place for both, used by the planner, the defense layers, synthesis and error
classification alike: values are cut with a visible marker, and tool output or user text
is wrapped in labelled delimiters so the LLM reads it as data, never as instructions.
"""

from __future__ import annotations

import json
from typing import Any


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, with a marker saying how much was cut."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"… [truncated {len(text) - limit} chars]"


def to_json(value: Any, limit: int) -> str:
    """Compact JSON of ``value`` (keys sorted), clipped to ``limit`` characters."""
    return clip(json.dumps(value, ensure_ascii=False, default=str, sort_keys=True), limit)


def data_block(label: str, text: str) -> str:
    """``text`` between labelled delimiters, so the LLM reads it as data."""
    tag = label.upper().replace(" ", "_")
    # a value that contains our closing delimiter must not close the block early
    safe = text.replace(f"{tag}>>>", f"{tag}>>\u200b>")
    return f"<<<{tag}\n{safe}\n{tag}>>>"
