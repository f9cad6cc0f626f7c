"""JSON Schema plumbing shared by the catalog, the planner and the executor.

One way to resolve ``$ref`` (the :mod:`referencing` library, which :mod:`jsonschema`
itself uses: ``$defs``, ``$id`` scopes, JSON pointers, the draft named by ``$schema``),
one way to build a validator for a capability schema, one way to write the JSON path of
a bad value. Layer 1 (signatures), reference checking and layer 2 (coercion) walk schemas
for different purposes, but they all follow references through here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sized
from typing import TYPE_CHECKING, Any, cast

import jsonschema
import referencing
import referencing.exceptions
import referencing.jsonschema
from jsonschema import FormatChecker
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for

if TYPE_CHECKING:
    # referencing exports the Resolver class only from its core module
    from referencing._core import Resolver as _Resolver

    Resolver = _Resolver[referencing.jsonschema.Schema]

__all__ = ["accept_check", "check_schema_errors", "enter", "json_path", "lookup", "resolver_for",
           "validator"]


def specification(schema: Any) -> referencing.Specification[referencing.jsonschema.Schema]:
    """The draft a schema is written in: its ``$schema``, else Draft 2020-12."""
    dialect = schema.get("$schema") if isinstance(schema, Mapping) else None
    if isinstance(dialect, str):
        return referencing.jsonschema.specification_with(
            dialect, default=referencing.jsonschema.DRAFT202012)
    return referencing.jsonschema.DRAFT202012


def registry_for(schema: Any) -> tuple[referencing.jsonschema.SchemaRegistry, str]:
    """A registry holding ``schema`` (crawled, so embedded ``$id``s resolve) and its URI."""
    resource = specification(schema).create_resource(schema)
    root_uri = resource.id() or ""
    return referencing.Registry().with_resource(root_uri, resource).crawl(), root_uri


def resolver_for(schema: Any) -> Resolver:
    """A resolver for the ``$ref``s inside ``schema``, rooted at it."""
    registry, root_uri = registry_for(schema)
    return registry.resolver(base_uri=root_uri)


def enter(schema: Any, resolver: Resolver) -> Resolver:
    """The resolver for a sub-schema, which may set a new base URI with its own ``$id``."""
    spec = specification(schema)
    if isinstance(schema, Mapping) and spec.id_of(schema) is not None:
        return resolver.in_subresource(spec.create_resource(schema))
    return resolver


def lookup(ref: str, resolver: Resolver) -> tuple[Any, Resolver] | None:
    """What ``ref`` points at and the resolver to use inside it; None if unresolvable."""
    try:
        resolved = resolver.lookup(ref)
    except referencing.exceptions.Unresolvable:
        return None
    return resolved.contents, resolved.resolver


def validator(schema: Any, *, formats: bool = True) -> Validator:
    """A validator of ``schema``'s own draft, with ``$ref``s resolved and, by default,
    ``format`` asserted (a tool that says ``format: date`` means it)."""
    cls: type[Validator] = validator_for(schema, default=jsonschema.Draft202012Validator)
    registry, _ = registry_for(schema)
    return cls(schema, registry=registry,
               format_checker=cls.FORMAT_CHECKER if formats else None)


def format_checker(schema: Any) -> FormatChecker:
    """The ``format`` checker of ``schema``'s draft (what :func:`validator` asserts)."""
    cls: type[Validator] = validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls.FORMAT_CHECKER


def check_schema_errors(schema: Any) -> list[tuple[str, str]]:
    """Every way ``schema`` violates its draft's meta-schema, as ``(path, message)``."""
    cls: type[Validator] = validator_for(schema, default=jsonschema.Draft202012Validator)
    meta = (_static_meta_202012() if cls is jsonschema.Draft202012Validator
            else cls(cls.META_SCHEMA))
    return [(json_path(err.absolute_path), err.message)
            for err in sorted(meta.iter_errors(schema), key=lambda e: list(map(str, e.path)))]


