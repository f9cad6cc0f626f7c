"""Reference paths checked before anything runs: does ``{{geo.latitude}}`` exist?

A reference to a field the upstream capability never returns fails only when the step
is bound, after the upstream call was paid for. When the upstream capability declares an
output schema (or, for a repair plan, the upstream step already ran and its output is
known) the path is checked at planning time and a wrong one becomes a plan issue the
planner is asked to fix, naming the fields that do exist.

A schema that does not say (no ``properties``, ``additionalProperties`` given as a
schema, a ``$ref`` that cannot be resolved) accepts any path: only a path that is
certainly absent is reported.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from orchestration import _schema
from orchestration.capability import Capability
from orchestration.catalog import Catalog
from orchestration.errors import PlanIssue
from orchestration.plan import Reference, Step, path_index

_MAX_FIELDS_LISTED = 15
_MAX_PATHS_KNOWN = 1024

_KNOWN_FINE: dict[str, tuple[Capability, set[tuple[str | int, ...]]]] = {}
"""Per capability (by key, for as long as it is the same object): the reference paths its
output schema was found to have. The same plans come back run after run, and a
1,000-step plan checked its paths step by step each time."""


def _paths_known_fine(capability: Capability) -> set[tuple[str | int, ...]]:
    found = _KNOWN_FINE.get(capability.key)
    if found is None or found[0] is not capability:
        if len(_KNOWN_FINE) >= _MAX_PATHS_KNOWN:
            _KNOWN_FINE.clear()
        found = _KNOWN_FINE[capability.key] = (capability, set())
    return found[1]


def check_reference_paths(
    steps: list[Step],
    catalog: Catalog,
    *,
    known_steps: Mapping[str, Step] | None = None,
    outputs: Mapping[str, Any] | None = None,
) -> list[PlanIssue]:
    """Issues for references whose path the upstream step cannot provide.

    ``steps`` are checked; their references may name each other, steps of
    ``known_steps``, or steps whose actual output is in ``outputs`` (checked against
    the data itself).
    """
    by_id: dict[str, Step] = {**(known_steps or {}), **{s.id: s for s in steps}}
    outputs = outputs or {}
    issues: list[PlanIssue] = []
    for step in steps:
        for param_path, ref in step.references():
            if not ref.path:
                continue
            if ref.step_id in outputs:
                problem = _data_problem(outputs[ref.step_id], ref)
            else:
                upstream = by_id.get(ref.step_id)
                if upstream is None or not catalog.has(upstream.tool, upstream.capability):
                    continue  # structural validation reports these
                cap = catalog.get(upstream.tool, upstream.capability)
                if not cap.output_schema:
                    continue
                fine = _paths_known_fine(cap)
                if ref.path in fine:
                    continue
                problem = _schema_problem(cap.output_schema, ref, cap.key)
                if problem is None and len(fine) < _MAX_PATHS_KNOWN:
                    fine.add(ref.path)
            if problem:
                issues.append(PlanIssue(step.id, f"param {param_path}: {{{{{ref.dotted}}}}} "
                                                 f"{problem}"))
    return issues


def _walked(ref: Reference, upto: int) -> str:
    out = ref.step_id
    for part in ref.path[:upto]:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _fields(names: Any) -> str:
    names = [str(n) for n in names]
    shown = ", ".join(names[:_MAX_FIELDS_LISTED])
    return shown + (", …" if len(names) > _MAX_FIELDS_LISTED else "")


def _data_problem(value: Any, ref: Reference) -> str | None:
    """Why ``ref`` cannot be read from an output that is already known, if it cannot."""
    for depth, part in enumerate(ref.path):
        here = _walked(ref, depth)
        index = path_index(part)
        if isinstance(part, int) or (isinstance(value, list) and index is not None):
            assert index is not None
            if not isinstance(value, list):
                return f"cannot be read: {here} is not a list"
            if index >= len(value):
                return f"cannot be read: {here} has {len(value)} item(s)"
            value = value[index]
        elif isinstance(value, dict):
            if part not in value:
                return (f"cannot be read: the output of {here} has no field {part!r} "
                        f"(it has: {_fields(value)})")
            value = value[part]
        else:
            return f"cannot be read: {here} is a {type(value).__name__}, not an object"
    return None


def _schema_problem(schema: dict[str, Any], ref: Reference, capability: str) -> str | None:
    """Why ``ref`` is certainly absent from ``capability``'s output schema, if it is."""
    resolver = _schema.resolver_for(schema)
    current: Any = schema
    for depth, part in enumerate(ref.path):
        seen = 0
        while isinstance(current, dict) and isinstance(current.get("$ref"), str) and seen < 32:
            found = _schema.lookup(current["$ref"], resolver)
            if found is None:
                return None
            current, resolver = found
            seen += 1
        if not isinstance(current, dict) or any(k in current for k in ("anyOf", "oneOf", "allOf")):
            return None  # alternatives or merges: too uncertain to reject anything
        here = _walked(ref, depth)
        kind = current.get("type")
        index = path_index(part)
        if isinstance(part, int) or (kind == "array" and index is not None):
            if kind not in (None, "array") and not isinstance(kind, list):
                return f"is not in the output of {capability}: {here} is a {kind}, not a list"
            prefix = current.get("prefixItems")
            if index is not None and isinstance(prefix, list) and index < len(prefix):
                current = prefix[index]
            else:
                current = current.get("items", {})
            continue
        props = current.get("properties")
        if isinstance(props, dict) and part in props:
            current = props[part]
            continue
        patterns = current.get("patternProperties")
        if isinstance(patterns, dict):
            match = next((s for p, s in patterns.items() if re.search(p, part)), None)
            if match is not None:
                current = match
                continue
        extra = current.get("additionalProperties")
        if isinstance(extra, dict):
            current = extra
            continue
        if kind in ("string", "number", "integer", "boolean", "null"):
            return f"is not in the output of {capability}: {here} is a {kind}, not an object"
        if kind == "array":
            return f"is not in the output of {capability}: {here} is a list; use [index]"
        if isinstance(props, dict) and props and extra is not True:
            return (f"is not in the output of {capability}: {here} has no field {part!r} "
                    f"(its fields: {_fields(props)})")
        return None
    return None
