"""Large catalogs: choose which capabilities the planner sees, within a prompt budget.

With hundreds or thousands of capabilities the full catalog no longer fits a prompt (or
costs more than the plan is worth). The capabilities are ranked against the query
(:mod:`planners._ranking`: fielded BM25 over names, tool, descriptions and parameters)
and shown in tiers, each cheaper per capability than the one before:

* **full signatures** for the best ranked (a few hundred characters each: every
  parameter with its type, constraints and description);
* **abridged signatures** for the next best — the capability's key, the first sentence
  of its description and its parameters as one typed line (``{city: string, days?:
  integer, unit: "c" | "f"}``), a hundred-odd characters — enough to plan with, and the
  full signature is one request away;
* a **names-only table** — ``tool.capability`` alone, about thirty characters, grouped by
  tool — of every other capability when all the names fit in :data:`NAMES_MAX_SHARE` of
  the budget (about 1,500 capabilities at the default budget), else of the best after
  the abridged ones, in what is left.

A plan needs a signature to write parameters, but the planner only needs a name to know
a capability exists: it can ask for the signatures of what it saw by name
(:mod:`planners._catalog_request`). So a capability the ranking placed badly is still in
front of the planner, and a miss of the ranking costs one more LLM call instead of the run.

The ranking is deterministic (ties keep catalog order), so the same query over the same
catalog always yields the same prompt. A capability whose description names another one
(``call stocks.lookup first``) pulls that one in right after it, since the planner will
need both.

Everything that does not depend on the query — the index, each capability's rendered
blocks and their sizes, the capabilities its description names — is built
once per catalog content (:class:`SelectionIndex`) and reused by every run, so a
selection costs the ranking plus a walk down the best few hundred.
"""

from __future__ import annotations

import operator
import re
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestration.capability import Capability
from planners._ranking import CatalogIndex, tokenize
from planners.signatures import SignatureRenderer

_SEPARATOR = 2  # the blank line between two capability blocks
_COMPACT_LINE = 110  # longest compact entry's description, in characters
_SKIPS = 8  # capabilities too large for what is left, passed over before giving up

COMPACT_SHARE = 0.6
"""Share of what the signatures may spend that goes to abridged ones (measured with
``benchmarks/selection.py``: more right capabilities with a signature, the best ranked
still in full)."""
NAMES_SHARE = 0.3
"""Share of the catalog budget kept for the names-only table when not every name fits
(measured with ``benchmarks/selection.py``)."""
NAMES_MAX_SHARE = 0.75
"""Largest share of the catalog budget the names-only table may take to name every
capability; a catalog whose names need more gets the best ranked in :data:`NAMES_SHARE`."""
_NAMES_LINE = 160  # names-only lines are wrapped at about this many characters


def first_line(text: str) -> str:
    """The first sentence (or line) of a description, cut to :data:`_COMPACT_LINE`."""
    text = " ".join(text.split())
    match = re.search(r"(?<=[.!?])\s", text)
    if match:
        text = text[:match.start()]
    if len(text) > _COMPACT_LINE:
        text = text[:_COMPACT_LINE - 1].rstrip() + "…"
    return text


def name_cost(key: str) -> int:
    """Characters one name takes in the names-only table: the key and its separator."""
    return len(key) + 2


def names_table(keys: Sequence[str], tools: Sequence[str]) -> list[str]:
    """``keys`` grouped by tool (tools in order of first appearance, keys in the given
    order within a tool), a line per tool wrapped near :data:`_NAMES_LINE` characters.
    Never longer than ``sum(name_cost(k))``."""
    groups: dict[str, list[str]] = defaultdict(list)
    for key, tool in zip(keys, tools, strict=True):
        groups[tool].append(key)
    lines: list[str] = []
    for members in groups.values():
        start, width = 0, -2
        for at, key in enumerate(members):
            width += len(key) + 2
            if width > _NAMES_LINE and at > start:
                lines.append(", ".join(members[start:at]))
                start, width = at, len(key)
        lines.append(", ".join(members[start:]))
    return lines


def compact_entry(cap: Capability) -> str:
    """One line describing ``cap``: ``- tool.capability: first line``."""
    line = first_line(cap.description)
    return f"- {cap.key}: {line}" if line else f"- {cap.key}"


_ABRIDGING = SignatureRenderer(max_depth=2, max_inline=240, max_enum=12)


