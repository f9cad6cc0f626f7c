"""Lexical ranking of capabilities against a query: fielded BM25 over an inverted index.

A capability is indexed as four fields weighted apart, because a word means more in some
places than in others: its name (``send_invoice`` names what it does), its tool's name
and description (the service it belongs to), its own description, and its parameters'
names and descriptions (what it takes). Scores follow BM25F: each field's term counts are
length-normalised on their own, weighted, summed into one pseudo-frequency, and saturated
once (Robertson & Zaragoza, *The Probabilistic Relevance Framework: BM25 and Beyond*).

Words are cut at case and underscore boundaries (``getWeatherForecast`` → ``get weather
forecast``), lower-cased, stripped of stopwords and stemmed with the Snowball (Porter 2)
English stemmer, so "forecasts", "forecasting" and "forecast" meet.

The index is built once per catalog (:class:`CatalogIndex`), and every (term, capability)
contribution is computed then, so a query only adds up precomputed numbers for the
capabilities that share a term with it: a few hundred microseconds at 10,000
capabilities, against tens of milliseconds to rebuild and score every document.
"""

from __future__ import annotations

import heapq
import math
import re
from bisect import bisect_left
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import islice
from operator import itemgetter
from typing import Any

import snowballstemmer

from orchestration.capability import Capability
from planners._lexicon import GROUPS

_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")
_STOPWORDS = frozenset((
    "a", "about", "after", "all", "also", "am", "an", "and", "any", "are", "as", "at",
    "be", "been", "but", "by", "can", "could", "do", "does", "for", "from", "get", "give",
    "has", "have", "he", "her", "him", "his", "how", "i", "if", "in", "into", "is", "it",
    "its", "just", "let", "me", "might", "my", "need", "no", "not", "of", "on", "or",
    "our", "please", "she", "should", "so", "some", "such", "than", "that", "the", "their",
    "them", "then", "there", "these", "they", "this", "those", "to", "too", "us", "want",
    "was", "we", "were", "what", "when", "where", "which", "while", "who", "whom", "why",
    "will", "with", "would", "you", "your",
))

FIELDS = ("name", "tool", "description", "params")
"""The fields a capability is indexed by, in the order :data:`FIELD_WEIGHTS` uses."""

FIELD_WEIGHTS: dict[str, float] = {"name": 3.0, "tool": 1.0, "description": 1.5, "params": 0.5}
"""How much a word counts in each field (measured with ``benchmarks/selection.py``)."""

_B: dict[str, float] = {"name": 0.5, "tool": 0.5, "description": 0.75, "params": 0.75}
_K1 = 1.2

PREFIX_WEIGHT = 0.5
"""Weight of an index term matched by prefix rather than whole (measured)."""
RELATED_WEIGHT = 0.3
"""Weight of a word of the same need (:mod:`planners._lexicon`) as a query word (measured)."""
RANKED_DEPTH = 1000
"""Most capabilities :meth:`CatalogIndex.ranked` orders by score (the rest follow in
catalog order): a prompt shows a few hundred at most."""
COMMON_SHARE = 0.1
"""Share of capabilities above which a term is too common to score (large catalogs)."""
SIBLING_TOOLS = 3
"""How many of the best-ranked capabilities lift the other capabilities of their tool."""
SIBLING_WEIGHT = 0.5
"""A lifted capability scores at least this share of its best-ranked sibling (measured)."""
SIBLING_MAX = 20
"""Tools with more capabilities than this are not lifted (a 600-operation API is not one
need, and lifting it would crowd out the other services a request names; measured)."""
_COMMON_MIN_SIZE = 500
_PREFIX_MIN = 4
_PREFIX_FANOUT = 16  # longest run of index terms one prefix may reach

_stemmer = snowballstemmer.stemmer("english")


@lru_cache(maxsize=65536)
def _stem(word: str) -> str:
    return str(_stemmer.stemWord(word))


@lru_cache(maxsize=1)
def _related() -> dict[str, frozenset[str]]:
    """Stem → the stems of the other words of its :mod:`planners._lexicon` groups."""
    found: dict[str, set[str]] = defaultdict(set)
    for group in GROUPS:
        stems = set(tokenize(group))
        for stem in stems:
            found[stem] |= stems - {stem}
    return {stem: frozenset(others) for stem, others in found.items()}


def tokenize(text: str) -> list[str]:
    """Index terms of ``text``: identifiers split, lower-cased, stopwords out, stemmed."""
    out = []
    for raw in _WORD.findall(text):
        word = raw.lower()
        if word in _STOPWORDS or (len(word) == 1 and not word.isdigit()):
            continue
        out.append(_stem(word))
    return out


