"""Schema-driven parameter coercion (defense layer 2).

LLMs usually fill tool parameters with the right *meaning* but the wrong JSON
*type*: ``{"lat": "35.6897"}`` where the capability's input schema wants a
number, ``"TRUE"`` for a boolean, ``'["a", "b"]'`` for an array, ``"celsius"``
for an enum member spelled ``"Celsius"``.  Sending such a call to a tool wastes
an attempt (and usually an LLM repair round-trip), so before every tool call
the parameters are coerced to the capability's input JSON Schema.

The coercer is deliberately conservative, because a wrong guess is worse than
a validation error that layer 3 can report:

* it never loses information (no rounding, no NaN/Infinity from text, no
  locale guessing such as ``"1,234"``, no float underflow to ``0.0``);
* it never invents data (missing fields stay missing, defaults are not filled,
  ``True`` never becomes ``1``);
* a value that already validates is returned as the very same object with no
  changes, and coercion is idempotent;
* a value it cannot fix is left exactly as it was so that validation reports
  the original problem.

Typical use, once per capability::

    coercer = Coercer(capability.input_schema)
    result = coercer.coerce(params)
    for change in result.changes:
        log.info("coerced %s: %r -> %r (%s)", change.path, change.old, change.new, change.rule)

The schema is walked the way a validator walks it: ``$ref`` (resolved with
:mod:`referencing`, the library :mod:`jsonschema` itself uses), ``allOf``,
``anyOf``/``oneOf``, ``properties``, ``patternProperties``,
``additionalProperties``, ``prefixItems``/``items`` (and the pre-2020
``items``-array/``additionalItems`` forms), ``type`` (including lists such as
``["number", "null"]``), ``enum`` and ``const``.  ``$dynamicRef``,
``$recursiveRef``, ``if``/``then``/``else``, ``dependentSchemas``, ``not``,
``contains`` and the ``unevaluated*`` keywords are not followed; values under
them are left as they are (and then validated as usual).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import referencing
import referencing.exceptions
import referencing.jsonschema
from jsonschema import Draft202012Validator, FormatChecker
from jsonschema.exceptions import UnknownType
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for

if TYPE_CHECKING:
    # referencing exposes Resolver objects but exports the class only from
    # its core module; it is needed for annotations alone.
    from referencing._core import Resolver

    _Resolver = Resolver[referencing.jsonschema.Schema]

__all__ = [
    "MAX_DEPTH",
    "MAX_SCHEMA_HOPS",
    "Coercer",
    "CoercionChange",
    "CoercionResult",
    "coerce",
]

#: How many containers deep (objects/arrays) coercion descends into a value.
#: Anything nested deeper is left untouched.  Tool parameters are never this
#: deep in practice; the limit exists so that a pathological value (or a JSON
#: string that decodes to one) cannot exhaust the Python stack.  It is well
#: below the interpreter's default recursion limit even with a few schema hops
#: ($ref, allOf, anyOf) per level.
MAX_DEPTH: Final = 100

#: How many schema nodes may be entered for one value position without
#: descending into the value.  ``$ref`` cycles that do not consume value depth
#: (``{"allOf": [{"$ref": "#"}]}``) are caught by a visited set already; this
#: bounds long, non-cyclic chains of applicators.
MAX_SCHEMA_HOPS: Final = 32

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# A decimal number as a human or an LLM writes it: ASCII digits only (Python's
# int()/float() would also accept "1_000", "٣" and "inf", none of which we
# want), optional sign, fraction and exponent.  No thousands separators.
_NUMBER = re.compile(
    r"(?P<sign>[+-]?)(?P<int>[0-9]*)(?:\.(?P<frac>[0-9]*))?(?:[eE](?P<exp>[+-]?[0-9]+))?"
)

# Exponents beyond this are refused when building an exact integer, so that
# "1e999999999" cannot make us allocate a gigantic int.
_MAX_INTEGER_EXPONENT: Final = 1000

_BOOLEAN_WORDS: Final[Mapping[str, bool]] = {
    "true": True,
    "yes": True,
    "1": True,
    "false": False,
    "no": False,
    "0": False,
}

# Errors that mean "this validator could not decide", not "invalid": a value
# too deep for jsonschema's recursive validation, a $ref that points nowhere,
# a pattern Python's re cannot compile.
_UNDECIDABLE = (RecursionError, referencing.exceptions.Unresolvable, re.error)


@dataclass(frozen=True, slots=True)
class CoercionChange:
    """One rule applied at one place of the value.

    ``path`` is JSON-path-like (``$.items[0].lat``, keys that are not plain
    identifiers are written ``$["a key"]``).  ``old``/``new`` are the value at
    that path immediately before and after *this* rule, so a JSON string that
    is decoded into an array is reported once with the decoded array as
    ``new`` and then once more for each element that was coerced further.
    """

    path: str
    old: Any
    new: Any
    rule: str


@dataclass(frozen=True, slots=True)
class CoercionResult:
    """The outcome of one coercion.

    ``value`` is the input object itself when nothing changed, so callers can
    cheaply test ``result.value is params``; otherwise it is a new value
    sharing every unchanged sub-object with the input (the input is never
    mutated).
    """

    value: Any
    changes: list[CoercionChange]
    # True when the input was checked and found valid as it was: a caller that validates
    # next (the executor's pre-flight check) can skip that second, identical check.
    known_valid: bool = False

    @property
    def changed(self) -> bool:
        """Whether any rule was applied."""
        return bool(self.changes)


def coerce(value: Any, schema: Mapping[str, Any] | bool) -> CoercionResult:
    """Coerce ``value`` to ``schema`` once.

    Convenience for one-off calls; it prepares a :class:`Coercer` every time,
    so code that coerces repeatedly against one schema should keep a Coercer.
    """
    return Coercer(schema).coerce(value)


class Coercer:
    """Coerces values to one JSON Schema; prepare once, use many times.

    Preparation checks the schema against its meta-schema (a broken
    capability schema is a programming error and should fail loudly at
    registration, not silently at call time), builds the ``referencing``
    registry and the validator used for the "already valid" fast path.
    Validators for sub-schemas and resolved ``$ref`` targets are compiled on
    first use and cached.

    Instances are safe to share between threads and tasks: a call keeps all
    its state on the stack; the only instance state written after ``__init__``
    is the two caches, and a lost race there merely builds the same entry
    twice.  The schema must not be mutated after the Coercer is created
    (caches are keyed by the identity of its sub-schemas).
    """

    def __init__(
        self, schema: Mapping[str, Any] | bool, *, format_checker: FormatChecker | None = None
    ) -> None:
        """Prepare coercion to ``schema``.

        ``format_checker`` should be the one the later validation uses, so that
        "already valid" means the same here and there (e.g. an anyOf branch
        ``{"type": "string", "format": "date"}`` does not count as satisfied
        by ``"5"`` when formats are asserted).  Default: formats are not
        asserted, as in plain JSON Schema validation.

        Raises :class:`jsonschema.exceptions.SchemaError` if the schema is not
        valid for its draft (``$schema``; Draft 2020-12 when absent).
        """
        self._schema = schema
        validator_cls: type[Validator] = validator_for(schema, default=Draft202012Validator)
        validator_cls.check_schema(schema)  # type: ignore[arg-type]
        dialect = schema.get("$schema") if isinstance(schema, Mapping) else None
        if isinstance(dialect, str):
            specification = referencing.jsonschema.specification_with(
                dialect, default=referencing.jsonschema.DRAFT202012
            )
        else:
            specification = referencing.jsonschema.DRAFT202012
        self._specification = specification
        resource = specification.create_resource(schema)
        root_uri = resource.id() or ""
        registry: referencing.jsonschema.SchemaRegistry = (
            referencing.Registry().with_resource(root_uri, resource).crawl()
        )
        self._resolver: _Resolver = registry.resolver(base_uri=root_uri)
        self._validator: Validator = validator_cls(
            schema, registry=registry, format_checker=format_checker
        )
        self._type_checker = validator_cls.TYPE_CHECKER
        keywords = validator_cls.VALIDATORS
        # Draft 2020-12 split "items" into prefixItems + items; older drafts
        # use an items array plus additionalItems.
        self._prefix_items = "prefixItems" in keywords
        # Up to draft 7, $ref makes a schema ignore its sibling keywords.
        self._ref_siblings = "$dynamicRef" in keywords or "$recursiveRef" in keywords
        self._validators: dict[int, tuple[Any, Validator]] = {}
        if isinstance(schema, Mapping):
            self._validators[id(schema)] = (schema, self._validator)
        self._refs: dict[int, tuple[Any, _Resolver] | None] = {}

    # ------------------------------------------------------------------ API

    def coerce(self, value: Any) -> CoercionResult:
        """Return ``value`` coerced to the schema, with the changes made.

        Never raises for any value: if the walk itself ran out of stack
        (possible only when called from an already very deep stack), the value
        is returned unchanged for validation to judge.
        """
        if self._check(value, self._schema, self._resolver) is True:
            return CoercionResult(value, [], known_valid=True)
        changes: list[CoercionChange] = []
        try:
            new = self._walk(value, self._schema, self._resolver, "$", 0, frozenset(), changes)
        except RecursionError:
            return CoercionResult(value, [])
        if not changes:
            return CoercionResult(value, [])
        return CoercionResult(new, changes)

    # ---------------------------------------------------------- validation

    def _check(self, value: Any, schema: Any, resolver: _Resolver) -> bool | None:
        """Whether ``value`` is valid against the sub-schema; None if undecidable.

        The answer decides whether a node needs coercing at all, and whether
        an anyOf/oneOf branch's coerced value is acceptable; "undecidable"
        (e.g. a value too deep for jsonschema) is treated cautiously by each
        caller.
        """
        if schema is True:
            return True
        if schema is False:
            return False
        if not isinstance(schema, Mapping):
            return None
        entry = self._validators.get(id(schema))
        if entry is None or entry[0] is not schema:
            validator = self._validator.evolve(schema=schema, _resolver=resolver)
            self._validators[id(schema)] = (schema, validator)
        else:
            validator = entry[1]
        try:
            return validator.is_valid(value)
        except _UNDECIDABLE:
            return None

    def _is_type(self, value: Any, type_name: str) -> bool:
        """The draft's own idea of a JSON type (bool is not an integer, etc.)."""
        try:
            return bool(self._type_checker.is_type(value, type_name))
        except UnknownType:
            return False

    # ------------------------------------------------------------- walking

    def _enter(self, schema: Any, resolver: _Resolver) -> _Resolver:
        """The resolver for a sub-schema, which may set a new base URI ($id)."""
        if isinstance(schema, Mapping) and self._specification.id_of(schema) is not None:
            return resolver.in_subresource(self._specification.create_resource(schema))
        return resolver

    def _lookup(
        self, schema: Mapping[str, Any], ref: str, resolver: _Resolver
    ) -> tuple[Any, _Resolver] | None:
        """Resolve a ``$ref`` once per referring schema; None if unresolvable."""
        key = id(schema)
        if key in self._refs:
            return self._refs[key]
        try:
            resolved = resolver.lookup(ref)
        except referencing.exceptions.Unresolvable:
            target = None
        else:
            target = (resolved.contents, resolved.resolver)
        self._refs[key] = target
        return target

    def _walk(
        self,
        value: Any,
        schema: Any,
        resolver: _Resolver,
        path: str,
        depth: int,
        seen: frozenset[int],
        changes: list[CoercionChange],
    ) -> Any:
        """Coerce ``value`` at ``path`` to ``schema``, appending to ``changes``.

        Returns ``value`` itself when nothing changed (copy-on-write), which
        is what makes "valid in, same object out" and cheap change detection
        possible.  ``seen`` holds the schema nodes already entered for this
        value position; it stops $ref cycles that never descend into the
        value and is reset whenever the walk moves to a child value.
        """
        if not isinstance(schema, Mapping) or depth > MAX_DEPTH:
            return value
        key = id(schema)
        if key in seen or len(seen) >= MAX_SCHEMA_HOPS:
            return value
        seen = seen | {key}
        if self._check(value, schema, resolver) is True:
            return value
        start = len(changes)
        current = value

        ref = schema.get("$ref")
        if isinstance(ref, str):
            target = self._lookup(schema, ref, resolver)
            if target is not None:
                contents, target_resolver = target
                current = self._walk(current, contents, target_resolver, path, depth, seen, changes)
            if not self._ref_siblings:
                return self._settle(value, current, changes, start)

        all_of = schema.get("allOf")
        if isinstance(all_of, list):
            for branch in all_of:
                current = self._walk(
                    current, branch, self._enter(branch, resolver), path, depth, seen, changes
                )

        current = self._coerce_type(current, schema, path, changes)
        if "enum" in schema and isinstance(schema["enum"], list):
            current = self._coerce_enum(current, schema["enum"], schema, "enum", path, changes)
        if "const" in schema:
            current = self._coerce_enum(current, [schema["const"]], schema, "const", path, changes)

        if isinstance(current, dict):
            current = self._walk_object(current, schema, resolver, path, depth, changes)
        elif isinstance(current, list):
            current = self._walk_array(current, schema, resolver, path, depth, changes)

        for keyword in ("anyOf", "oneOf"):
            branches = schema.get(keyword)
            if isinstance(branches, list) and branches:
                current = self._choose_branch(
                    current, branches, keyword == "oneOf", resolver, path, depth, seen, changes
                )

        return self._settle(value, current, changes, start)

    @staticmethod
    def _settle(original: Any, current: Any, changes: list[CoercionChange], start: int) -> Any:
        """Undo a node's changes if they cancelled out.

        With contradictory sub-schemas (allOf of a number and a string
        schema, say) one rule can undo another.  Reporting such a round trip
        would break idempotence and say something changed when it did not.
        """
        if len(changes) > start and _same_json(current, original):
            del changes[start:]
            return original
        return current

    def _choose_branch(
        self,
        value: Any,
        branches: list[Any],
        exclusive: bool,
        resolver: _Resolver,
        path: str,
        depth: int,
        seen: frozenset[int],
        changes: list[CoercionChange],
    ) -> Any:
        """anyOf/oneOf: keep the first branch whose coerced value validates.

        If the value already satisfies some branch (or that cannot be
        decided), it is left alone: coercing it towards an earlier branch
        would change a value the schema accepts.  If no branch accepts its
        coerced value, nothing is changed; a half-coerced value matching no
        branch would only make the validation error harder to read.  For
        oneOf (``exclusive``) a candidate that also satisfies another branch
        is skipped too, since it would still fail the oneOf; for the same
        reason a value that already satisfies two or more oneOf branches is
        not "already valid".
        """
        entered = [(branch, self._enter(branch, resolver)) for branch in branches]
        verdicts = [self._check(value, branch, r) for branch, r in entered]
        if None in verdicts:
            return value
        # A value matching two oneOf branches fails the oneOf, so only there
        # is a value that already satisfies a branch worth coercing further.
        if (verdicts.count(True) == 1) if exclusive else (True in verdicts):
            return value
        for index, (branch, branch_resolver) in enumerate(entered):
            local: list[CoercionChange] = []
            candidate = self._walk(value, branch, branch_resolver, path, depth, seen, local)
            if candidate is value or self._check(candidate, branch, branch_resolver) is not True:
                continue
            if exclusive and any(
                self._check(candidate, other, other_resolver) is not False
                for other_index, (other, other_resolver) in enumerate(entered)
                if other_index != index
            ):
                continue
            changes.extend(local)
            return candidate
        return value

    def _walk_object(
        self,
        obj: dict[Any, Any],
        schema: Mapping[str, Any],
        resolver: _Resolver,
        path: str,
        depth: int,
        changes: list[CoercionChange],
    ) -> dict[Any, Any]:
        """Coerce each present member; absent members are never created."""
        properties = schema.get("properties")
        if not isinstance(properties, Mapping):
            properties = {}
        patterns = schema.get("patternProperties")
        if not isinstance(patterns, Mapping):
            patterns = {}
        additional = schema.get("additionalProperties")
        result: dict[Any, Any] | None = None
        for name, member in obj.items():
            subschemas: list[Any] = []
            if name in properties:
                subschemas.append(properties[name])
            if isinstance(name, str):
                for pattern, subschema in patterns.items():
                    try:
                        if re.search(pattern, name):
                            subschemas.append(subschema)
                    except re.error:
                        continue
            if not subschemas and isinstance(additional, Mapping):
                subschemas.append(additional)
            current = member
            child_path = _child_path(path, name)
            for subschema in subschemas:
                current = self._walk(
                    current,
                    subschema,
                    self._enter(subschema, resolver),
                    child_path,
                    depth + 1,
                    frozenset(),
                    changes,
                )
            if current is not member:
                if result is None:
                    result = dict(obj)
                result[name] = current
        return obj if result is None else result

    def _walk_array(
        self,
        items: list[Any],
        schema: Mapping[str, Any],
        resolver: _Resolver,
        path: str,
        depth: int,
        changes: list[CoercionChange],
    ) -> list[Any]:
        """Coerce each element against its positional or common item schema."""
        items_keyword = schema.get("items")
        if self._prefix_items:
            prefix = schema.get("prefixItems")
            rest = items_keyword
        elif isinstance(items_keyword, list):
            prefix = items_keyword
            rest = schema.get("additionalItems")
        else:
            prefix = None
            rest = items_keyword
        if not isinstance(prefix, list):
            prefix = []
        result: list[Any] | None = None
        for index, element in enumerate(items):
            subschema = prefix[index] if index < len(prefix) else rest
            if not isinstance(subschema, Mapping):
                continue
            current = self._walk(
                element,
                subschema,
                self._enter(subschema, resolver),
                f"{path}[{index}]",
                depth + 1,
                frozenset(),
                changes,
            )
            if current is not element:
                if result is None:
                    result = list(items)
                result[index] = current
        return items if result is None else result

    # ------------------------------------------------------- scalar rules

    def _coerce_type(
        self, value: Any, schema: Mapping[str, Any], path: str, changes: list[CoercionChange]
    ) -> Any:
        """Apply the ``type`` keyword's conversions, if the type is wrong.

        A value whose type is among the allowed ones is never converted,
        even if it fails other keywords: ``"5"`` for ``["string", "integer"]``
        is a fine string.
        """
        types = _type_names(schema)
        if not types or "any" in types or any(self._is_type(value, t) for t in types):
            return value
        converted = self._convert(value, types)
        if converted is None:
            return value
        new, rule = converted
        changes.append(CoercionChange(path, value, new, rule))
        return new

    def _convert(self, value: Any, types: list[str]) -> tuple[Any, str] | None:
        """The first lossless conversion of ``value`` to one of ``types``.

        Preference order for text: integer, number, boolean, object, array,
        so ``"1"`` for ``["boolean", "integer"]`` becomes ``1``.
        """
        if isinstance(value, str):
            if "integer" in types:
                integer = _parse_integer(value)
                if integer is not None:
                    return integer, "string->integer"
            if "number" in types:
                number = _parse_number(value)
                if number is not None:
                    return number, "string->number"
            if "boolean" in types:
                boolean = _parse_boolean(value)
                if boolean is not None:
                    return boolean, "string->boolean"
            if "object" in types:
                obj = _parse_json(value, dict)
                if obj is not None:
                    return obj, "json-string->object"
            if "array" in types:
                array = _parse_json(value, list)
                if array is not None:
                    return array, "json-string->array"
            return None
        if isinstance(value, bool):
            if "string" in types:
                return ("true" if value else "false"), "boolean->string"
            return None
        if isinstance(value, int | float):
            # Only reachable for drafts 3/4, where 5.0 is not an "integer".
            if (
                "integer" in types
                and isinstance(value, float)
                and math.isfinite(value)
                and value.is_integer()
            ):
                return int(value), "number->integer"
            if "string" in types:
                text = _number_text(value)
                if text is not None:
                    return text, "number->string"
        return None

    def _coerce_enum(
        self,
        value: Any,
        members: list[Any],
        schema: Mapping[str, Any],
        keyword: str,
        path: str,
        changes: list[CoercionChange],
    ) -> Any:
        """Replace a near-miss by the canonical enum/const member.

        Only when exactly one member matches: first by exact text after
        trimming, then loosely (case-insensitively, or numeric/boolean text
        equal to a numeric/boolean member, or a number/boolean equal to a
        text member).  Members that ``type`` forbids are not candidates.
        """
        if any(_json_equal(value, member) for member in members):
            return value
        types = _type_names(schema)

        def allowed(member: Any) -> bool:
            return not types or any(self._is_type(member, t) for t in types)

        candidates = [m for m in _unique(members) if allowed(m)]
        chosen: list[Any] = []
        if isinstance(value, str):
            stripped = value.strip()
            chosen = [m for m in candidates if isinstance(m, str) and m == stripped]
        if not chosen:
            chosen = [m for m in candidates if _loosely_equal(value, m)]
        if len(chosen) != 1:
            return value
        member = chosen[0]
        if isinstance(value, str) and isinstance(member, str):
            rule = f"{keyword}-case"
        else:
            rule = f"{keyword}-{_json_type(value)}->{_json_type(member)}"
        changes.append(CoercionChange(path, value, member, rule))
        return member


