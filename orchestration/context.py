"""Who a run is for: its context — the tenant, the user, and whatever else the caller says.

``Orchestrator.run(query, context={"tenant": "acme", "user": "u-42", "plan": "pro"})``
(or a :class:`RunContext`) stores the context with the run: ``list_runs(tenant=...,
user=...)`` and ``GET /v1/runs?tenant=`` filter by it, ``runs list``/``runs show``
and the viewer show it, every span of the run carries it as ``dagwright.context.<key>``
attributes, every event as ``RunEvent.context``, and a capability's
``requires_approval`` condition can test it (``context.tenant``, ``context.role``...).

A context is small, flat, plain data — it travels on every span and event — so it is
checked where it enters: at most :data:`MAX_KEYS` keys named like identifiers, values
that are text (at most :data:`MAX_VALUE_CHARS` characters, no control characters),
whole numbers, finite numbers, or booleans. It is not a place for secrets: per-run
credentials go in ``credentials=``, which is never recorded. No context value becomes a
Prometheus label (a user id would make a label without bound).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

from orchestration._text import not_unicode
from orchestration.errors import InvalidInput

__all__ = ["MAX_KEYS", "MAX_VALUE_CHARS", "ApprovalCondition", "RunContext", "check_context",
           "context_text"]

MAX_KEYS = 32
"""Keys a context may have."""
MAX_VALUE_CHARS = 256
"""Characters a text value may have."""
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

ContextValue = str | int | float | bool


class RunContext(BaseModel):
    """A run's context as a typed model: ``tenant`` and ``user`` are known to the engine
    (the store indexes them, ``dagwright serve`` sets ``tenant`` from the caller's
    token); any other key is kept as given (``RunContext(tenant="acme", role="admin")``).
    A plain mapping is converted to this, and checked the same way."""

    model_config = ConfigDict(extra="allow", frozen=True)

    tenant: str | None = None
    user: str | None = None

    def as_dict(self) -> dict[str, ContextValue]:
        """The context as the run stores it (keys without a value left out)."""
        return {k: v for k, v in self.model_dump().items() if v is not None}


def check_context(value: RunContext | Mapping[str, Any] | None) -> dict[str, ContextValue] | None:
    """The context a caller gave, as the run stores it (None: no context, or an empty
    one); :class:`InvalidInput` naming the key and the rule it breaks."""
    if value is None:
        return None
    if isinstance(value, RunContext):
        value = value.as_dict()
    if not isinstance(value, Mapping):
        raise InvalidInput(f"context must be a mapping of names to values (or a RunContext), "
                           f"not {type(value).__name__}")
    if len(value) > MAX_KEYS:
        raise InvalidInput(f"context has {len(value)} keys; at most {MAX_KEYS} are allowed "
                           "(it travels on every span and event of the run)")
    checked: dict[str, ContextValue] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not _KEY.match(key):
            raise InvalidInput(f"context key {str(key)[:80]!r} is not usable: use 1-64 letters, "
                               "digits, '_', '.' or '-', starting with a letter or '_'")
        if item is None:
            continue
        if isinstance(item, bool | int):
            checked[key] = item
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise InvalidInput(f"context.{key} is {item!r}; a number must be finite")
            checked[key] = item
        elif isinstance(item, str):
            if len(item) > MAX_VALUE_CHARS:
                raise InvalidInput(f"context.{key} has {len(item)} characters; at most "
                                   f"{MAX_VALUE_CHARS} are allowed")
            if _CONTROL.search(item):
                raise InvalidInput(f"context.{key} holds a control character; give plain text")
            problem = not_unicode(f"context.{key}", item)
            if problem is not None:
                raise InvalidInput(problem)
            checked[key] = item
        else:
            raise InvalidInput(f"context.{key} is a {type(item).__name__}; a context value is "
                               "text, a number or a boolean (it is flat: no lists or objects)")
    for known in ("tenant", "user"):
        if known in checked and not isinstance(checked[known], str):
            raise InvalidInput(f"context.{known} must be text, not "
                               f"{type(checked[known]).__name__}")
    return checked or None


def context_text(context: Mapping[str, Any] | None, key: str) -> str | None:
    """The text value of ``key`` in a run's context — how the run's ``tenant`` and ``user``
    are read wherever a context is kept (None: absent, or not text)."""
    value = (context or {}).get(key)
    return value if isinstance(value, str) else None


_OPERATORS = frozenset({"eq", "ne", "in", "not_in", "gt", "gte", "lt", "lte", "exists"})
_PATH = re.compile(r"^(context|params)\.[A-Za-z0-9_.-]+$")
_ABSENT = object()


def _read(path: str, context: Mapping[str, Any], params: Mapping[str, Any]) -> Any:
    """The value ``context.key`` or ``params.a.b`` names (``_ABSENT`` when there is none)."""
    root, _, rest = path.partition(".")
    value: Any = context if root == "context" else params
    for part in rest.split("."):
        if isinstance(value, Mapping) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return _ABSENT
    return value


def _clause(match: Any, value: Any) -> bool | None:
    """Whether ``value`` meets ``match``; None when it cannot be told (a comparison of
    things that do not compare): the caller then errs towards asking a person."""
    if not isinstance(match, Mapping):
        match = {"in": match} if isinstance(match, list) else {"eq": match}
    held = True
    for op, expected in match.items():
        if op == "exists":
            held = held and ((value is not _ABSENT) == bool(expected))
            continue
        if value is _ABSENT:
            if op in ("ne", "not_in"):
                continue
            return False
        try:
            if op == "eq":
                held = held and value == expected
            elif op == "ne":
                held = held and value != expected
            elif op == "in":
                held = held and value in expected
            elif op == "not_in":
                held = held and value not in expected
            elif op == "gt":
                held = held and value > expected
            elif op == "gte":
                held = held and value >= expected
            elif op == "lt":
                held = held and value < expected
            else:
                held = held and value <= expected
        except TypeError:
            return None
    return held


class ApprovalCondition(BaseModel):
    """When a capability's calls wait for a person, in the catalog's own terms: every
    entry of ``when`` holds (none: always), and not every entry of ``unless`` does.

    An entry maps a path — ``context.<key>`` (the run's context) or ``params.<path>`` (the
    call's parameters, after layer 2) — to a match: a value (equal to it), a list (one of
    them), or operators ``eq``, ``ne``, ``in``, ``not_in``, ``gt``, ``gte``, ``lt``,
    ``lte``, ``exists``. ``{when: {params.amount: {gt: 100}}, unless: {context.role:
    admin}}``: refunds over 100 wait, except in runs for an admin. A value that is missing
    meets nothing but ``ne``, ``not_in`` and ``exists: false``; one that cannot be
    compared (a text against a number) counts towards asking a person.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    when: dict[str, Any] = {}
    unless: dict[str, Any] = {}

    @model_validator(mode="after")
    def _check(self) -> ApprovalCondition:
        if not self.when and not self.unless:
            raise ValueError("an approval condition needs 'when' or 'unless' (or use true)")
        for part, entries in (("when", self.when), ("unless", self.unless)):
            for path, match in entries.items():
                if not _PATH.match(path):
                    raise ValueError(f"{part}: {path!r} must be context.<key> or "
                                     "params.<path>")
                if isinstance(match, Mapping):
                    unknown = set(match) - _OPERATORS
                    if unknown or not match:
                        raise ValueError(f"{part}.{path}: unknown operator(s) "
                                         f"{', '.join(sorted(map(str, unknown))) or '(none)'}; "
                                         f"use {', '.join(sorted(_OPERATORS))}")
        return self

    def requires(self, context: Mapping[str, Any] | None, params: Mapping[str, Any]) -> bool:
        """Whether a call with ``params``, in a run of ``context``, waits for a person."""
        ctx = context or {}
        for path, match in self.when.items():
            if _clause(match, _read(path, ctx, params)) is False:
                return False
        if self.unless:
            return not all(_clause(match, _read(path, ctx, params)) is True
                           for path, match in self.unless.items())
        return True

    def describe(self) -> str:
        parts = []
        if self.when:
            parts.append("when " + ", ".join(f"{p} {m!r}" for p, m in self.when.items()))
        if self.unless:
            parts.append("unless " + ", ".join(f"{p} {m!r}" for p, m in self.unless.items()))
        return " ".join(parts)