def abridged_block(cap: Capability) -> str:
    """An abridged signature: the key, the first sentence of the description, and the
    parameters on one typed line (names, types, optional ones marked ``?``, enum
    members; no descriptions or constraints)."""
    line = first_line(cap.description)
    params = _ABRIDGING.inline(cap.input_schema) if cap.input_schema else "{}"
    return "\n".join([f"### {cap.key}", *([line] if line else []), f"params: {params}"])


_FINDERS = frozenset(tokenize("search find list lookup query browse"))


def _id_entities(cap: Capability) -> list[str]:
    """The things ``cap`` needs an id of: ``movie`` for a required ``movie_id``/``movieId``."""
    schema = cap.input_schema if isinstance(cap.input_schema, dict) else {}
    required = schema.get("required")
    entities: list[str] = []
    if not isinstance(required, list):
        return entities
    for name in required:
        words = tokenize(str(name))
        if len(words) >= 2 and words[-1] == "id":
            entities.append(words[-2])
    return entities


def _id_producers(capabilities: Sequence[Capability]) -> list[list[int]]:
    """For each capability, the capability of the same tool that finds what it needs an id
    of (``tmdb.search_movie`` for ``tmdb.movie_credits(movie_id)``): the plan will need
    both, and users rarely name the search step."""
    finders: dict[tuple[str, str], list[int]] = defaultdict(list)
    for position, cap in enumerate(capabilities):
        words = set(tokenize(cap.name))
        if words & _FINDERS:
            needs = set(_id_entities(cap))
            for word in words - _FINDERS - needs:
                finders[(cap.tool, word)].append(position)
    out: list[list[int]] = []
    for position, cap in enumerate(capabilities):
        found = []
        for entity in _id_entities(cap):
            candidates = [p for p in finders.get((cap.tool, entity), ()) if p != position]
            if candidates:  # the most specific: the shortest name
                found.append(min(candidates, key=lambda p: (len(capabilities[p].name), p)))
        out.append(found)
    return out


def _mentioned_keys(cap: Capability, keys: Mapping[str, int]) -> list[int]:
    """Positions of the capabilities whose ``tool.name`` key ``cap``'s description names."""
    found = re.findall(r"[A-Za-z_][A-Za-z0-9_-]*\.[A-Za-z_][A-Za-z0-9_.-]*", cap.description)
    return [keys[k] for k in dict.fromkeys(w.rstrip(".") for w in found)
            if k in keys and k != cap.key]


class SelectionIndex:
    """What selection needs of one catalog, worked out once and reused across runs.

    Blocks are rendered on first use (rendering resolves ``$ref``s and walks schemas,
    ~0.4 ms a capability), so a 10,000-capability catalog renders only the few hundred
    that ever rank high, and each only once.
    """

    def __init__(
        self,
        capabilities: Sequence[Capability],
        tool_descriptions: Mapping[str, str] | None,
        render: Callable[[Capability], str],
    ) -> None:
        self.capabilities = list(capabilities)
        self.tool_descriptions = dict(tool_descriptions or {})
        self.render = render
        self.ranking = CatalogIndex(self.capabilities, tool_descriptions)
        self.keys = [c.key for c in self.capabilities]
        self.positions = {k: i for i, k in enumerate(self.keys)}
        self.tools = [c.tool for c in self.capabilities]
        self.name_costs = [name_cost(k) for k in self.keys]
        self.names_chars = sum(self.name_costs)  # every name, listed once
        producers = _id_producers(self.capabilities)
        self.mentions = [list(dict.fromkeys([*_mentioned_keys(c, self.positions), *producers[i]]))
                         for i, c in enumerate(self.capabilities)]
        self._blocks: dict[int, str] = {}
        self._abridged: dict[int, str] = {}
        self._fits: dict[int, bool] = {}  # budget -> whether the whole catalog fits
        self._whole: dict[int, Selection] = {}  # budget -> the selection of every capability

    def whole(self, budget_chars: int) -> Selection:
        """The selection that offers every capability in full (when they fit): the same
        for every query, so made once per budget and shared by the runs that use it (it
        is read, never changed)."""
        selection = self._whole.get(budget_chars)
        if selection is None:
            caps = self.capabilities
            rendered = {c.key: self.block(i) for i, c in enumerate(caps)}
            used = sum(len(t) + _SEPARATOR for t in rendered.values()) - _SEPARATOR
            selection = Selection(list(caps), rendered, max(used, 0), budget_chars, False, caps)
            self._whole[budget_chars] = selection
        return selection

    def block(self, position: int) -> str:
        text = self._blocks.get(position)
        if text is None:
            text = self._blocks[position] = self.render(self.capabilities[position])
        return text

    def size(self, position: int) -> int:
        return len(self.block(position)) + _SEPARATOR

    def abridged(self, position: int) -> str:
        text = self._abridged.get(position)
        if text is None:
            text = self._abridged[position] = abridged_block(self.capabilities[position])
        return text

    def serves(self, capabilities: Sequence[Capability], tool_descriptions: Mapping[str, str]
               ) -> bool:
        """Whether this index was built from these very capability objects (a refresh or
        an edit replaces them) and tool descriptions: ~0.3 ms at 10,000 capabilities."""
        return (len(capabilities) == len(self.capabilities)
                and all(map(operator.is_, capabilities, self.capabilities))
                and tool_descriptions == self.tool_descriptions)

    def fits_whole(self, budget: int) -> bool:
        """Whether every block fits ``budget`` (renders only until it cannot)."""
        known = self._fits.get(budget)
        if known is None:
            used = -_SEPARATOR
            for position in range(len(self.capabilities)):
                used += self.size(position)
                if used > budget:
                    break
            known = self._fits[budget] = used <= budget
        return known


