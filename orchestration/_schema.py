"""JSON Schema plumbing shared by the catalog, the planner and the executor.

One way to resolve ``$ref`` (the :mod:`referencing` library, which :mod:`jsonschema`
itself uses: ``$defs``, ``$id`` scopes, JSON pointers, the draft named by ``$schema``),
one way to build a validator for a capability schema, one way to write the JSON path of
a bad value. Layer 1 (signatures), reference checking and layer 2 (coercion) walk schemas
for different purposes, but they all follow references through here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

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

__all__ = ["check_schema_errors", "enter", "json_path", "lookup", "resolver_for", "validator"]


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
    meta = cls(cls.META_SCHEMA)
    return [(json_path(err.absolute_path), err.message)
            for err in sorted(meta.iter_errors(schema), key=lambda e: list(map(str, e.path)))]


def json_path(parts: Iterable[Any]) -> str:
    """``$.a[0].b`` for the path parts ``("a", 0, "b")``."""
    out = "$"
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out
