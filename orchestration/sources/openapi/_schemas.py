"""OpenAPI schemas as self-contained JSON Schemas that share their definitions.

A real document defines its shapes once (``components/schemas``) and refers to them from
hundreds of operations. Copying every reference into every operation (what a naive
"dereference" does) makes Discord's 242 operations 1.5 MB of input schemas, some 200 KiB
each. Instead each referenced schema is converted **once per document** into a named
definition, and a capability's schema carries ``$defs`` holding only the definitions it
reaches (``#/$defs/<name>`` references, which the engine's validator and coercer
resolve). Small leaf schemas (an enum, a string with a pattern) are inlined where they
are used, which reads better and costs nothing.

Conversion also makes the schema one the engine accepts, without refusing the operation:

* OpenAPI 3.0's dialect becomes JSON Schema (``nullable``, boolean
  ``exclusiveMinimum``/``exclusiveMaximum``, ``type: file``);
* what violates the JSON Schema meta-schema is repaired where the meaning is clear
  (duplicate ``required`` entries are dropped) and otherwise the offending keyword is
  removed — each repair is reported as a note naming the place, never silently;
* keywords that only describe the document (``xml``, ``externalDocs``, ``x-*``) are left
  out.

:func:`fit` keeps a schema within a size budget: first descriptions and examples of the
shared definitions go, then definitions deeper than the budget allows become open
schemas that say so. Nothing is ever cut in the middle of a JSON text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import referencing.exceptions

from orchestration._schema import _static_meta_202012
from orchestration.errors import CatalogError
from orchestration.sources.openapi._names import identifier

__all__ = ["MAX_SCHEMA_BYTES", "SchemaBuilder", "SchemaProblem", "local_refs", "size_of"]

MAX_SCHEMA_BYTES = 32 * 1024
"""Largest input or output schema a capability carries (JSON text, ``$defs`` included)."""

_INLINE_BYTES = 400  # a leaf definition this small is copied where it is used
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
_SCHEMA_ONE = ("additionalProperties", "not", "if", "then", "else", "contains", "propertyNames",
               "unevaluatedItems", "unevaluatedProperties", "additionalItems", "items")
_DROPPED = frozenset({"xml", "externalDocs"})
_TEXT_KEYS = ("description", "example", "examples", "title")
_META = _static_meta_202012()
_BARE_NAME = re.compile(r"^[A-Za-z_][\w-]*$")  # no '#', '/' or '.': not a file or pointer


class SchemaProblem(Exception):
    """A schema that cannot be used (a ``$ref`` that does not resolve), with its place."""

    def __init__(self, pointer: str, message: str) -> None:
        super().__init__(f"{message} (at {pointer})")
        self.pointer = pointer
        self.message = message


@dataclass
class _Def:
    name: str
    pointer: str
    schema: Any = None
    refs: set[str] = field(default_factory=set)
    building: bool = True
    problem: SchemaProblem | None = None
    size: int = 0
    lean: Any = None  # the schema without descriptions and examples, made when needed
    lean_size: int = 0
    lean_refs: set[str] = field(default_factory=set)
    stub: Any = None  # what stands for it when even the lean form does not fit
    stub_size: int = 0


def size_of(schema: Any) -> int:
    return len(json.dumps(schema, separators=(",", ":"), ensure_ascii=False, default=str))


class SchemaBuilder:
    """Converts the schemas of one document; definitions are shared by its operations."""

    def __init__(self, *, oas30: bool, note: Callable[[str, str], None],
                 swagger2: bool = False) -> None:
        self.oas30 = oas30  # 3.0: what stands beside a $ref is ignored
        self.note = note  # note(pointer, message)
        self.swagger2 = swagger2  # `$ref: Pet` is short for `#/definitions/Pet` there
        self._by_target: dict[int, _Def] = {}
        self._by_name: dict[str, _Def] = {}
        self._valid: set[str] = set()  # schemas (as JSON text) the meta-schema accepted

    # --- converting -----------------------------------------------------------------
    def schema(self, node: Any, resolver: Any, pointer: str, refs: set[str]) -> Any:
        """``node`` converted; the definitions it refers to are added to ``refs``."""
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str):
                return self._reference(node, ref, resolver, pointer, refs)
            return self._object(node, resolver, pointer, refs)
        if isinstance(node, bool):
            return node
        # a schema that is neither an object nor a boolean: repaired to "anything"
        self.note(pointer, f"a schema must be an object, got {type(node).__name__}; "
                  "treated as {} (any value)")
        return {}

    def _object(self, node: dict[str, Any], resolver: Any, pointer: str,
                refs: set[str]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in node.items():
            if not isinstance(key, str):
                key = str(key)
            if key in _DROPPED or key.startswith("x-"):
                continue
            where = f"{pointer}/{_escape(key)}"
            if key in _SCHEMA_MAPS and isinstance(value, dict):
                out[key] = {str(k): self.schema(v, in_resolver, f"{where}/{_escape(str(k))}",
                                                refs)
                            for k, v, in_resolver in self._entries(value, resolver, where)}
            elif key in _SCHEMA_LISTS and isinstance(value, list):
                out[key] = [self.schema(v, resolver, f"{where}/{i}", refs)
                            for i, v in enumerate(value)]
            elif key in _SCHEMA_ONE and isinstance(value, dict | bool):
                out[key] = self.schema(value, resolver, where, refs)
            elif key == "items" and isinstance(value, list):  # draft 4 tuple form
                out["prefixItems"] = [self.schema(v, resolver, f"{where}/{i}", refs)
                                      for i, v in enumerate(value)]
            else:
                out[key] = value
        return _dialect(out, oas30=self.oas30)

    def _entries(self, value: dict[str, Any], resolver: Any,
                 pointer: str) -> list[tuple[Any, Any, Any]]:
        """A map of subschemas (``properties``...) as (name, schema, resolver) entries.

        A string ``$ref`` in the map is a JSON Reference to the whole map, not a property
        named ``$ref`` (DigitalOcean writes ``properties: {$ref: 'attributes.yml#/ids'}``);
        the map it names is merged in, its own entries winning."""
        ref = value.get("$ref")
        if not isinstance(ref, str):
            return [(k, v, resolver) for k, v in value.items()]
        try:
            resolved = resolver.lookup(ref)
        except referencing.exceptions.Unresolvable as exc:
            raise SchemaProblem(pointer, f"$ref {ref!r} does not resolve{_cause(exc)}") from None
        if not isinstance(resolved.contents, dict):
            raise SchemaProblem(pointer, f"$ref {ref!r} names a "
                                f"{type(resolved.contents).__name__}, not a map of schemas")
        merged = {k: (k, v, resolved.resolver) for k, v in resolved.contents.items()}
        merged.update({k: (k, v, resolver) for k, v in value.items() if k != "$ref"})
        return list(merged.values())

    def _reference(self, node: dict[str, Any], ref: str, resolver: Any, pointer: str,
                   refs: set[str]) -> Any:
        target = self._definition(ref, resolver, pointer)
        siblings = {k: v for k, v in node.items() if k != "$ref"}
        if self.oas30 or not siblings:  # 3.0 ignores what stands beside a $ref
            if not target.building and not target.refs and target.size <= _INLINE_BYTES:
                return target.schema
            refs.add(target.name)
            return {"$ref": f"#/$defs/{target.name}"}
        refs.add(target.name)
        return {**self._object(siblings, resolver, pointer, refs),
                "$ref": f"#/$defs/{target.name}"}

    def _definition(self, ref: str, resolver: Any, pointer: str) -> _Def:
        if self.swagger2 and _BARE_NAME.match(ref):  # Swagger 2.0 tools read it so
            ref = f"#/definitions/{ref}"
        try:
            resolved = resolver.lookup(ref)
        except referencing.exceptions.Unresolvable as exc:
            why = _cause(exc)
            raise SchemaProblem(pointer, f"$ref {ref!r} does not resolve{why}") from None
        key = id(resolved.contents)
        known = self._by_target.get(key)
        if known is not None:
            if known.problem is not None:
                raise known.problem
            return known
        definition = _Def(name=self._new_name(ref), pointer=ref)
        self._by_target[key] = definition
        self._by_name[definition.name] = definition
        try:
            schema = self.schema(resolved.contents, resolved.resolver, ref, definition.refs)
        except SchemaProblem as problem:
            definition.problem = problem
            raise
        finally:
            definition.building = False
        definition.schema = self.repair(schema, ref)
        definition.refs = local_refs(definition.schema)  # a repair may have dropped some
        definition.size = size_of(definition.schema)
        return definition

    def _new_name(self, ref: str) -> str:
        tail = ref.rsplit("#", 1)[-1].rstrip("/").rsplit("/", 1)[-1] or ref.rsplit("/", 1)[-1]
        tail = tail.replace("~1", "/").replace("~0", "~")
        base = identifier(tail.rsplit(".", 1)[0] if tail.endswith((".yml", ".yaml", ".json"))
                          else tail, "schema")
        name, n = base, 2
        while name in self._by_name:
            name, n = f"{base}_{n}", n + 1
        return name

    # --- repairing --------------------------------------------------------------------
    def repair(self, schema: Any, pointer: str) -> Any:
        """``schema`` made valid against the JSON Schema meta-schema, each repair noted.

        Validity does not depend on where a schema stands (its ``$ref``s are not
        followed), so a schema met again (the same parameter in 9,000 operations of
        Microsoft Graph) is checked once: the texts found valid are remembered."""
        try:
            text = json.dumps(schema, sort_keys=True, separators=(",", ":"))
        except (TypeError, ValueError):
            text = None
        if text is not None and text in self._valid:
            return schema
        for attempt in range(5):
            errors = list(_META.iter_errors(schema))
            if not errors:
                if text is not None and attempt == 0:  # valid as it came, not once repaired
                    self._valid.add(text)
                return schema
            if not isinstance(schema, dict | bool):
                return {}
            for error in errors:
                schema = self._fix(schema, list(error.absolute_path), error, pointer)
        return schema

    def _fix(self, schema: Any, path: list[Any], error: Any, pointer: str) -> Any:
        where = pointer + "".join(f"/{_escape(str(p))}" for p in path)
        parent: Any = schema
        for part in path[:-1]:
            try:
                parent = parent[part]
            except (KeyError, IndexError, TypeError):
                return schema
        last = path[-1] if path else None
        if last is None:
            self.note(where, f"{error.message}; the schema is treated as {{}} (any value)")
            return {}
        if (last == "required" and isinstance(parent, dict)
                and isinstance(parent.get("required"), list) and error.validator == "uniqueItems"):
            parent["required"] = list(dict.fromkeys(parent["required"]))
            self.note(where, "duplicate 'required' entries removed")
            return schema
        if isinstance(last, int):  # an item of a list keyword: the keyword goes
            if len(path) < 2:
                return schema
            where = where.rsplit("/", 1)[0]
            last = path[-2]
            parent = schema
            for part in path[:-2]:
                parent = parent[part]
        if isinstance(parent, dict) and last in parent:
            del parent[last]
            self.note(where, f"{error.message}; keyword {last!r} left out")
        return schema

    # --- assembling ---------------------------------------------------------------------
    def definition_schema(self, schema: Any) -> Any:
        """The schema a local ``{"$ref": "#/$defs/<name>"}`` stands for (else ``schema``)."""
        if isinstance(schema, dict) and isinstance(schema.get("$ref"), str) \
                and schema["$ref"].startswith("#/$defs/"):
            found = self._by_name.get(schema["$ref"][len("#/$defs/"):])
            if found is not None:
                return found.schema
        return schema

    def closure(self, refs: set[str]) -> dict[str, _Def]:
        """The definitions ``refs`` reach, each once."""
        found: dict[str, _Def] = {}
        todo = list(refs)
        while todo:
            name = todo.pop()
            if name in found:
                continue
            definition = self._by_name[name]
            found[name] = definition
            todo.extend(definition.refs - found.keys())
        return found

    def assemble(self, schema: Any, pointer: str, limit: int = MAX_SCHEMA_BYTES) -> Any:
        """``schema`` with the ``$defs`` it uses, within ``limit`` bytes of JSON.

        Over the limit, in this order until it fits: descriptions and examples of the
        shared definitions go; definitions more references deep than needed become open
        schemas of their type; the schema's own nesting is cut the same way. Each step is
        a note; the result is always a whole, valid schema.
        """
        if not isinstance(schema, dict):
            return schema
        refs = local_refs(schema)
        defs = self.closure(refs)
        if size_of(schema) + sum(d.size + len(n) + 4 for n, d in defs.items()) + 12 <= limit:
            return _with_defs(schema, {n: d.schema for n, d in defs.items()})
        for name, definition in defs.items():
            if definition.lean is None:  # made once per document, like the definition
                definition.lean = _lean(definition.schema)
                definition.lean_size = size_of(definition.lean)
                definition.lean_refs = local_refs(definition.lean)
                definition.stub = _open(definition.lean, name)
                definition.stub_size = size_of(definition.stub)
        lean = {name: d.lean for name, d in defs.items()}
        base = size_of(schema) + 12
        if base + sum(d.lean_size + len(n) + 4 for n, d in defs.items()) <= limit:
            self.note(pointer, f"schema over {limit // 1024} KiB: descriptions and examples "
                      "of shared definitions left out")
            return _with_defs(schema, lean)
        # A definition first reached d references deep is kept (lean) when d <= keep, an
        # open stub when d == keep + 1, and unreachable beyond; sizes are known per
        # definition, so each level is priced without building it.
        reached = _depths(refs, defs)
        depth = {n: reached.get(n, len(defs) + 2) for n in defs}  # unreached: never kept
        for keep in range(max(reached.values(), default=0) - 1, 0, -1):
            priced = base + sum((d.lean_size if depth[n] <= keep else d.stub_size) + len(n) + 4
                                for n, d in defs.items() if depth[n] <= keep + 1)
            if priced > limit:
                continue
            out = _with_defs(schema, {n: (d.lean if depth[n] <= keep else d.stub)
                                      for n, d in defs.items() if depth[n] <= keep + 1})
            if size_of(out) <= limit:
                self.note(pointer, f"schema over {limit // 1024} KiB: shared definitions more "
                          f"than {keep} reference(s) deep are not described (any value of "
                          "their type is accepted there)")
                return out
        # even the definitions used directly do not fit: the schema's own nesting is cut
        own = {n: defs[n].stub for n in refs if n in defs}
        frame = _lean_below_top(schema)
        for keep in range(8, 0, -1):
            cut = _cut(frame, keep)
            out = _with_defs(cut, {n: s for n, s in own.items() if n in local_refs(cut)})
            if size_of(out) <= limit:
                self.note(pointer, f"schema over {limit // 1024} KiB: shared definitions are "
                          f"not described and nesting deeper than {keep} level(s) is cut (any "
                          "value of its type is accepted there)")
                return out
        # even one level does not fit (an operation with hundreds of query parameters):
        # each parameter keeps its name and type only, then only the required ones are
        # listed and the others are named in the description, still accepted
        return self._names_only(frame, pointer, limit)

    def _names_only(self, frame: dict[str, Any], pointer: str, limit: int) -> dict[str, Any]:
        props = frame.get("properties")
        typed = {name: _type_only(sub) for name, sub in (props or {}).items()} \
            if isinstance(props, dict) else {}
        out = {**{k: v for k, v in frame.items() if k not in ("properties", "$defs")},
               "properties": typed}
        if size_of(out) <= limit:
            self.note(pointer, f"schema over {limit // 1024} KiB even one level deep: its "
                      f"{len(typed)} parameters are listed with their types only")
            return out
        required = [r for r in frame.get("required") or [] if r in typed]
        optional = [name for name in typed if name not in required]
        out = {"type": "object", "properties": {r: typed[r] for r in required},
               "additionalProperties": True}
        if required:
            out["required"] = required
        room = limit - size_of(out) - 200
        listed: list[str] = []
        for name in optional:  # whole names only, as many as fit
            room -= len(name) + 4
            if room < 0:
                break
            listed.append(name)
        rest = len(optional) - len(listed)
        out["description"] = (f"{len(optional)} optional parameters are accepted but not "
                              f"described (schema too large): {', '.join(listed)}"
                              + (f" and {rest} more" if rest else ""))
        self.note(pointer, f"schema over {limit // 1024} KiB even one level deep: only its "
                  f"{len(required)} required parameters are described; the "
                  f"{len(optional)} optional ones are named in its description")
        return out


def local_refs(node: Any) -> set[str]:
    """The ``#/$defs/<name>`` names ``node`` refers to (not looking into its own ``$defs``)."""
    found: set[str] = set()
    todo = [node]
    while todo:
        item = todo.pop()
        if isinstance(item, dict):
            ref = item.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                found.add(ref[len("#/$defs/"):])
            todo.extend(v for k, v in item.items() if k != "$defs")
        elif isinstance(item, list):
            todo.extend(item)
    return found