@dataclass
class Selection:
    """Which capabilities the prompt offers and which it leaves out, and why."""

    offered: list[Capability]  # shown with their full signature, in catalog order
    rendered: dict[str, str]  # capability key -> its rendered block, for the offered ones
    catalog_chars: int  # length of the full-signature section as rendered
    budget_chars: int  # what the catalog section was allowed
    ranked: bool  # False when the whole catalog fitted and no ranking was needed
    catalog: Sequence[Capability] = ()  # every capability, in catalog order
    scores: dict[str, float] = field(default_factory=dict)  # of those shown
    compact: list[Capability] = field(default_factory=list)  # shown abridged
    compact_blocks: list[str] = field(default_factory=list)
    names: list[Capability] = field(default_factory=list)  # listed by name only
    names_lines: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "\n\n".join(self.rendered[c.key] for c in self.offered)

    @property
    def compact_text(self) -> str:
        return "\n\n".join(self.compact_blocks)

    @property
    def names_text(self) -> str:
        return "\n".join(self.names_lines)

    @property
    def shown(self) -> list[Capability]:
        """The capabilities the prompt gives a signature, full then abridged (a plan may
        use these as they stand; names-only ones are asked for first)."""
        return [*self.offered, *self.compact]

    @property
    def unlisted_count(self) -> int:
        """Capabilities the prompt does not name at all."""
        return len(self.catalog) - len(self.offered) - len(self.compact) - len(self.names)

    @property
    def omitted_count(self) -> int:
        """Capabilities not shown in full (the abridged and named ones included)."""
        return len(self.catalog) - len(self.offered)

    @property
    def omitted(self) -> list[Capability]:
        """The capabilities not shown in full, in catalog order (built on demand: at
        10,000 capabilities the list costs more than the rest of a selection)."""
        return [c for c in self.catalog if c.key not in self.rendered]

    def trace_attributes(self, limit: int = 50) -> dict[str, Any]:
        """Bounded span attributes: counts, and the first ``limit`` names left out."""
        listed = {c.key for c in (*self.compact, *self.names)}
        unlisted = self.unlisted_count
        names: list[str] = []
        for cap in self.catalog:
            if len(names) >= limit:
                break
            if cap.key not in self.rendered and cap.key not in listed:
                names.append(cap.key)
        shown = ",".join(names)
        if unlisted > limit:
            shown += f",… (+{unlisted - limit})"
        return {
            "catalog.size": len(self.catalog),
            "catalog.offered": len(self.offered),
            "catalog.compact": len(self.compact),
            "catalog.names": len(self.names),
            "catalog.omitted": self.omitted_count,
            "catalog.omitted_names": shown,
            "catalog.chars": self.catalog_chars,
            "catalog.budget_chars": self.budget_chars,
            "catalog.ranked": self.ranked,
        }


