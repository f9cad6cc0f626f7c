"""The planner's request for more of the catalog, instead of a plan (a tool-search round).

When a large catalog was cut to fit the prompt, the planner may answer with

    {"need": {"capabilities": ["tool.capability", ...], "search": "words for what is missing"}}

and the engine answers with the full signatures of the capabilities named (abridged or
listed by name in the prompt, or anywhere in the catalog) and of the best matches for the
search text that were not shown yet, then asks for the plan again. This module reads such an answer and works
out what to send back; :class:`planners.planner.Planner` runs the round.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from orchestration._json import extract_json
from orchestration.capability import Capability
from planners._selection import SelectionIndex

MAX_NAMES = 20
"""Most capability names honoured in one request."""
SEARCH_RESULTS = 8
"""Capabilities sent for a search text (the best not already shown in full)."""
_MAX_SEARCH = 500  # characters of search text used


@dataclass(frozen=True)
class CatalogRequest:
    """What the planner asked for: capability keys and/or a search text."""

    names: list[str]
    search: str = ""


@dataclass
class CatalogAnswer:
    """What the engine sends back for a :class:`CatalogRequest`."""

    found: list[Capability] = field(default_factory=list)  # named ones that exist
    searched: list[Capability] = field(default_factory=list)  # matches for the search text
    unknown: list[str] = field(default_factory=list)  # names not in the catalog
    already: list[str] = field(default_factory=list)  # named ones already shown in full

    @property
    def capabilities(self) -> list[Capability]:
        return [*self.found, *self.searched]


def parse_request(text: str, max_depth: int) -> CatalogRequest | None:
    """The request in an answer, or None when the answer is not one (a plan, or junk
    that plan parsing will report)."""
    try:
        data = extract_json(text, max_depth=max_depth)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("steps"):
        return None
    need = data.get("need")
    if not isinstance(need, dict):
        return None
    names = need.get("capabilities") or []
    search = need.get("search") or ""
    if not isinstance(names, list) or not isinstance(search, str):
        return None
    keys = [_key(n) for n in names[:MAX_NAMES] if isinstance(n, str | dict)]
    request = CatalogRequest([k for k in dict.fromkeys(keys) if k], search.strip()[:_MAX_SEARCH])
    return request if request.names or request.search else None


NEED_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "capabilities": {"type": "array", "items": {"type": "string"}},
        "search": {"type": "string"},
    },
}


def allow_request(schema: dict[str, Any]) -> dict[str, Any]:
    """The plan answer's schema, widened so that a request (``need``) is allowed too."""
    wider = dict(schema)
    wider["properties"] = {**schema["properties"], "need": NEED_SCHEMA}
    wider["required"] = []
    return wider


def _key(item: Any) -> str:
    """``"tool.capability"``, or ``{"tool": ..., "capability": ...}``, as a key."""
    if isinstance(item, dict):
        tool, cap = item.get("tool"), item.get("capability")
        return f"{tool}.{cap}" if isinstance(tool, str) and isinstance(cap, str) else ""
    return item.strip().lstrip("#").strip()


def answer_request(
    request: CatalogRequest, index: SelectionIndex, shown_in_full: set[str]
) -> CatalogAnswer:
    """The capabilities to send for ``request``: each named one that exists and was not
    already shown in full, then the best matches for the search text not yet shown."""
    answer = CatalogAnswer()
    sent = set(shown_in_full)
    for name in request.names:
        position = index.positions.get(name)
        if position is None:
            answer.unknown.append(name)
        elif name in sent:
            answer.already.append(name)
        else:
            answer.found.append(index.capabilities[position])
            sent.add(name)
    if request.search:
        totals = index.ranking.scores(request.search)
        for position in index.ranking.ranked(request.search, totals):
            if totals.get(position, 0.0) <= 0.0:
                break  # the rest share no word with the search
            cap = index.capabilities[position]
            if cap.key not in sent:
                answer.searched.append(cap)
                sent.add(cap.key)
                if len(answer.searched) >= SEARCH_RESULTS:
                    break
    return answer