def _schema_words(schema: Any, depth: int = 0) -> Iterable[str]:
    """Parameter names (nested ones too), their descriptions and enum members."""
    if not isinstance(schema, dict) or depth > 3:
        return
    props = schema.get("properties")
    if isinstance(props, dict):
        for name, sub in props.items():
            yield str(name)
            if isinstance(sub, dict):
                if isinstance(sub.get("description"), str):
                    yield sub["description"]
                if isinstance(sub.get("enum"), list):
                    yield " ".join(str(v) for v in sub["enum"][:20])
                yield from _schema_words(sub, depth + 1)
    items = schema.get("items")
    if isinstance(items, dict):
        yield from _schema_words(items, depth + 1)


def capability_fields(cap: Capability, tool_description: str = "") -> dict[str, list[str]]:
    """The tokens of each field of ``cap``."""
    return {
        "name": tokenize(cap.name),
        "tool": tokenize(f"{cap.tool} {tool_description}"),
        "description": tokenize(cap.description),
        "params": tokenize(" ".join(_schema_words(cap.input_schema))),
    }


@dataclass(frozen=True)
class RankingWeights:
    """BM25F parameters: per-field weights and length normalisation, and ``k1``."""

    fields: Mapping[str, float]
    b: Mapping[str, float]
    k1: float = _K1


DEFAULT_WEIGHTS = RankingWeights(FIELD_WEIGHTS, _B)