# ------------------------------------------------------------ helpers


def _child_path(path: str, name: Any) -> str:
    """``$.a`` for identifier-like keys, ``$["a b"]`` for anything else."""
    if isinstance(name, str) and _IDENTIFIER.fullmatch(name):
        return f"{path}.{name}"
    key = name if isinstance(name, str) else str(name)
    return f"{path}[{json.dumps(key, ensure_ascii=False)}]"


def _type_names(schema: Mapping[str, Any]) -> list[str]:
    """The ``type`` keyword as a list of names (draft-3 schema entries dropped)."""
    types = schema.get("type")
    if isinstance(types, str):
        return [types]
    if isinstance(types, list):
        return [t for t in types if isinstance(t, str)]
    return []


def _json_type(value: Any) -> str:
    """A JSON type name for rule names."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if value is None:
        return "null"
    if isinstance(value, list):
        return "array"
    return "object"


def _split_number(text: str) -> re.Match[str] | None:
    """Match ``text`` (trimmed) as a plain decimal number, or None."""
    match = _NUMBER.fullmatch(text.strip())
    if match is None or not (match["int"] or match["frac"]):
        return None
    return match


def _parse_integer(text: str) -> int | None:
    """Exact integer value of numeric text, or None if it is not integral.

    ``"5"``, ``" 5.0 "``, ``"1e3"`` and ``"1.5e1"`` are integers; ``"5.5"``
    is not, and is never rounded.  Arbitrary size is fine (Python ints),
    computed without going through float so nothing is lost.
    """
    match = _split_number(text)
    if match is None:
        return None
    frac = match["frac"] or ""
    try:
        exponent = int(match["exp"] or "0")
        if abs(exponent) > _MAX_INTEGER_EXPONENT:
            return None
        digits = (match["int"] or "") + frac
        scale = exponent - len(frac)
        if scale >= 0:
            magnitude = int(digits) * 10**scale
        else:
            head, tail = digits[:scale], digits[scale:]
            if tail.strip("0"):
                return None
            magnitude = int(head or "0")
    except ValueError:  # more digits than int() accepts
        return None
    return -magnitude if match["sign"] == "-" else magnitude


def _parse_number(text: str) -> int | float | None:
    """Value of numeric text: int for plain integer text, else finite float.

    ``"42"`` stays an exact (arbitrarily large) int; anything with a fraction
    or exponent is a float, as JSON parsing would give.  Text whose float
    would be infinite or would underflow to zero is refused.
    """
    match = _split_number(text)
    if match is None:
        return None
    stripped = text.strip()
    if match["frac"] is None and match["exp"] is None:
        try:
            return int(stripped)
        except ValueError:
            return None
    try:
        number = float(stripped)
    except (ValueError, OverflowError):
        return None
    if not math.isfinite(number):
        return None
    if number == 0.0 and ((match["int"] or "") + (match["frac"] or "")).strip("0"):
        return None  # underflow: nonzero text became zero
    return number


def _parse_boolean(text: str) -> bool | None:
    """true/false, yes/no, 1/0 in any case, surrounding whitespace ignored."""
    return _BOOLEAN_WORDS.get(text.strip().casefold())


def _reject_constant(name: str) -> Any:
    """json.loads hook: refuse NaN/Infinity, which JSON itself does not have."""
    raise ValueError(f"non-finite constant {name!r}")


def _finite_float(text: str) -> float:
    """json.loads hook: refuse floats that overflow or underflow."""
    number = _parse_number(text)
    if number is None:
        raise ValueError(f"number {text!r} does not fit a float")
    return float(number)


def _parse_json(text: str, kind: type[dict[Any, Any]] | type[list[Any]]) -> Any:
    """Decode a JSON-encoded object/array, or None if it is not one."""
    stripped = text.strip()
    if not stripped.startswith("{" if kind is dict else "["):
        return None
    try:
        decoded = json.loads(stripped, parse_constant=_reject_constant, parse_float=_finite_float)
    except (ValueError, RecursionError):
        return None
    return decoded if isinstance(decoded, kind) else None


def _number_text(value: int | float) -> str | None:
    """The JSON spelling of a number (``5`` -> ``"5"``, ``2.5`` -> ``"2.5"``)."""
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else None
    try:
        return str(value)
    except ValueError:  # more digits than str() will produce
        return None


def _loosely_equal(value: Any, member: Any) -> bool:
    """Whether ``value`` is a different spelling of enum member ``member``."""
    if isinstance(member, str):
        if isinstance(value, str):
            return value.strip().casefold() == member.strip().casefold()
        if isinstance(value, bool):
            return ("true" if value else "false") == member.strip().casefold()
        if isinstance(value, int | float):
            return _number_text(value) == member.strip()
        return False
    if isinstance(member, bool):
        return isinstance(value, str) and _parse_boolean(value) is member
    if isinstance(member, int | float):
        if isinstance(value, str):
            number = _parse_number(value)
            return number is not None and number == member
        return False
    return False


def _unique(members: list[Any]) -> list[Any]:
    """Enum members without JSON-equal duplicates, order kept."""
    result: list[Any] = []
    for member in members:
        if not any(_json_equal(member, seen) for seen in result):
            result.append(member)
    return result


def _json_equal(left: Any, right: Any) -> bool:
    """JSON Schema equality: 1 == 1.0, but booleans are not numbers."""
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left is right
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(_json_equal(left[k], right[k]) for k in left)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(
            _json_equal(a, b) for a, b in zip(left, right, strict=True)
        )
    if isinstance(left, int | float) and isinstance(right, int | float):
        return left == right
    if type(left) is not type(right):
        return False
    return bool(left == right)


def _same_json(left: Any, right: Any) -> bool:
    """Strict structural identity: also 5 vs 5.0 differ. Shared objects short-cut."""
    if left is right:
        return True
    if type(left) is not type(right):
        return False
    if isinstance(left, dict):
        return left.keys() == right.keys() and all(_same_json(left[k], right[k]) for k in left)
    if isinstance(left, list):
        return len(left) == len(right) and all(
            _same_json(a, b) for a, b in zip(left, right, strict=True)
        )
    return bool(left == right)
