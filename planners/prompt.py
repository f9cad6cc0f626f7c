"""The planner's prompts: user-overridable templates filled with the (selected) catalog.

Templates are ``string.Template`` texts (``$name`` placeholders, ``$$`` for a dollar), so
the JSON braces and ``{{step.field}}`` references they contain need no escaping. The
defaults live in ``planners/templates/*.txt``; :meth:`PlannerTemplates.from_dir` reads a
directory holding any subset of those files, and the constructor takes texts directly.
Placeholders are checked when templates are built, so a typo fails at start-up rather
than in the middle of a run.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from functools import partial
from importlib import resources
from pathlib import Path
from string import Template
from typing import Any

from orchestration._text import data_block
from orchestration.catalog import Capability, Catalog
from orchestration.config import OrchestratorConfig
from planners._selection import Selection, SelectionIndex, select
from planners.signatures import SignatureRenderer, render_raw_capability

__all__ = [
    "TEMPLATE_FIELDS",
    "BuiltPrompt",
    "PlannerTemplates",
    "PromptBuilder",
    "default_template"
]

TEMPLATE_FIELDS: dict[str, frozenset[str]] = {
    "system": frozenset({"type_rules", "example", "capabilities", "omitted_note"}),
    "user": frozenset({"query", "history"}),
    "type_rules": frozenset(),
    "example": frozenset(),
    "replan_system": frozenset({"type_rules", "capabilities", "omitted_note", "taken_ids"}),
    "replan_user": frozenset({"query", "plan", "completed", "failures", "skipped"}),
    "request_note": frozenset({"rounds"}),
    "request_answer": frozenset({"capabilities", "notes", "more"}),
}
"""Each template and the placeholders it may use."""


def default_template(name: str) -> str:
    """The text of a bundled template (``planners/templates/<name>.txt``)."""
    return resources.files("planners.templates").joinpath(f"{name}.txt").read_text("utf-8")


def _default(name: str) -> Any:
    return field(default_factory=partial(default_template, name))


@dataclass(frozen=True)
class PlannerTemplates:
    """The texts the planner's prompts are made from; each one can be replaced.

    ``system``/``user``: the plan request. ``type_rules`` and ``example`` are inserted
    only while ``prompt_type_guidance`` is on. ``replan_system``/``replan_user``: the
    repair request after steps failed for good. ``request_note``: how the planner may ask
    for capabilities left out of a large catalog (added to the omitted note);
    ``request_answer``: the engine's reply to such a request.
    """

    system: str = _default("system")
    user: str = _default("user")
    type_rules: str = _default("type_rules")
    example: str = _default("example")
    replan_system: str = _default("replan_system")
    replan_user: str = _default("replan_user")
    request_note: str = _default("request_note")
    request_answer: str = _default("request_answer")

    def __post_init__(self) -> None:
        for name, allowed in TEMPLATE_FIELDS.items():
            template = Template(getattr(self, name))
            if not template.is_valid():
                raise ValueError(f"planner template {name!r} has a malformed $placeholder "
                                 "(write $$ for a literal dollar)")
            unknown = set(template.get_identifiers()) - allowed
            if unknown:
                raise ValueError(
                    f"planner template {name!r} uses unknown placeholder(s) "
                    f"{', '.join(sorted('$' + u for u in unknown))}; it may use "
                    f"{', '.join(sorted('$' + a for a in allowed)) or 'none'}"
                )

    @classmethod
    def from_dir(cls, directory: str | os.PathLike[str]) -> PlannerTemplates:
        """Templates from ``<directory>/<name>.txt``; files not there keep the default."""
        path = Path(directory)
        if not path.is_dir():
            raise ValueError(f"planner template directory {path} does not exist")
        names = {f.name for f in fields(cls)}
        strays = sorted(p.stem for p in path.glob("*.txt") if p.stem not in names)
        if strays:
            raise ValueError(f"{path}: unknown planner template(s) {', '.join(strays)}; "
                             f"known: {', '.join(sorted(names))}")
        found = {name: (path / f"{name}.txt").read_text("utf-8")
                 for name in names if (path / f"{name}.txt").is_file()}
        return cls(**found)

    def render(self, name: str, **values: str) -> str:
        return Template(getattr(self, name)).substitute(values)


@dataclass
class BuiltPrompt:
    """The messages of one planner request and the catalog selection behind them."""

    messages: list[dict[str, str]]
    selection: Selection
    index: SelectionIndex | None = None  # what the selection was made from (ranked only)
    requests_allowed: int = 0  # catalog requests the prompt invited

    @property
    def chars(self) -> int:
        """Prompt size as the budget counts it: the contents plus a blank line between."""
        return sum(len(m["content"]) for m in self.messages) + _JOIN * (len(self.messages) - 1)


class PromptBuilder:
    """Fills the templates: capability signatures (layer 1) or raw schemas, within budget."""

    def __init__(
        self,
        templates: PlannerTemplates | None = None,
        renderer: SignatureRenderer | None = None,
    ) -> None:
        self.templates = templates or PlannerTemplates()
        self.renderer = renderer or SignatureRenderer()
        # rendered blocks by capability key, kept while the catalog holds the same
        # capability object (a refresh replaces it): rendering resolves the schema's
        # $refs and walks it, ~0.4 ms a capability, on every planning call otherwise
        self._blocks: dict[tuple[str, bool], tuple[Capability, str]] = {}
        # the selection index of the last catalog seen, per guidance mode
        self._indexes: dict[bool, SelectionIndex] = {}

    def capability_block(self, cap: Capability, guidance: bool) -> str:
        """One capability: a typed signature, or (guidance off) its raw JSON schemas."""
        cached = self._blocks.get((cap.key, guidance))
        if cached is not None and cached[0] is cap:
            return cached[1]
        text = self.renderer.capability(cap) if guidance else render_raw_capability(cap)
        self._blocks[(cap.key, guidance)] = (cap, text)
        return text

    def selection_index(
        self, catalog: Catalog, guidance: bool, capabilities: Sequence[Capability] | None = None
    ) -> SelectionIndex:
        """The ranking index and rendered blocks of ``catalog``, built once per catalog
        content (the same capability objects and tool descriptions) and reused."""
        caps = list(catalog) if capabilities is None else list(capabilities)
        tools = catalog.tools
        index = self._indexes.get(guidance)
        if index is None or not index.serves(caps, tools):
            index = SelectionIndex(caps, tools, lambda c: self.capability_block(c, guidance))
            self._indexes[guidance] = index
        return index

    async def prepare(self, catalog: Catalog, config: OrchestratorConfig) -> None:
        """Build the selection index off the event loop when the catalog changed (a
        10,000-capability index takes about a second to build); on a loop that has no
        threads to offer (a Temporal workflow's), build it in place: it is pure
        computation, so a replay builds the same."""
        guidance = config.prompt_type_guidance
        caps = list(catalog)
        index = self._indexes.get(guidance)
        if index is None or not index.serves(caps, catalog.tools):
            try:
                await asyncio.to_thread(self.selection_index, catalog, guidance, caps)
            except NotImplementedError:  # a loop without threads: a Temporal workflow's
                self.selection_index(catalog, guidance, caps)

    def plan_prompt(
        self, query: str, catalog: Catalog, config: OrchestratorConfig, *,
        requests: int | None = None, order: Sequence[int] | None = None, history: str = "",
    ) -> BuiltPrompt:
        """The plan request. ``requests``: catalog requests to invite when the catalog is
        cut (default ``planner_catalog_requests``); ``order``: a ranking to use instead of
        the lexical one (positions in the catalog, best first); ``history``: the session's
        earlier runs (``planners/_session_view.py``), in the user message before the
        request (a custom ``user`` template without ``$history`` gets it prepended)."""
        guidance = config.prompt_type_guidance
        user = self.templates.render("user", query=data_block("query", query), history=history)
        if history and "history" not in Template(self.templates.user).get_identifiers():
            user = f"{history}\n\n{user}"
        user = user.lstrip("\n")
        values = {
            "type_rules": self.templates.type_rules if guidance else "",
            "example": self.templates.example if guidance else "",
        }
        rounds = config.planner_catalog_requests if requests is None else requests
        return self._assemble("system", values, user, query, catalog, config, rounds, order)

    def replan_prompt(
        self,
        query: str,
        catalog: Catalog,
        config: OrchestratorConfig,
        *,
        search_text: str,
        taken_ids: list[str],
        blocks: dict[str, str],
    ) -> BuiltPrompt:
        """The repair request; ``blocks`` fills ``plan``, ``completed``, ``failures``, ``skipped``."""
        user = self.templates.render("replan_user", query=data_block("query", query), **blocks)
        values = {
            "type_rules": self.templates.type_rules if config.prompt_type_guidance else "",
            "taken_ids": ", ".join(taken_ids),
        }
        return self._assemble("replan_system", values, user, search_text, catalog, config, 0)

    def _assemble(
        self,
        system_template: str,
        values: dict[str, str],
        user: str,
        search_text: str,
        catalog: Catalog,
        config: OrchestratorConfig,
        requests: int,
        order: Sequence[int] | None = None,
    ) -> BuiltPrompt:
        index = self.selection_index(catalog, config.prompt_type_guidance)
        request_note = (self.templates.render("request_note", rounds=str(requests))
                        if requests > 0 else "")
        # the note's frame, the headings of the abridged signatures and of the names-only
        # table included (what they list counts against the catalog's budget)
        count = len(index.capabilities)
        note_reserve = max(len(_omitted_note(count, " ", " ", unlisted, request_note))
                           for unlisted in (0, count))
        frame = self.templates.render(system_template, capabilities="", omitted_note="", **values)
        budget = (config.planner_prompt_budget_chars - len(frame) - len(user) - note_reserve
                  - _JOIN)
        selection = select(index, search_text, budget_chars=max(budget, 0),
                           max_capabilities=config.planner_max_capabilities, order=order)
        left_out = selection.omitted_count
        note = (_omitted_note(left_out, selection.compact_text, selection.names_text,
                              selection.unlisted_count, request_note)
                if left_out else "")
        system = self.templates.render(
            system_template, capabilities=selection.text, omitted_note=note, **values)
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        return BuiltPrompt(messages, selection, index if selection.ranked else None,
                           requests if left_out else 0)

    def request_answer(self, capabilities: Sequence[Capability], notes: Sequence[str],
                       guidance: bool, more: int) -> str:
        """The engine's reply to a catalog request: the signatures asked for."""
        blocks = "\n\n".join(self.capability_block(c, guidance) for c in capabilities)
        tail = (f" You may ask once more ({more} request(s) left)." if more > 0 else
                " No more requests can be answered.")
        return self.templates.render(
            "request_answer", capabilities=blocks or "(none: see below)",
            notes="".join(f"\n{n}" for n in notes), more=tail)


_JOIN = 2  # the blank line between messages when they are counted as one text


def _omitted_note(count: int, compact: str, names: str, unlisted: int,
                  request_note: str) -> str:
    """What the prompt says about the capabilities not shown in full: the abridged
    signatures, the names-only table, and how many are not named at all."""
    text = (f"\n({count} other capabilities exist but are not shown in full: they match this "
            "request less well.)")
    if compact:
        text += ("\nMore capabilities, abridged: parameter names and types only (best match "
                 "first; a plan may use them too):\n\n" + compact + "\n")
    if names:
        text += ("\n" + ("Every other capability" if not unlisted else "Other capabilities")
                 + ", by name only, grouped by tool:\n" + names)
    if unlisted:
        text += (f"\n({unlisted} more are not listed{': ask with a search text' if request_note else ''}.)")
    text += "\n" + (request_note if request_note else "Plan with the capabilities above.")
    return text