class CatalogIndex:
    """An inverted BM25F index of a list of capabilities, built once and queried often.

    ``postings[term]`` holds ``(position, contribution)`` pairs: the capability's place in
    ``capabilities`` and what the term adds to its score (idf times saturated weighted
    frequency), so :meth:`scores` is a sum over the query's postings.
    """

    def __init__(
        self,
        capabilities: Sequence[Capability],
        tool_descriptions: Mapping[str, str] | None = None,
        weights: RankingWeights = DEFAULT_WEIGHTS,
    ) -> None:
        self.capabilities = list(capabilities)
        descriptions = tool_descriptions or {}
        documents = [capability_fields(c, descriptions.get(c.tool, "")) for c in self.capabilities]
        n = len(documents)
        averages = {f: (sum(len(d[f]) for d in documents) / n) if n else 0.0 for f in FIELDS}
        frequency: dict[str, list[tuple[int, float]]] = defaultdict(list)
        for position, doc in enumerate(documents):
            weighted: dict[str, float] = defaultdict(float)
            for f in FIELDS:
                tokens = doc[f]
                if not tokens:
                    continue
                b = weights.b[f]
                norm = 1 - b + b * len(tokens) / (averages[f] or 1.0)
                factor = weights.fields[f] / norm
                for term, count in Counter(tokens).items():
                    weighted[term] += count * factor
            for term, tf in weighted.items():
                frequency[term].append((position, tf))
        k1 = weights.k1
        self.postings: dict[str, list[tuple[int, float]]] = {}
        for term, entries in frequency.items():
            # the "+1" form keeps idf positive for terms found in most documents
            idf = math.log(1 + (n - len(entries) + 0.5) / (len(entries) + 0.5))
            self.postings[term] = [(p, idf * tf * (k1 + 1) / (tf + k1)) for p, tf in entries]

        self.vocabulary = sorted(self.postings)
        self._dense: dict[str, dict[int, float]] = {}
        members: dict[str, list[int]] = defaultdict(list)
        for position, cap in enumerate(self.capabilities):
            members[cap.tool].append(position)
        # position -> the other capabilities of its tool, for tools small enough to lift
        self.siblings: dict[int, list[int]] = {
            p: [o for o in group if o != p]
            for group in members.values() if 1 < len(group) <= SIBLING_MAX for p in group}

    def __len__(self) -> int:
        return len(self.capabilities)

    def query_terms(self, query: str) -> dict[str, float]:
        """The index terms ``query`` looks for, with their weights: its own terms (1.0),
        and at :data:`PREFIX_WEIGHT` the index terms that one of them begins (``crypto``
        finds ``cryptocurrencies``) or that begin one of them (``rental`` finds
        ``renting``), four letters at least."""
        terms = dict.fromkeys(tokenize(query), 1.0)
        extra: dict[str, float] = {}
        vocabulary = self.vocabulary
        for term in terms:
            if len(term) < _PREFIX_MIN:
                continue
            at = bisect_left(vocabulary, term)
            for other in islice(vocabulary, at, at + _PREFIX_FANOUT):
                if not other.startswith(term):
                    break
                extra.setdefault(other, PREFIX_WEIGHT)
            for cut in range(_PREFIX_MIN, len(term)):
                if term[:cut] in self.postings:
                    extra.setdefault(term[:cut], PREFIX_WEIGHT)
        if RELATED_WEIGHT:
            for term in terms:
                for other in _related().get(term, ()):
                    extra[other] = max(extra.get(other, 0.0), RELATED_WEIGHT)
        return {**extra, **terms}

    def scores(self, query: str) -> dict[int, float]:
        """Position → score for every capability sharing a term with ``query``.

        In a large catalog, terms found in more than :data:`COMMON_SHARE` of it ("returns",
        "list") only add to the capabilities the query's rarer terms found, when it has
        some: walking their whole postings would cost most of the time at 10,000
        capabilities, and a capability matching nothing but common words ranks low anyway.
        """
        terms = {t: w for t, w in self.query_terms(query).items() if t in self.postings}
        common: dict[str, float] = {}
        if len(self.capabilities) >= _COMMON_MIN_SIZE:
            limit = len(self.capabilities) * COMMON_SHARE
            rare = {t: w for t, w in terms.items() if len(self.postings[t]) <= limit}
            if rare:
                common = {t: w for t, w in terms.items() if t not in rare}
                terms = rare
        totals: dict[int, float] = defaultdict(float)
        for term, weight in terms.items():
            for position, value in self.postings[term]:
                totals[position] += value * weight
        for term, weight in common.items():
            values = self._by_position(term)
            for position in totals:
                extra = values.get(position)
                if extra is not None:
                    totals[position] += extra * weight
        return totals

    def _by_position(self, term: str) -> dict[int, float]:
        """A common term's postings as a dict, made on first use and kept."""
        found = self._dense.get(term)
        if found is None:
            found = self._dense[term] = dict(self.postings[term])
        return found

    def ranked(self, query: str, totals: Mapping[int, float] | None = None) -> list[int]:
        """Positions of the capabilities sharing a term with ``query``, best first, ties
        in catalog order (the others follow in catalog order: see :meth:`order`).
        ``totals``: :meth:`scores` of ``query`` when the caller has them already.

        The other capabilities of the tools of the :data:`SIBLING_TOOLS` best are lifted
        to :data:`SIBLING_WEIGHT` of their score: a request that names one operation of
        a service often needs its neighbours too (the search before the lookup, the list
        before the detail), whose own texts share fewer of its words."""
        if totals is None:
            totals = self.scores(query)
        totals = self._lift_siblings(totals)
        if len(totals) > RANKED_DEPTH:  # no prompt holds more: skip sorting the tail
            best = heapq.nlargest(RANKED_DEPTH, totals.items(), key=itemgetter(1))
            return [p for p, _ in sorted(best, key=lambda item: (-item[1], item[0]))]
        return sorted(totals, key=lambda p: (-totals[p], p))

    def _lift_siblings(self, totals: Mapping[int, float]) -> Mapping[int, float]:
        if not self.siblings or not totals:
            return totals
        lifts: dict[int, float] = {}
        for position, score in heapq.nlargest(SIBLING_TOOLS, totals.items(),
                                              key=itemgetter(1)):
            floor = score * SIBLING_WEIGHT
            for other in self.siblings.get(position, ()):
                if totals.get(other, 0.0) < floor and lifts.get(other, 0.0) < floor:
                    lifts[other] = floor
        return {**totals, **lifts} if lifts else totals

    def order(self, ranked: Sequence[int]) -> Iterator[int]:
        """``ranked``, then every other position in catalog order (lazily)."""
        yield from ranked
        seen = set(ranked)
        yield from (p for p in range(len(self.capabilities)) if p not in seen)


def reciprocal_rank_fusion(rankings: Sequence[Sequence[int]], k: int = 60) -> list[int]:
    """Positions ordered by the sum of ``1 / (k + rank)`` over ``rankings`` (Cormack et
    al. 2009); ties keep the first ranking's order."""
    fused: dict[int, float] = defaultdict(float)
    first: dict[int, int] = {}
    for ranking in rankings:
        for rank, position in enumerate(ranking):
            fused[position] += 1.0 / (k + rank + 1)
            first.setdefault(position, len(first))
    return sorted(fused, key=lambda p: (-fused[p], first[p]))