@functools.cache
def _static_meta_202012() -> Validator:
    """A validator of the Draft 2020-12 meta-schema with its vocabularies inlined and
    ``$dynamicRef: "#meta"`` made a plain ``$ref`` to the root.

    For checking a schema (not extending the meta-schema) the two are the same rules,
    but resolving a dynamic reference at every level of nesting made the published form
    five times slower: a real OpenAPI document's 150 schemas took 0.7 s instead of 0.15 s.
    """
    from jsonschema_specifications import REGISTRY

    root = jsonschema.Draft202012Validator.META_SCHEMA
    base = str(root["$id"]).rsplit("/", 1)[0] + "/"
    defs: dict[str, Any] = {}

    def rewrite(node: Any, vocab: str) -> Any:
        if isinstance(node, list):
            return [rewrite(item, vocab) for item in node]
        if not isinstance(node, dict):
            return node
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in ("$schema", "$id", "$vocabulary", "$dynamicAnchor", "title"):
                continue
            if key == "$dynamicRef" and value == "#meta":
                out["$ref"] = "#"
            elif key == "$ref" and isinstance(value, str):
                where, _, fragment = value.partition("#")
                owner = where.rsplit("/", 1)[-1] if where else vocab
                if where.startswith("meta/") and not fragment:
                    out.update(inline(value))
                else:
                    out["$ref"] = "#/$defs/" + owner + "_" + fragment.rsplit("/", 1)[-1]
            else:
                out[key] = rewrite(value, vocab)
        return out

    def inline(ref: str) -> Any:
        return vocabulary(REGISTRY.contents(base + ref), ref.rsplit("/", 1)[-1])

    def vocabulary(contents: Any, vocab: str) -> Any:
        body = {k: v for k, v in contents.items() if k != "$defs"}
        for name, sub in contents.get("$defs", {}).items():
            defs[f"{vocab}_{name}"] = rewrite(sub, vocab)
        return rewrite(body, vocab)

    static = vocabulary(root, "schema")
    static["$defs"] = defs
    return jsonschema.Draft202012Validator(static)


def json_path(parts: Iterable[Any]) -> str:
    """``$.a[0].b`` for the path parts ``("a", 0, "b")``."""
    out = "$"
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


# --- a fast "certainly valid" check ------------------------------------------------------
# jsonschema walks a schema with a generic, dynamic validator: for the small, flat schemas
# tools mostly have, telling that valid parameters are valid costs more than the rest of a
# step's bookkeeping. accept_check() compiles such a schema, once, into nested closures
# that answer only "certainly valid": a value they accept is one jsonschema accepts, and
# for everything else (any value they do not accept, any schema using a keyword outside
# the small set below) jsonschema is asked as before. So validation decides exactly as
# jsonschema does; the compiled check only spares it the common, valid case.

Accept = Callable[[Any], bool]

_DRAFTS_WITH_FLOAT_INTEGERS = frozenset({
    jsonschema.Draft6Validator, jsonschema.Draft7Validator,
    jsonschema.Draft201909Validator, jsonschema.Draft202012Validator})
"""Drafts in which ``4.0`` is an integer and ``exclusiveMinimum`` is a number (the drafts
the compiled check follows; older ones are left to jsonschema)."""

_ANNOTATIONS = frozenset({"title", "description", "default", "examples", "$comment",
                          "deprecated", "readOnly", "writeOnly", "$schema", "$id", "$defs",
                          "definitions", "contentMediaType", "contentEncoding"})
"""Keywords that never make a value invalid (``$defs`` only matters through ``$ref``,
which the check does not follow: a schema with a ``$ref`` is left to jsonschema)."""


class _Unsupported(Exception):
    """A keyword (or keyword value) the compiled check does not follow."""


def _type_test(name: str) -> Accept:
    if name == "string":
        return lambda v: isinstance(v, str)
    if name == "integer":
        return lambda v: (type(v) is int or (type(v) is float and v.is_integer())
                          or (isinstance(v, int) and not isinstance(v, bool)))
    if name == "number":
        return lambda v: isinstance(v, int | float) and not isinstance(v, bool)
    if name == "boolean":
        return lambda v: isinstance(v, bool)
    if name == "null":
        return lambda v: v is None
    if name == "object":
        return lambda v: isinstance(v, dict)
    if name == "array":
        return lambda v: isinstance(v, list)
    raise _Unsupported(name)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _any_of(kinds: list[Accept]) -> Accept:
    return lambda v: any(kind(v) for kind in kinds)


def _all_of(tests: list[Accept]) -> Accept:
    # the common sizes spelled out: no generator made for each value checked
    if len(tests) == 2:
        first, second = tests
        return lambda v: first(v) and second(v)
    if len(tests) == 3:
        first, second, third = tests
        return lambda v: first(v) and second(v) and third(v)
    return lambda v: all(test(v) for test in tests)


def _bound(keyword: str, bound: float) -> Accept:
    if keyword == "minimum":
        return lambda v: not _is_number(v) or v >= bound
    if keyword == "maximum":
        return lambda v: not _is_number(v) or v <= bound
    if keyword == "exclusiveMinimum":
        return lambda v: not _is_number(v) or v > bound
    return lambda v: not _is_number(v) or v < bound


