"""Names the engine accepts, made from what a document offers (titles, operationIds, paths)."""

from __future__ import annotations

import re

__all__ = ["NAME", "identifier", "tool_identifier"]

NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")


def identifier(text: str, fallback: str) -> str:
    """``text`` as a catalog name: every run of other characters becomes one ``_``, a
    leading digit gets one (``get /pets/{id}`` → ``get_pets_id``)."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", text)
    name = re.sub(r"_*([.-])_*", r"\1", name)
    name = re.sub(r"_{2,}", "_", name).strip("_.-")
    if not name:
        return fallback
    return name if NAME.match(name) else f"_{name}"


def tool_identifier(title: str, fallback: str = "api") -> str:
    """A document title as a tool name: lower case, words joined by ``_``
    (``Twilio - Api`` → ``twilio_api``)."""
    name = re.sub(r"[^a-z0-9]+", "_", title.lower()).strip("_")
    if not name:
        return fallback
    return name if NAME.match(name) else f"_{name}"