def _with_defs(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    return {**schema, "$defs": dict(sorted(defs.items()))} if defs else schema


def _lean_below_top(schema: dict[str, Any]) -> dict[str, Any]:
    """The capability's own parameters keep their descriptions; what is inside them not."""
    props = schema.get("properties")
    if not isinstance(props, dict):
        return _lean(schema)
    inner = {}
    for name, sub in props.items():
        text = sub.get("description") if isinstance(sub, dict) else None
        lean = _lean(sub)
        inner[name] = {**lean, "description": text} if text and isinstance(lean, dict) else lean
    return {**schema, "properties": inner}


def _cut(schema: Any, depth: int) -> Any:
    """``schema`` with every subschema nested deeper than ``depth`` made open."""
    if not isinstance(schema, dict):
        return schema
    if depth <= 0:
        return _open(schema, "value")
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _SCHEMA_MAPS and isinstance(value, dict) and key != "$defs":
            out[key] = {n: _cut(sub, depth - 1) for n, sub in value.items()}
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            out[key] = [_cut(sub, depth - 1) for sub in value]
        elif key in _SCHEMA_ONE:
            out[key] = _cut(value, depth - 1)
        else:
            out[key] = value
    return out


def _lean(schema: Any) -> Any:
    """``schema`` without descriptions, titles and examples (its constraints intact)."""
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _TEXT_KEYS or key == "$comment":
            continue
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: _lean(sub) for name, sub in value.items()}
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            out[key] = [_lean(sub) for sub in value]
        elif key in _SCHEMA_ONE:
            out[key] = _lean(value)
        else:
            out[key] = value
    return out