def _size(keyword: str, limit: int) -> Accept:
    kind: type = (str if keyword.endswith("Length") else
                  list if keyword.endswith("Items") else dict)
    if keyword.startswith("min"):
        return lambda v: not isinstance(v, kind) or len(cast(Sized, v)) >= limit
    return lambda v: not isinstance(v, kind) or len(cast(Sized, v)) <= limit


def _enum(members: list[Any]) -> Accept:
    # strings and null only: jsonschema's equality (1 == 1.0, True != 1) is not Python's,
    # so numbers and booleans are left to it
    texts = frozenset(m for m in members if isinstance(m, str))
    has_null = any(m is None for m in members)
    return lambda v: (isinstance(v, str) and v in texts) or (v is None and has_null)


def _required(names: tuple[str, ...]) -> Accept:
    needed = frozenset(names)
    return lambda v: not isinstance(v, dict) or needed <= v.keys()


def _properties(members: dict[str, Accept]) -> Accept:
    def properties(v: Any) -> bool:
        if not isinstance(v, dict):
            return True
        for name, item in v.items():
            test = members.get(name)
            if test is not None and not test(item):
                return False
        return True

    return properties


def _additional(known: frozenset[str], extra: Accept | None) -> Accept:
    if extra is None:  # additionalProperties: false
        return lambda v: not isinstance(v, dict) or v.keys() <= known

    return lambda v: not isinstance(v, dict) or all(
        name in known or extra(item) for name, item in v.items())


def _items(each: Accept) -> Accept:
    return lambda v: not isinstance(v, list) or all(map(each, v))


def _format(checker: FormatChecker, fmt: str) -> Accept:
    return lambda v: checker.conforms(v, fmt)


def _compile(schema: Any, checker: FormatChecker | None) -> Accept:
    """The accept check of one (sub)schema; raises :class:`_Unsupported`."""
    if schema is True:
        return lambda v: True
    if schema is False or not isinstance(schema, Mapping):
        raise _Unsupported("schema")
    tests: list[Accept] = []
    for keyword, arg in schema.items():
        if keyword in _ANNOTATIONS:
            continue
        if keyword == "type":
            names = [arg] if isinstance(arg, str) else arg
            if not isinstance(names, list) or not names:
                raise _Unsupported(keyword)
            kinds = [_type_test(n) for n in names]
            tests.append(kinds[0] if len(kinds) == 1 else _any_of(kinds))
        elif keyword in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            if not _is_number(arg):
                raise _Unsupported(keyword)
            tests.append(_bound(keyword, arg))
        elif keyword in ("minLength", "maxLength", "minItems", "maxItems",
                         "minProperties", "maxProperties"):
            if type(arg) is not int:
                raise _Unsupported(keyword)
            tests.append(_size(keyword, arg))
        elif keyword == "enum":
            if not isinstance(arg, list):
                raise _Unsupported(keyword)
            tests.append(_enum(arg))
        elif keyword == "required":
            if not isinstance(arg, list) or not all(isinstance(n, str) for n in arg):
                raise _Unsupported(keyword)
            tests.append(_required(tuple(arg)))
        elif keyword == "properties":
            if not isinstance(arg, Mapping):
                raise _Unsupported(keyword)
            tests.append(_properties({name: _compile(sub, checker) for name, sub in arg.items()}))
        elif keyword == "additionalProperties":
            if "patternProperties" in schema:
                raise _Unsupported(keyword)
            tests.append(_additional(frozenset(schema.get("properties") or ()),
                                     _compile(arg, checker) if arg is not False else None))
        elif keyword == "items":
            if "prefixItems" in schema or not isinstance(arg, Mapping | bool):
                raise _Unsupported(keyword)
            tests.append(_items(_compile(arg, checker)))
        elif keyword == "format":
            if checker is not None and isinstance(arg, str):
                tests.append(_format(checker, arg))
        else:
            raise _Unsupported(keyword)
    if not tests:
        return lambda v: True
    return tests[0] if len(tests) == 1 else _all_of(tests)


def accept_check(schema: Any, format_checker: FormatChecker | None) -> Accept | None:
    """A compiled check that accepts only values that a validator of ``schema``'s draft
    with ``format_checker`` accepts, or None when the schema uses what the check does not
    follow (``$ref``, ``anyOf``, ``pattern``...: jsonschema then decides every value, as
    it always does when the check does not accept one)."""
    cls: type[Validator] = validator_for(schema, default=jsonschema.Draft202012Validator)
    if cls not in _DRAFTS_WITH_FLOAT_INTEGERS:
        return None
    try:
        return _compile(schema, format_checker)
    except _Unsupported:
        return None
