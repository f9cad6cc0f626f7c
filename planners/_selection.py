"""Large catalogs: choose which capabilities the planner sees, within a prompt budget.

With hundreds of capabilities the full catalog no longer fits a prompt (or costs more
than the plan is worth). The capabilities are ranked against the query with Okapi BM25
over their names, descriptions and parameter names, and the best ones are offered until
the budget is spent. The ranking is deterministic (ties keep catalog order), so the same
query over the same catalog always yields the same prompt. A capability whose description
names another one (``call stocks.lookup first``) pulls that one in right after it, since
the planner will need both.

BM25 is written out here (a few lines of arithmetic over token counts) rather than taken
from a package: the maintained implementations bring numpy/scipy into a library whose
catalogs have hundreds, not millions, of documents.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestration.capability import Capability

_WORD = re.compile(r"[A-Za-z][a-z]+|[A-Z]+(?![a-z])|\d+")
_STOPWORDS = frozenset({
    "a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "get", "give", "in",
    "into", "is", "it", "its", "me", "my", "of", "on", "or", "please", "the", "this", "to",
    "what", "which", "with", "you", "your",
})


def tokenize(text: str) -> list[str]:
    """Lower-case words of ``text``; camelCase and snake_case split, plurals folded."""
    words = []
    for raw in _WORD.findall(text):
        word = raw.lower()
        if word in _STOPWORDS:
            continue
        if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
            word = word[:-1]
        words.append(word)
    return words


def _schema_words(schema: Any, depth: int = 0) -> Iterable[str]:
    """Parameter names (nested ones too) and their descriptions."""
    if not isinstance(schema, dict) or depth > 3:
        return
    props = schema.get("properties")
    if isinstance(props, dict):
        for name, sub in props.items():
            yield str(name)
            if isinstance(sub, dict):
                if isinstance(sub.get("description"), str):
                    yield sub["description"]
                yield from _schema_words(sub, depth + 1)
    items = schema.get("items")
    if isinstance(items, dict):
        yield from _schema_words(items, depth + 1)


def capability_document(cap: Capability, tool_description: str = "") -> list[str]:
    """The tokens BM25 indexes for a capability; names count twice (they are dense)."""
    names = f"{cap.tool} {cap.name}"
    text = " ".join([names, names, cap.description, tool_description,
                     *_schema_words(cap.input_schema)])
    return tokenize(text)


class BM25:
    """Okapi BM25 (``k1``, ``b``) over pre-tokenised documents."""

    def __init__(self, documents: Sequence[list[str]], *, k1: float = 1.5, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self.counts = [Counter(doc) for doc in documents]
        self.lengths = [len(doc) for doc in documents]
        self.avg_length = (sum(self.lengths) / len(documents)) if documents else 0.0
        df: Counter[str] = Counter()
        for counts in self.counts:
            df.update(counts.keys())
        n = len(documents)
        # The "+1" form keeps idf positive for terms found in most documents.
        self.idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}

    def scores(self, query: list[str]) -> list[float]:
        terms = [t for t in dict.fromkeys(query) if t in self.idf]
        out = []
        for counts, length in zip(self.counts, self.lengths, strict=True):
            norm = self.k1 * (1 - self.b + self.b * length / (self.avg_length or 1.0))
            score = 0.0
            for term in terms:
                tf = counts.get(term, 0)
                if tf:
                    score += self.idf[term] * tf * (self.k1 + 1) / (tf + norm)
            out.append(score)
        return out


@dataclass
class Selection:
    """Which capabilities the prompt offers and which it leaves out, and why."""

    offered: list[Capability]
    omitted: list[Capability]
    rendered: dict[str, str]  # capability key -> its rendered block, for the offered ones
    catalog_chars: int  # length of the catalog section as rendered
    budget_chars: int  # what the catalog section was allowed
    ranked: bool  # False when the whole catalog fitted and no ranking was needed
    scores: dict[str, float] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return "\n\n".join(self.rendered[c.key] for c in self.offered)

    def trace_attributes(self, limit: int = 50) -> dict[str, Any]:
        """Bounded span attributes: counts, and the first ``limit`` omitted names."""
        names = [c.key for c in self.omitted]
        shown = ",".join(names[:limit])
        if len(names) > limit:
            shown += f",… (+{len(names) - limit})"
        return {
            "catalog.size": len(self.offered) + len(self.omitted),
            "catalog.offered": len(self.offered),
            "catalog.omitted": len(self.omitted),
            "catalog.omitted_names": shown,
            "catalog.chars": self.catalog_chars,
            "catalog.budget_chars": self.budget_chars,
            "catalog.ranked": self.ranked,
        }


_SEPARATOR = 2  # the blank line between two capability blocks


def select_capabilities(
    query: str,
    capabilities: Sequence[Capability],
    render: Callable[[Capability], str],
    *,
    budget_chars: int,
    max_capabilities: int | None = None,
    tool_descriptions: dict[str, str] | None = None,
) -> Selection:
    """The capabilities to show for ``query``: all if they fit, else the most relevant.

    Always offers at least one capability (the best ranked), even when it alone exceeds
    ``budget_chars``: a prompt without any capability cannot produce a plan.
    """
    rendered = {c.key: render(c) for c in capabilities}
    sizes = {key: len(text) + _SEPARATOR for key, text in rendered.items()}
    total = sum(sizes.values()) - (_SEPARATOR if capabilities else 0)
    limit = max_capabilities if max_capabilities is not None else len(capabilities)
    if total <= budget_chars and len(capabilities) <= limit:
        return Selection(list(capabilities), [], rendered, max(total, 0), budget_chars, False)

    descriptions = tool_descriptions or {}
    index = BM25([capability_document(c, descriptions.get(c.tool, "")) for c in capabilities])
    raw = index.scores(tokenize(query))
    scores = {c.key: s for c, s in zip(capabilities, raw, strict=True)}
    order = sorted(range(len(capabilities)), key=lambda i: (-raw[i], i))
    by_key = {c.key: c for c in capabilities}

    chosen: list[Capability] = []
    chosen_keys: set[str] = set()
    used = 0

    def take(cap: Capability) -> bool:
        nonlocal used
        if cap.key in chosen_keys or len(chosen) >= limit:
            return False
        cost = sizes[cap.key]
        if chosen and used + cost - _SEPARATOR > budget_chars:
            return False
        chosen.append(cap)
        chosen_keys.add(cap.key)
        used += cost
        return True

    for i in order:
        cap = capabilities[i]
        if take(cap):
            for other in _mentioned(cap, by_key):
                take(other)
        if len(chosen) >= limit:
            break
    chosen_keys = {c.key for c in chosen}
    offered = [c for c in capabilities if c.key in chosen_keys]  # catalog order reads better
    omitted = [c for c in capabilities if c.key not in chosen_keys]
    kept = {c.key: rendered[c.key] for c in offered}
    return Selection(offered, omitted, kept, max(used - _SEPARATOR, 0), budget_chars, True,
                     scores)


def _mentioned(cap: Capability, by_key: dict[str, Capability]) -> list[Capability]:
    """Capabilities whose ``tool.name`` key appears in ``cap``'s description."""
    found = re.findall(r"[A-Za-z_][A-Za-z0-9_-]*\.[A-Za-z_][A-Za-z0-9_.-]*", cap.description)
    return [by_key[k] for k in dict.fromkeys(w.rstrip(".") for w in found)
            if k in by_key and k != cap.key]
