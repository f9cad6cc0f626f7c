"""Text put in prompts and error messages: size limits, data delimiting, error wording.

One place for them, used by the planner, the defense layers, synthesis and error
classification alike: values are cut with a visible marker, and tool output or user text
is wrapped in labelled delimiters so the LLM reads it as data, never as instructions.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable
from typing import Any

from pydantic import ValidationError


def not_unicode(what: str, text: str) -> str | None:
    """Why ``text`` cannot be recorded or sent — it is not valid Unicode (a lone
    surrogate, which a JSON escape such as \\ud800 decodes to, or a command line's
    undecodable byte) — naming ``what`` and the character; None when it can."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (f"{what} is not valid Unicode: character {exc.start} is a lone surrogate "
                f"({text[exc.start]!r}, often a JSON escape such as \\ud800 without its "
                "pair); send the text with that character removed or completed")
    return None


def clip(text: str, limit: int, *, marker: str = "truncated") -> str:
    """``text`` cut to ``limit`` characters, with a marker saying how much was cut."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"… [{marker} {len(text) - limit} chars]"


def to_json(value: Any, limit: int) -> str:
    """Compact JSON of ``value`` (keys sorted), clipped to ``limit`` characters."""
    return clip(json.dumps(value, ensure_ascii=False, default=str, sort_keys=True), limit)


def data_block(label: str, text: str) -> str:
    """``text`` between labelled delimiters, so the LLM reads it as data."""
    tag = label.upper().replace(" ", "_")
    # a value that contains our closing delimiter must not close the block early
    safe = text.replace(f"{tag}>>>", f"{tag}>>\u200b>")
    return f"<<<{tag}\n{safe}\n{tag}>>>"


def describe_validation_error(exc: ValidationError, *, root: str = "(root)", limit: int = 10) -> str:
    """Every problem pydantic found, as ``loc: message`` pairs joined with ``; ``.

    The one formatter for pydantic errors in messages users and LLMs read: the location
    names the field (``root`` when the whole value is wrong) and at most ``limit``
    problems are listed, with a count of the rest.
    """
    errors = exc.errors()
    parts = [_one_problem(e, root) for e in errors[:limit]]
    if len(errors) > limit:
        parts.append(f"… and {len(errors) - limit} more")
    return "; ".join(parts)


def _one_problem(error: Any, root: str) -> str:
    location = ".".join(str(p) for p in error["loc"])
    message = str(error["msg"])
    if not location and message.startswith("Value error, "):
        # a check of the whole value (a model validator) speaks for itself
        return message.removeprefix("Value error, ")
    return f"{location or root}: {message}"


def closest(name: str, candidates: Iterable[str]) -> str | None:
    """The candidate that ``name`` most likely misspells, or None (for "did you mean")."""
    found = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.75)
    return found[0] if found else None