def _type_only(schema: Any) -> dict[str, Any]:
    """A schema's type and nothing else (``{}`` when it has no single type)."""
    if isinstance(schema, dict) and isinstance(schema.get("type"), str | list):
        return {"type": schema["type"]}
    return {}


def _open(schema: Any, name: str) -> dict[str, Any]:
    """A definition cut by the size budget: its type (so values are still checked
    roughly), the fact that it was cut, and nothing it would take to say more."""
    out: dict[str, Any] = {"description": f"{name}: shape not listed (schema too large)"}
    if isinstance(schema, dict) and isinstance(schema.get("type"), str | list):
        out["type"] = schema["type"]
    return out


def _depths(refs: set[str], defs: dict[str, _Def]) -> dict[str, int]:
    """How many references deep each definition is first reached (1: used directly)."""
    depth: dict[str, int] = {}
    frontier, level = set(refs), 1
    while frontier:
        for name in frontier:
            depth.setdefault(name, level)
        frontier = {r for name in frontier for r in defs[name].lean_refs if r not in depth}
        level += 1
    return depth  # a definition reached only through a text keyword (an example) is absent


def _cause(exc: BaseException) -> str:
    """The innermost reason a reference did not resolve (``: <reason>``, or nothing):
    :mod:`referencing` wraps the retrieval error, which says what actually went wrong."""
    reason: BaseException | None = exc.__cause__ or exc.__context__
    while reason is not None and not isinstance(reason, CatalogError) \
            and (reason.__cause__ or reason.__context__) is not None:
        reason = reason.__cause__ or reason.__context__
    if reason is None or not str(reason):
        return ""
    text = str(reason)
    if isinstance(reason, KeyError | IndexError) and reason.args:  # the pointer's dead end
        text = f"there is no {reason.args[0]!r} where the pointer leads"
    if isinstance(reason, OSError) and reason.strerror:
        text = f"{reason.strerror}: {reason.filename}" if reason.filename else reason.strerror
    return f": {text}"


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _dialect(node: dict[str, Any], *, oas30: bool) -> dict[str, Any]:
    """OpenAPI 3.0 schema keywords that mean something else in JSON Schema.

    3.1 documents are read the same way where the 3.0 form has only one meaning (a
    boolean ``exclusiveMinimum``, ``nullable: true``): real 3.1 documents still use them.
    """
    for bound, limit in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if isinstance(node.get(bound), bool) and node.pop(bound) and limit in node:
            node[bound] = node.pop(limit)
    if node.get("type") == "file":  # Swagger 2's file, kept by converted documents
        node["type"], node["format"] = "string", "binary"
    nullable = node.pop("nullable", None)
    if nullable is True and (oas30 or "type" in node):
        kind = node.get("type")
        if isinstance(kind, str):
            node["type"] = [kind, "null"]
            if isinstance(node.get("enum"), list) and None not in node["enum"]:
                node["enum"] = [*node["enum"], None]
        elif isinstance(kind, list):
            if "null" not in kind:
                node["type"] = [*kind, "null"]
        else:
            return {"anyOf": [node, {"type": "null"}]}
    return node