def select(
    index: SelectionIndex,
    query: str,
    *,
    budget_chars: int,
    max_capabilities: int | None = None,
    compact_share: float = COMPACT_SHARE,
    names_share: float = NAMES_SHARE,
    order: Sequence[int] | None = None,
) -> Selection:
    """The capabilities to show for ``query``: all if they fit, else the most relevant in
    full, the next ones abridged, and the rest by name (all of them when their names fit
    in :data:`NAMES_MAX_SHARE` of the budget, else the next best).

    ``order`` replaces the lexical ranking (a fused hybrid ranking, say). Always offers at
    least one capability in full (the best ranked), even when it alone exceeds
    ``budget_chars``: a prompt without any capability cannot produce a plan.
    """
    caps = index.capabilities
    limit = max_capabilities if max_capabilities is not None else len(caps)
    if len(caps) <= limit and index.fits_whole(budget_chars):
        return index.whole(budget_chars)

    totals = index.ranking.scores(query)
    ranked = index.ranking.ranked(query, totals) if order is None else order
    keys, costs = index.keys, index.name_costs
    # every name fits: book them all, and each capability shown with a signature gives
    # its name's place back (it is not listed twice)
    every_name = index.names_chars <= budget_chars * NAMES_MAX_SHARE
    booked = index.names_chars if every_name else 0
    tiers = budget_chars - booked if every_name else int(budget_chars * (1 - names_share))
    full_budget = int(tiers * (1 - compact_share))
    chosen: list[int] = []
    compact: list[int] = []
    named: list[int] = []
    taken: set[int] = set()
    used = -_SEPARATOR  # the full-signature section, as rendered
    spent = 0  # what the signatures cost beyond the booked names
    skips = 0

    def refund(position: int) -> int:
        return costs[position] if every_name else 0

    def take(position: int) -> bool:
        nonlocal used, spent
        if position in taken or len(chosen) >= limit:
            return False
        cost = index.size(position)
        if chosen and spent + cost - refund(position) > full_budget:
            return False
        chosen.append(position)
        taken.add(position)
        used += cost
        spent += cost - refund(position)
        return True

    # one walk down the ranking: each capability goes to the first tier with room for it;
    # signatures only for capabilities that match the query (but always one), the
    # others at most by name
    full_open = compact_open = True
    left = budget_chars - tiers  # the names-only table's room once the signatures close
    matched = len(ranked)
    for at, position in enumerate(index.ranking.order(ranked)):
        if position in taken:
            continue
        if at >= matched and chosen and (full_open or compact_open):
            full_open = compact_open = False
            if every_name:
                break
            left = budget_chars - max(spent, 0)
        if full_open:
            if take(position):
                for other in index.mentions[position]:
                    take(other)
                continue
            skips += 1
            full_open = len(chosen) < limit and skips <= _SKIPS
        if compact_open:
            cost = len(index.abridged(position)) + _SEPARATOR - refund(position)
            if spent + cost <= tiers:
                compact.append(position)
                taken.add(position)
                spent += cost
                continue
            compact_open = False
            if every_name:
                break  # the names-only table lists the rest
            left = budget_chars - max(spent, 0)
        if costs[position] > left:
            break
        named.append(position)
        left -= costs[position]
    if every_name:  # every other capability, in catalog order
        named = [p for p in range(len(caps)) if p not in taken]

    full = sorted(chosen)  # catalog order reads better
    tools = index.tools
    return Selection(
        [caps[i] for i in full], {keys[i]: index.block(i) for i in full}, max(used, 0),
        budget_chars, True, caps,
        {keys[p]: totals[p] for p in (*full, *compact) if p in totals},
        [caps[i] for i in compact], [index.abridged(i) for i in compact],
        [caps[i] for i in named],
        names_table([keys[i] for i in named], [tools[i] for i in named]))


def select_capabilities(
    query: str,
    capabilities: Sequence[Capability],
    render: Callable[[Capability], str],
    *,
    budget_chars: int,
    max_capabilities: int | None = None,
    tool_descriptions: dict[str, str] | None = None,
    compact_share: float = COMPACT_SHARE,
    names_share: float = NAMES_SHARE,
) -> Selection:
    """:func:`select` over an index built for this call alone (tests, one-off use)."""
    index = SelectionIndex(capabilities, tool_descriptions, render)
    return select(index, query, budget_chars=budget_chars, max_capabilities=max_capabilities,
                  compact_share=compact_share, names_share=names_share)
