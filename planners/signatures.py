"""Layer 1: a capability's JSON Schema rendered as a compact typed signature.

A planner LLM fills parameters far more reliably from ``lat: number (required;
-90 <= lat <= 90)`` than from the raw schema it is derived from, and the signature is
shorter. Everything the schema says that matters for writing a value is kept: names,
types, required or optional, enum members and constants, ranges, lengths, patterns,
formats, defaults, descriptions, examples and nested objects and arrays. ``$ref`` is
resolved with the ``referencing`` library (``$defs``, ``$id`` scopes, JSON pointers); a
schema that refers to itself is cut at the first repetition, and nesting is bounded, so
any valid schema renders in bounded space.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from orchestration import _schema
from orchestration.capability import Capability

if TYPE_CHECKING:
    from orchestration._schema import Resolver

__all__ = ["SignatureRenderer", "render_raw_capability"]

Schema = dict[str, Any]

_FORMAT_HINTS = {
    "date": "YYYY-MM-DD",
    "date-time": "RFC 3339, e.g. 2024-05-01T12:00:00Z",
    "time": "HH:MM:SS",
    "email": "an e-mail address",
    "uri": "an absolute URI",
    "uuid": "e.g. 123e4567-e89b-12d3-a456-426614174000",
    "ipv4": "dotted quad",
}
_SPACES = re.compile(r"\s+")


def _one_line(text: str, limit: int) -> str:
    text = _SPACES.sub(" ", text).strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _json(value: Any, limit: int = 80) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(", ", ": "))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _number(value: Any) -> str:
    return json.dumps(value) if isinstance(value, int | float) else str(value)


@dataclass(frozen=True)
class _Scope:
    """Where a subschema is being rendered: its resolver, the $refs being expanded, depth."""

    resolver: Resolver
    expanding: tuple[int, ...] = ()
    depth: int = 0

    def deeper(self) -> _Scope:
        return replace(self, depth=self.depth + 1)


@dataclass(frozen=True)
class _Node:
    """A subschema with its ``$ref``s followed and ``allOf`` merged."""

    schema: Schema
    scope: _Scope
    ref_name: str | None = None
    recursive: bool = False
    unresolved: str | None = None


class SignatureRenderer:
    """Renders JSON Schemas as planner-friendly signatures.

    ``max_depth`` bounds nesting (deeper levels are summarised inline), ``max_description``
    and ``max_inline`` bound text length, ``max_enum`` the enum members listed.
    """

    def __init__(
        self,
        *,
        max_depth: int = 4,
        max_description: int = 200,
        max_inline: int = 600,
        max_enum: int = 25,
        max_examples: int = 2,
    ) -> None:
        self.max_depth = max_depth
        self.max_description = max_description
        self.max_inline = max_inline
        self.max_enum = max_enum
        self.max_examples = max_examples

    # --- public -----------------------------------------------------------------------
    def capability(self, cap: Capability) -> str:
        """The whole block the planner sees for one capability."""
        lines = [f"### {cap.key}"]
        if cap.description.strip():
            lines.append(_one_line(cap.description, 2 * self.max_description))
        lines.append("params:")
        lines.extend("  " + line for line in self.params(cap.input_schema))
        if cap.output_schema:
            lines.append("output: " + self.inline(cap.output_schema))
        if cap.examples:
            lines.append("example params: " + _json(cap.examples[0], 300))
        return "\n".join(lines)

    def params(self, schema: Schema) -> list[str]:
        """One line per parameter (nested ones indented) of an object schema."""
        node = self._node(schema, _root_scope(schema))
        if node.unresolved:
            return [f"(schema could not be read: {node.unresolved})"]
        root = node.schema
        props = root.get("properties")
        if not isinstance(props, dict) or not props:
            if root.get("additionalProperties") is False:
                return ["(none: send an empty object {})"]
            if root.get("type") not in (None, "object"):
                return [f"(the parameters are a single {self.inline(root)} value)"]
            return ["(any JSON object; the schema lists no parameters)"]
        lines = self._property_lines(root, node.scope, indent="")
        extra = root.get("additionalProperties")
        if isinstance(extra, dict):
            lines.append(f"- any other key: {self._inline(extra, node.scope)}")
        return lines

    def inline(self, schema: Schema) -> str:
        """A one-line type, e.g. ``{name: string, daily: [{day: integer, max?: number}]}``.

        Too long for ``max_inline``, it is rendered with less nesting (deeper levels shown
        as ``{…}``) rather than cut mid-text; if even one level is too long, the fields
        that do not fit are counted (``… 12 more``)."""
        text = self._inline(schema, _root_scope(schema))
        depth = self.max_depth
        while len(text) > self.max_inline and depth > 1:
            depth -= 1
            shallower = SignatureRenderer(max_depth=depth, max_description=self.max_description,
                                          max_inline=self.max_inline, max_enum=self.max_enum,
                                          max_examples=self.max_examples)
            text = shallower._inline(schema, _root_scope(schema))
        if len(text) <= self.max_inline:
            return text
        cut = text.rfind(", ", 0, self.max_inline - 16)
        if cut <= 0:
            return text[: self.max_inline - 1] + "…"
        more = text.count(", ", cut + 2) + 1  # at depth 1 each ", " starts another field
        return f"{text[:cut]}, … {more} more{text[-1] if text[-1] in '}]' else ''}"

    # --- schema walking ---------------------------------------------------------------
    def _node(self, schema: Any, scope: _Scope) -> _Node:
        """Follow ``$ref`` (guarding recursion) and merge ``allOf`` into one schema."""
        if not isinstance(schema, dict):
            # ``true`` / ``false`` schemas: anything / nothing.
            return _Node({} if schema is not False else {"not": {}}, scope)
        if scope.depth > 0:
            scope = replace(scope, resolver=_schema.enter(schema, scope.resolver))
        ref_name = None
        while isinstance(schema.get("$ref"), str):
            ref = schema["$ref"]
            found = _schema.lookup(ref, scope.resolver)
            if found is None:
                return _Node(schema, scope, unresolved=ref)
            target, target_resolver = found
            ref_name = ref.rstrip("/").rsplit("/", 1)[-1] or ref
            if id(target) in scope.expanding:
                return _Node(schema, scope, ref_name=ref_name, recursive=True)
            siblings = {k: v for k, v in schema.items() if k != "$ref"}
            scope = replace(scope, resolver=target_resolver,
                            expanding=(*scope.expanding, id(target)))
            schema = {**target, **siblings} if isinstance(target, dict) else {}
        parts = schema.get("allOf")
        if isinstance(parts, list) and parts:
            merged = {k: v for k, v in schema.items() if k != "allOf"}
            for part in parts:
                sub = self._node(part, scope)
                if sub.recursive or sub.unresolved:
                    continue
                _merge_into(merged, sub.schema)
            schema = merged
        return _Node(schema, scope, ref_name=ref_name)

    # --- inline types -----------------------------------------------------------------
    def _inline(self, schema: Any, scope: _Scope) -> str:
        node = self._node(schema, scope)
        if node.unresolved:
            return f"any (unresolved {node.unresolved})"
        if node.recursive:
            return f"{node.ref_name} (recursive)"
        s, scope = node.schema, node.scope
        if s == {"not": {}}:
            return "nothing (no value is allowed)"
        if "const" in s:
            return _json(s["const"])
        if isinstance(s.get("enum"), list):
            return self._enum(s["enum"])
        for key in ("anyOf", "oneOf"):
            branches = s.get(key)
            if isinstance(branches, list) and branches:
                return " | ".join(_unique(self._inline(b, scope) for b in branches))
        types = _types(s)
        if not types:
            return "any"
        return " | ".join(self._inline_type(t, s, scope) for t in types)

    def _inline_type(self, kind: str, s: Schema, scope: _Scope) -> str:
        if kind == "object":
            props = s.get("properties")
            extra = s.get("additionalProperties")
            if scope.depth >= self.max_depth:
                return "{…}"
            inner = scope.deeper()
            if isinstance(props, dict) and props:
                required = set(s.get("required") or [])
                fields = [
                    f"{name}{'' if name in required else '?'}: {self._inline(sub, inner)}"
                    for name, sub in props.items()
                ]
                return "{" + ", ".join(fields) + "}"
            if isinstance(extra, dict):
                return "{[key: string]: " + self._inline(extra, inner) + "}"
            return "object"
        if kind == "array":
            if scope.depth >= self.max_depth:
                return "[…]"
            inner = scope.deeper()
            prefix = s.get("prefixItems")
            if isinstance(prefix, list) and prefix:
                return "[" + ", ".join(self._inline(p, inner) for p in prefix) + "]"
            items = s.get("items")
            return "[" + (self._inline(items, inner) if items is not None else "any") + "]"
        return kind

    def _enum(self, members: list[Any]) -> str:
        shown = " | ".join(_json(m, 60) for m in members[: self.max_enum])
        more = len(members) - self.max_enum
        return shown + (f" | … ({more} more)" if more > 0 else "")

    # --- parameter lines --------------------------------------------------------------
    def _property_lines(self, obj: Schema, scope: _Scope, indent: str) -> list[str]:
        required = set(obj.get("required") or [])
        lines: list[str] = []
        for name, sub in (obj.get("properties") or {}).items():
            lines.extend(self._param(str(name), sub, name in required, scope, indent))
        return lines

    def _param(
        self, name: str, schema: Any, required: bool, scope: _Scope, indent: str
    ) -> list[str]:
        node = self._node(schema, scope)
        s = node.schema
        facts = ["required" if required else "optional"]
        children: list[str] = []
        if node.unresolved or node.recursive:
            kind = self._inline(schema, scope)
        else:
            nested = self._nested(s, node.scope)
            if nested is not None:
                kind, children = nested
                children = [indent + line for line in children]
            elif _types(s) == ["array"] and isinstance(s.get("items"), dict | bool):
                item = self._inline(s["items"], node.scope.deeper())
                kind = "array of " + (f"({item})" if " | " in item else item)
            else:
                kind = self._inline(s, node.scope)
            if node.ref_name and kind == "object":
                kind = f"{node.ref_name} object"
            facts.extend(self._facts(s, name, node.scope))
        line = f"{indent}- {name}: {kind} ({'; '.join(facts)})"
        description = s.get("description") or s.get("title")
        if isinstance(description, str) and description.strip():
            line += " — " + _one_line(description, self.max_description)
        return [line, *children]

    def _nested(self, s: Schema, scope: _Scope) -> tuple[str, list[str]] | None:
        """For an object with properties, or an array of such objects: type and child lines."""
        if scope.depth >= self.max_depth or "enum" in s or "const" in s:
            return None
        if any(isinstance(s.get(k), list) for k in ("anyOf", "oneOf")):
            return None
        types = _types(s)
        if types == ["object"] and isinstance(s.get("properties"), dict) and s["properties"]:
            inner = scope.deeper()
            return "object", self._property_lines(s, inner, indent="  ")
        if types == ["array"] and isinstance(s.get("items"), dict):
            item = self._node(s["items"], scope.deeper())
            it = item.schema
            if (not item.recursive and not item.unresolved and _types(it) == ["object"]
                    and isinstance(it.get("properties"), dict) and it["properties"]
                    and "enum" not in it):
                label = f"array of {item.ref_name} objects" if item.ref_name else "array of objects"
                return label, self._property_lines(
                    it, item.scope.deeper(), indent="  ")
        return None

    def _facts(self, s: Schema, name: str, scope: _Scope) -> list[str]:
        """Constraints, default and examples of one value, as short phrases."""
        facts = _value_facts(s, name)
        lo, hi = s.get("minItems"), s.get("maxItems")
        if lo is not None or hi is not None:
            facts.append(_span("", lo, hi, " items").strip())
        if s.get("uniqueItems") is True:
            facts.append("unique items")
        if _types(s) == ["array"] and isinstance(s.get("items"), dict):
            item = self._node(s["items"], scope)
            if not item.recursive and not item.unresolved:
                facts.extend("each item: " + f for f in _value_facts(item.schema, "item"))
        if "default" in s:
            facts.append(f"default {_json(s['default'])}")
        examples = s.get("examples")
        if not isinstance(examples, list):
            examples = [s["example"]] if "example" in s else []
        if examples:
            facts.append("e.g. " + ", ".join(_json(e, 60) for e in examples[: self.max_examples]))
        if s.get("deprecated") is True:
            facts.append("deprecated")
        return facts


def _value_facts(s: Schema, name: str) -> list[str]:
    """Range, length, pattern and format of a scalar value."""
    facts: list[str] = []
    bounds = _bounds(s, name)
    if bounds:
        facts.append(bounds)
    if _is_num(s.get("multipleOf")):
        facts.append(f"multiple of {_number(s['multipleOf'])}")
    lo, hi = s.get("minLength"), s.get("maxLength")
    if lo is not None or hi is not None:
        facts.append(_span("length", lo, hi, ""))
    if isinstance(s.get("pattern"), str):
        facts.append(f"pattern {s['pattern']}")
    fmt = s.get("format")
    if isinstance(fmt, str):
        hint = _FORMAT_HINTS.get(fmt)
        facts.append(f"format {fmt}" + (f" ({hint})" if hint else ""))
    return facts


def _root_scope(schema: Any) -> _Scope:
    if not isinstance(schema, dict):
        schema = {}
    return _Scope(resolver=_schema.resolver_for(schema))


def _types(s: Schema) -> list[str]:
    kind = s.get("type")
    if isinstance(kind, str):
        return [kind]
    if isinstance(kind, list):
        return [k for k in kind if isinstance(k, str)]
    if "properties" in s or "additionalProperties" in s:
        return ["object"]
    if "items" in s or "prefixItems" in s:
        return ["array"]
    return []


def _bounds(s: Schema, name: str) -> str | None:
    lo, lo_op = (s["exclusiveMinimum"], "<") if _is_num(s.get("exclusiveMinimum")) else (
        s.get("minimum"), "<=")
    hi, hi_op = (s["exclusiveMaximum"], "<") if _is_num(s.get("exclusiveMaximum")) else (
        s.get("maximum"), "<=")
    if not _is_num(lo):
        lo = None
    if not _is_num(hi):
        hi = None
    if lo is not None and hi is not None:
        return f"{_number(lo)} {lo_op} {name} {hi_op} {_number(hi)}"
    if lo is not None:
        return f"{name} {'>' if lo_op == '<' else '>='} {_number(lo)}"
    if hi is not None:
        return f"{name} {hi_op} {_number(hi)}"
    return None


def _is_num(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _span(label: str, lo: Any, hi: Any, unit: str) -> str:
    head = f"{label} " if label else ""
    if unit == " items" and (hi if lo is None else lo) == 1 and (lo is None or hi is None or lo == hi):
        unit = " item"
    if lo is not None and hi is not None:
        return f"{head}{lo}..{hi}{unit}" if lo != hi else f"{head}exactly {lo}{unit}"
    if lo is not None:
        return f"{head}at least {lo}{unit}"
    return f"{head}at most {hi}{unit}"


def _merge_into(target: Schema, part: Schema) -> None:
    """Merge an ``allOf`` member: properties and required add up, other keywords fill gaps."""
    for key, value in part.items():
        if key == "properties" and isinstance(value, dict):
            target["properties"] = {**(target.get("properties") or {}), **value}
        elif key == "required" and isinstance(value, list):
            target["required"] = list(dict.fromkeys([*(target.get("required") or []), *value]))
        else:
            target.setdefault(key, value)


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def render_raw_capability(cap: Capability) -> str:
    """A capability without type guidance: its description and its raw compact schemas."""
    lines = [f"### {cap.key}"]
    if cap.description.strip():
        lines.append(_one_line(cap.description, 400))
    lines.append("input schema: " + json.dumps(cap.input_schema, separators=(",", ":"),
                                               sort_keys=True))
    if cap.output_schema:
        lines.append("output schema: " + json.dumps(cap.output_schema, separators=(",", ":"),
                                                    sort_keys=True))
    return "\n".join(lines)
