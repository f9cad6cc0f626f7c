"""Schema-driven parameter coercion (defense layer 2).

LLMs usually fill tool parameters with the right *meaning* but the wrong JSON
*type*: ``{"lat": "35.6897"}`` where the capability's input schema wants a
number, ``"TRUE"`` for a boolean, ``"['a', 'b']"`` for an array, ``"celsius"``
for an enum member spelled ``"Celsius"``.  Sending such a call to a tool wastes
an attempt (and usually an LLM repair round-trip), so before every tool call
the parameters are coerced to the capability's input JSON Schema.

The rules, each reported as a :class:`CoercionChange` whose ``rule`` is the
name in brackets:

* numeric text to a number or integer (``string->number``,
  ``string->integer``): ASCII decimal notation only, integers exact at any
  size, ``"5.0"`` is the integer 5 but ``"5.5"`` is never rounded;
* ``true/false/yes/no/1/0`` text to a boolean (``string->boolean``);
* JSON text of an object or array (``json-string->object``,
  ``json-string->array``) and **Python-literal** text of one
  (``python-literal->object``, ``python-literal->array``): ``"['I', 'V']"``,
  ``"{'math': 90, 'done': True}"``, ``"(1, 2)"`` for an array.  Python text
  is read with :func:`ast.literal_eval` (never ``eval``) after a token scan
  that bounds its size and nesting and admits only what JSON can say:
  decimal numbers, strings (no bytes, no implicit concatenation such as
  ``'a' 'b'``), ``True``/``False``/``None``, lists, tuples (read as
  arrays) and dicts with string keys;
* a number to a string where the schema wants a string and no kind of
  number (``number->string``): ``42`` -> ``"42"``, ``2.5`` -> ``"2.5"``
  (floats as :func:`repr` writes them, ints in full);
* an integer-valued float to a Python ``int`` wherever the schema says
  ``integer`` (``number->integer``): ``4.0`` -> ``4`` at any depth, in a
  ``["integer", "null"]`` type list or an ``anyOf``/``oneOf`` branch (only
  when the branch that the value satisfies first is the integer one);
  ``4.5`` stays;
* a single value where the schema wants an array of such values
  (``scalar->array``): ``"flour"`` -> ``["flour"]``, when the item schema
  accepts the value (after its own coercion) and nothing else in the schema
  could take the value as it is.  Text that looks like a list attempt
  (starting with a bracket, or holding ``,``, ``;`` or a line break) is not
  wrapped: ``"C, E, G"`` is one item or three, and guessing is layer 3's job;
* ``null`` for an optional property (``optional-null->removed``): the key
  is dropped, which is what the caller meant.  Only for a property declared
  in ``properties`` that no schema at that place lists as ``required`` and
  whose schema rejects null.  The change's ``new`` is :data:`REMOVED`;
* an enum/const near miss to the one member it spells (``enum-case``,
  ``const-case``, ``enum-string->number`` ...).

The coercer is deliberately conservative, because a wrong guess is worse than
a validation error that layer 3 can report:

* it never loses information (no rounding, no NaN/Infinity from text, no
  locale guessing such as ``"1,234"``, no float underflow to ``0.0``);
* it never invents data (missing fields stay missing, defaults are not filled,
  ``True`` never becomes ``1``, and a boolean is not turned into text: for a
  string parameter ``true`` could mean ``"true"``, ``"True"``, ``"yes"`` or a
  misplaced flag);
* a value that already validates is returned as the very same object with no
  changes -- with one exception: integer-valued floats where the schema says
  ``integer``.  JSON Schema (draft 6 on) counts ``4.0`` as an integer, but
  Python tools, strict pydantic models and Go's ``encoding/json`` reject or
  mistype it, so ``4.0`` becomes ``4``: the same JSON number, only its Python
  representation changes, and the result is still valid;
* coercion is idempotent;
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
them are left as they are (and then validated as usual).  ``required`` is
gathered from every schema that applies at a place (including ``allOf``,
``anyOf``, ``oneOf``, ``if``/``then``/``else`` and the dependency keywords)
before an optional ``null`` is dropped.
"""

from __future__ import annotations

import ast
import io
import json
import math
import re
import tokenize
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import referencing.exceptions
from jsonschema import Draft202012Validator, FormatChecker
from jsonschema.exceptions import UnknownType
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for

from orchestration import _schema

if TYPE_CHECKING:
    from orchestration._schema import Resolver as _Resolver

    # The schemas a value position was entered with, and the resolver they
    # were reached from.
    _Position = tuple[Sequence[Any], _Resolver]

__all__ = [
    "MAX_DEPTH",
    "MAX_LITERAL_CHARS",
    "MAX_SCHEMA_HOPS",
    "REMOVED",
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

#: How many times a coerced value is coerced again, until no rule applies any more
#: (see :meth:`Coercer.coerce`).  Two passes settle every value known to need more
#: than one; a value still changing after this many is one the schema's parts keep
#: pulling apart, and is returned as it was given.
MAX_PASSES: Final = 4

#: Longest Python-literal text that is decoded (after trimming).  The token
#: scan that guards :func:`ast.literal_eval` is pure Python, so this bounds the
#: CPU a hostile string can cost (about 10 ms at the limit); a tool parameter
#: written as a Python list is never this long in practice.  Its nesting is
#: bounded by :data:`MAX_DEPTH`, well below the parser's own limit.
MAX_LITERAL_CHARS: Final = 10_000


class _Removed(str):
    """Type of :data:`REMOVED`: a ``str`` so that run results stay JSON."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<removed>"

    def __reduce__(self) -> str:
        # pickle and copy hand back the module's singleton, so `is REMOVED` survives
        return "REMOVED"


#: The ``new`` of a change that dropped an optional ``null`` member
#: (rule ``optional-null->removed``).  It is the string ``"<removed>"`` (so a
#: change still serializes as JSON in run results and logs) and a singleton:
#: test ``change.new is REMOVED`` rather than comparing text.
REMOVED: Final = _Removed("<removed>")

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

# Backslash escapes in Python string tokens.  Python warns about unknown ones
# such as "\d" (SyntaxWarning from 3.12), and a warning cannot be silenced
# thread-safely, so such text is refused before it is compiled.
_ESCAPE = re.compile(r"\\(.)", re.DOTALL)
_VALID_ESCAPES: Final = frozenset("\n\\'\"abfnrtv01234567xNuU")

# Tokens a Python literal of JSON values consists of.
_ATOMS: Final = frozenset({str, int, bool, type(None)})
_LITERAL_NAMES: Final = frozenset({"True", "False", "None"})
_LITERAL_OPERATORS: Final = frozenset({",", ":", "-", "+"})
_OPENERS: Final = frozenset({"[", "(", "{"})
_CLOSERS: Final = frozenset({"]", ")", "}"})
_IGNORED_TOKENS: Final = frozenset({tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.ENDMARKER})

# Text that is not wrapped into a one-element array: it may be an attempt at
# several items ("C, E, G", "a; b", one per line) or at an encoded list.
_LIST_LIKE = re.compile(r"[,;\n]|^\s*[\[({]")

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
    A member that was dropped (rule ``optional-null->removed``) has ``new``
    set to :data:`REMOVED`.
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
    # True when the returned value was checked and found valid: a caller that validates
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
    is the caches, and a lost race there merely builds the same entry twice.
    The schema must not be mutated after the Coercer is created (caches are
    keyed by the identity of its sub-schemas).
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
        # $refs are resolved the way everything in dagwright resolves them
        registry, root_uri = _schema.registry_for(schema)
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
        # Whether any schema here says "integer" at all: if not, a valid value
        # never needs its floats looked at, which keeps the fast path cheap.
        self._says_integer = _mentions_integer(schema)
        self._float_integers = self._is_type(1.0, "integer")
        self._position: _Position = ((schema,), self._resolver)
        self._validators: dict[int, tuple[Any, Validator]] = {}
        if isinstance(schema, Mapping):
            self._validators[id(schema)] = (schema, self._validator)
        self._refs: dict[int, tuple[Any, _Resolver] | None] = {}
        self._required: dict[int, tuple[Any, frozenset[str]]] = {}
        self._admits_cache: dict[tuple[int, str], tuple[Any, bool]] = {}
        # the common case -- parameters already valid -- told without walking the schema
        # generically; anything it does not accept is judged by the validator as before
        self._accept = _schema.accept_check(schema, format_checker)

    # ------------------------------------------------------------------ API

    def coerce(self, value: Any) -> CoercionResult:
        """Return ``value`` coerced to the schema, with the changes made.

        The result is a fixed point: coercing it again changes nothing.  One walk
        does not always get there, since a rule applied late can give an earlier
        part of the schema something to do (an ``allOf`` whose second branch
        turns ``"0.0"`` into ``0.0`` after the first, ``{"type": ["integer",
        "string"]}``, had passed the text: the float is then ``0`` for it), so
        the coerced value is coerced again until no rule applies, at most
        :data:`MAX_PASSES` times, and the changes of every pass are reported in
        order.  Parts of a schema that undo each other's fixes for good
        (``allOf`` of an enum of numbers and a string type: ``1.0`` -> ``"1.0"``
        -> ``1`` -> ``"1"`` ...) settle, or end with the value returned as it was
        given: no fix is then reported for a value that has none.

        Never raises for any value: if the walk itself ran out of stack
        (possible only when called from an already very deep stack), the value
        is returned unchanged for validation to judge.
        """
        result = self._coerce_once(value)
        if not result.changes:
            return result
        changes = list(result.changes)
        for _ in range(MAX_PASSES - 1):
            again = self._coerce_once(result.value)
            if not again.changes:  # settled
                return CoercionResult(result.value, changes, known_valid=again.known_valid)
            changes.extend(again.changes)
            result = again
        return CoercionResult(value, [])

    def _coerce_once(self, value: Any) -> CoercionResult:
        """One walk of ``value`` through the schema (valid values: the fast path)."""
        changes: list[CoercionChange]
        accept = self._accept
        if (accept is not None and accept(value)) or (
                self._check(value, self._schema, self._resolver) is True):
            if not self._says_integer or not _has_integral_float(value, 0):
                return CoercionResult(value, [], known_valid=True)
            changes = []
            try:
                new = self._integers(value, self._schema, self._resolver, "$", 0, frozenset(), changes)
            except RecursionError:
                return CoercionResult(value, [], known_valid=True)
            # From draft 6 on, 4 and 4.0 are the same to every keyword; drafts 3
            # and 4 tell them apart (`not: {type: integer}`), so check again there.
            if not changes or (
                not self._float_integers and self._check(new, self._schema, self._resolver) is not True
            ):
                return CoercionResult(value, [], known_valid=True)
            return CoercionResult(new, changes, known_valid=True)
        changes = []
        try:
            new = self._walk(
                value, self._schema, self._resolver, "$", 0, frozenset(), changes, True, self._position
            )
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

    @staticmethod
    def _enter(schema: Any, resolver: _Resolver) -> _Resolver:
        """The resolver for a sub-schema, which may set a new base URI ($id)."""
        return _schema.enter(schema, resolver)

    def _lookup(
        self, schema: Mapping[str, Any], ref: str, resolver: _Resolver
    ) -> tuple[Any, _Resolver] | None:
        """Resolve a ``$ref`` once per referring schema; None if unresolvable."""
        key = id(schema)
        if key in self._refs:
            return self._refs[key]
        target = _schema.lookup(ref, resolver)
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
        loose: bool,
        position: _Position,
    ) -> Any:
        """Coerce ``value`` at ``path`` to ``schema``, appending to ``changes``.

        Returns ``value`` itself when nothing changed (copy-on-write), which
        is what makes "valid in, same object out" and cheap change detection
        possible.  ``seen`` holds the schema nodes already entered for this
        value position; it stops $ref cycles that never descend into the
        value and is reset whenever the walk moves to a child value.

        ``loose`` allows the two rules that turn a value into a more accepting
        type (a number into text, a value into an array of one); an anyOf or
        oneOf turns it off while it looks for a branch that fits the value
        without them.  ``position`` holds every schema the walk entered this
        value position with (and the resolver they were reached from), where
        ``required`` is looked up before an optional null is dropped.
        """
        if not isinstance(schema, Mapping) or depth > MAX_DEPTH:
            return value
        key = id(schema)
        if key in seen or len(seen) >= MAX_SCHEMA_HOPS:
            return value
        if self._check(value, schema, resolver) is True:
            if self._says_integer and _has_integral_float(value, depth):
                return self._integers(value, schema, resolver, path, depth, seen, changes)
            return value
        seen = seen | {key}
        start = len(changes)
        current = value

        ref = schema.get("$ref")
        if isinstance(ref, str):
            target = self._lookup(schema, ref, resolver)
            if target is not None:
                contents, target_resolver = target
                current = self._walk(
                    current, contents, target_resolver, path, depth, seen, changes, loose, position
                )
            if not self._ref_siblings:
                return self._settle(value, current, changes, start)

        all_of = schema.get("allOf")
        if isinstance(all_of, list):
            for branch in all_of:
                current = self._walk(
                    current,
                    branch,
                    self._enter(branch, resolver),
                    path,
                    depth,
                    seen,
                    changes,
                    loose,
                    position,
                )

        current = self._coerce_type(current, schema, path, changes, loose)
        if loose and not isinstance(current, list) and self._may_wrap(current, schema):
            current = self._wrap(current, schema, resolver, path, depth, changes)
        if "enum" in schema and isinstance(schema["enum"], list):
            current = self._coerce_enum(current, schema["enum"], schema, "enum", path, changes)
        if "const" in schema:
            current = self._coerce_enum(current, [schema["const"]], schema, "const", path, changes)

        if isinstance(current, dict):
            current = self._walk_object(current, schema, resolver, path, depth, changes, position)
        elif isinstance(current, list):
            current = self._walk_array(current, schema, resolver, path, depth, changes)

        for keyword in ("anyOf", "oneOf"):
            branches = schema.get(keyword)
            if isinstance(branches, list) and branches:
                current = self._choose_branch(
                    current,
                    branches,
                    keyword == "oneOf",
                    resolver,
                    path,
                    depth,
                    seen,
                    changes,
                    loose,
                    position,
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
        loose: bool,
        position: _Position,
    ) -> Any:
        """anyOf/oneOf: keep the first branch whose coerced value validates.

        If the value already satisfies some branch (or that cannot be
        decided), it is left alone: coercing it towards an earlier branch
        would change a value the schema accepts (its integer-valued floats
        are still made ints if that first satisfied branch says integer).  If
        no branch accepts its coerced value, nothing is changed; a
        half-coerced value matching no branch would only make the validation
        error harder to read.  For oneOf (``exclusive``) a candidate that
        also satisfies another branch is skipped too, since it would still
        fail the oneOf; for the same reason a value that already satisfies
        two or more oneOf branches is not "already valid".

        Branches are first tried without the loosening rules; only if none
        fits that way may a branch turn a number into text or a value into an
        array, and then only if no other branch could take a value of that
        JSON type (``42`` for ``anyOf [{"type": "integer", "maximum": 10},
        {"type": "string"}]`` is an out-of-range integer, not a string).
        """
        entered = [(branch, self._enter(branch, resolver)) for branch in branches]
        verdicts = [self._check(value, branch, r) for branch, r in entered]
        if None in verdicts:
            return value
        # A value matching two oneOf branches fails the oneOf, so only there
        # is a value that already satisfies a branch worth coercing further.
        if (verdicts.count(True) == 1) if exclusive else (True in verdicts):
            if self._says_integer and _has_integral_float(value, depth):
                branch, branch_resolver = entered[verdicts.index(True)]
                return self._integers(value, branch, branch_resolver, path, depth, seen, changes)
            return value
        passes = [False, True] if loose else [False]
        kind = _json_type(value)
        for loosened in passes:
            for index, (branch, branch_resolver) in enumerate(entered):
                if loosened and any(
                    self._admits(kind, other, other_resolver, frozenset())
                    for other_index, (other, other_resolver) in enumerate(entered)
                    if other_index != index
                ):
                    continue
                local: list[CoercionChange] = []
                candidate = self._walk(
                    value, branch, branch_resolver, path, depth, seen, local, loosened, position
                )
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

    @staticmethod
    def _object_keywords(schema: Mapping[str, Any]) -> tuple[Mapping[str, Any], Mapping[str, Any], Any]:
        """``properties``, ``patternProperties`` (empty if absent) and ``additionalProperties``."""
        properties = schema.get("properties")
        patterns = schema.get("patternProperties")
        return (
            properties if isinstance(properties, Mapping) else {},
            patterns if isinstance(patterns, Mapping) else {},
            schema.get("additionalProperties"),
        )

    @staticmethod
    def _member_schemas(
        keywords: tuple[Mapping[str, Any], Mapping[str, Any], Any], name: Any
    ) -> list[Any]:
        """The sub-schemas that apply to member ``name`` (see :meth:`_object_keywords`)."""
        properties, patterns, additional = keywords
        subschemas: list[Any] = []
        if name in properties:
            subschemas.append(properties[name])
        if patterns and isinstance(name, str):
            for pattern, subschema in patterns.items():
                try:
                    if re.search(pattern, name):
                        subschemas.append(subschema)
                except re.error:
                    continue
        if not subschemas and isinstance(additional, Mapping):
            subschemas.append(additional)
        return subschemas

    def _item_schema(self, schema: Mapping[str, Any], index: int) -> Any:
        """The sub-schema for element ``index`` of an array; None if there is none."""
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
        if isinstance(prefix, list) and index < len(prefix):
            return prefix[index]
        return rest

    def _walk_object(
        self,
        obj: dict[Any, Any],
        schema: Mapping[str, Any],
        resolver: _Resolver,
        path: str,
        depth: int,
        changes: list[CoercionChange],
        position: _Position,
    ) -> dict[Any, Any]:
        """Coerce each present member; absent members are never created.

        A ``null`` member is dropped when it is declared in ``properties``,
        its schema rejects null and it is not required (see the module
        docstring); a required one stays for validation to report.
        """
        keywords = self._object_keywords(schema)
        properties = keywords[0]
        result: dict[Any, Any] | None = None
        for name, member in obj.items():
            subschemas = self._member_schemas(keywords, name)
            child_path = _child_path(path, name)
            if member is None and name in properties and self._drops_null(
                name, subschemas, resolver, position
            ):
                if result is None:
                    result = dict(obj)
                del result[name]
                changes.append(CoercionChange(child_path, None, REMOVED, "optional-null->removed"))
                continue
            current = member
            for subschema in subschemas:
                current = self._walk(
                    current,
                    subschema,
                    self._enter(subschema, resolver),
                    child_path,
                    depth + 1,
                    frozenset(),
                    changes,
                    True,
                    (subschemas, resolver),
                )
            if current is not member:
                if result is None:
                    result = dict(obj)
                result[name] = current
        return obj if result is None else result

    def _drops_null(
        self, name: Any, subschemas: list[Any], resolver: _Resolver, position: _Position
    ) -> bool:
        """Whether a null member ``name`` is an optional parameter sent as null."""
        if not any(self._check(None, s, self._enter(s, resolver)) is False for s in subschemas):
            return False
        schemas, base = position
        return not any(name in self._required_names(s, self._enter(s, base)) for s in schemas)

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
        result: list[Any] | None = None
        for index, element in enumerate(items):
            subschema = self._item_schema(schema, index)
            if not isinstance(subschema, Mapping):
                continue
            sub_resolver = self._enter(subschema, resolver)
            current = self._walk(
                element,
                subschema,
                sub_resolver,
                f"{path}[{index}]",
                depth + 1,
                frozenset(),
                changes,
                True,
                ((subschema,), resolver),
            )
            if current is not element:
                if result is None:
                    result = list(items)
                result[index] = current
        return items if result is None else result

    # ------------------------------------------------ integer-valued floats

    def _integers(
        self,
        value: Any,
        schema: Any,
        resolver: _Resolver,
        path: str,
        depth: int,
        seen: frozenset[int],
        changes: list[CoercionChange],
    ) -> Any:
        """Make integer-valued floats ints where ``schema`` says integer.

        Only called for a value that is valid against ``schema``, so it
        follows the schema the way the value satisfies it: ``$ref`` and
        every ``allOf`` branch, the first ``anyOf``/``oneOf`` branch the value
        satisfies, and each member or element's own sub-schemas.  Nothing but
        ``4.0`` -> ``4`` is done here.  Copy-on-write like :meth:`_walk`.
        """
        if not isinstance(schema, Mapping) or depth > MAX_DEPTH:
            return value
        key = id(schema)
        if key in seen or len(seen) >= MAX_SCHEMA_HOPS:
            return value
        seen = seen | {key}
        if isinstance(value, float) and value.is_integer() and "integer" in _type_names(schema):
            new = int(value)
            changes.append(CoercionChange(path, value, new, "number->integer"))
            return new
        current = value
        ref = schema.get("$ref")
        if isinstance(ref, str):
            target = self._lookup(schema, ref, resolver)
            if target is not None:
                current = self._integers(current, *target, path, depth, seen, changes)
            if not self._ref_siblings:
                return current
        all_of = schema.get("allOf")
        if isinstance(all_of, list):
            for branch in all_of:
                current = self._integers(
                    current, branch, self._enter(branch, resolver), path, depth, seen, changes
                )
        for keyword in ("anyOf", "oneOf"):
            branches = schema.get(keyword)
            if not isinstance(branches, list):
                continue
            for branch in branches:
                branch_resolver = self._enter(branch, resolver)
                verdict = self._check(current, branch, branch_resolver)
                if verdict is None:
                    break
                if verdict:
                    current = self._integers(
                        current, branch, branch_resolver, path, depth, seen, changes
                    )
                    break
        if isinstance(current, dict):
            keywords = self._object_keywords(schema)
            result: Any = None
            for name, member in current.items():
                if not _has_integral_float(member, depth + 1):
                    continue
                new_member = member
                for subschema in self._member_schemas(keywords, name):
                    new_member = self._integers(
                        new_member,
                        subschema,
                        self._enter(subschema, resolver),
                        _child_path(path, name),
                        depth + 1,
                        frozenset(),
                        changes,
                    )
                if new_member is not member:
                    if result is None:
                        result = dict(current)
                    result[name] = new_member
            return current if result is None else result
        if isinstance(current, list):
            elements: Any = None
            for index, element in enumerate(current):
                subschema = self._item_schema(schema, index)
                if not isinstance(subschema, Mapping) or not _has_integral_float(element, depth + 1):
                    continue
                new_element = self._integers(
                    element,
                    subschema,
                    self._enter(subschema, resolver),
                    f"{path}[{index}]",
                    depth + 1,
                    frozenset(),
                    changes,
                )
                if new_element is not element:
                    if elements is None:
                        elements = list(current)
                    elements[index] = new_element
            return current if elements is None else elements
        return current

    # ------------------------------------------------- schema look-ups

    def _required_names(self, schema: Any, resolver: _Resolver) -> frozenset[str]:
        """Every property name required by ``schema`` or anything applied with it.

        Gathered through ``$ref``, ``allOf``/``anyOf``/``oneOf``,
        ``if``/``then``/``else``, ``dependentRequired``, ``dependencies`` and
        ``dependentSchemas`` (and draft 3's ``"required": true`` inside a
        property), so that a null is dropped only when nothing could require
        it.  Erring towards "required" keeps a null, which is safe.
        """
        if not isinstance(schema, Mapping):
            return frozenset()
        entry = self._required.get(id(schema))
        if entry is not None and entry[0] is schema:
            return entry[1]
        names: set[str] = set()
        self._collect_required(schema, resolver, names, set())
        result = frozenset(names)
        self._required[id(schema)] = (schema, result)
        return result

    def _collect_required(
        self, schema: Any, resolver: _Resolver, names: set[str], visited: set[int]
    ) -> None:
        """Add to ``names`` what :meth:`_required_names` describes (each node once)."""
        if not isinstance(schema, Mapping) or id(schema) in visited:
            return
        visited.add(id(schema))
        required = schema.get("required")
        if isinstance(required, list):
            names.update(n for n in required if isinstance(n, str))
        properties = schema.get("properties")
        if isinstance(properties, Mapping):
            names.update(
                name
                for name, sub in properties.items()
                if isinstance(name, str) and isinstance(sub, Mapping) and sub.get("required") is True
            )
        ref = schema.get("$ref")
        if isinstance(ref, str):
            target = self._lookup(schema, ref, resolver)
            if target is not None:
                self._collect_required(target[0], target[1], names, visited)
        subschemas: list[Any] = []
        for keyword in ("allOf", "anyOf", "oneOf"):
            branches = schema.get(keyword)
            if isinstance(branches, list):
                subschemas.extend(branches)
        subschemas.extend(schema.get(keyword) for keyword in ("if", "then", "else"))
        for keyword in ("dependentRequired", "dependencies", "dependentSchemas"):
            dependencies = schema.get(keyword)
            if not isinstance(dependencies, Mapping):
                continue
            for dependency in dependencies.values():
                if isinstance(dependency, list):
                    names.update(n for n in dependency if isinstance(n, str))
                else:
                    subschemas.append(dependency)
        for subschema in subschemas:
            self._collect_required(subschema, self._enter(subschema, resolver), names, visited)

    def _admits(self, kind: str, schema: Any, resolver: _Resolver, visiting: frozenset[int]) -> bool:
        """Whether ``schema`` could accept some value of JSON type ``kind``.

        Only ``type``, ``enum``/``const`` and the applicators are looked at;
        anything unknown counts as "could", which is the cautious answer here
        (it keeps the loosening rules away).  ``"integer"`` admits the kind
        ``"number"``: a non-integral number for it is a mistake layer 3
        should report, not a reason to turn the number into text.
        """
        if schema is False:
            return False
        if not isinstance(schema, Mapping):
            return True
        key = (id(schema), kind)
        cached = self._admits_cache.get(key)
        if cached is not None and cached[0] is schema:
            return cached[1]
        if id(schema) in visiting or len(visiting) >= MAX_SCHEMA_HOPS:
            return True
        visiting = visiting | {id(schema)}
        result = self._admits_here(kind, schema, resolver, visiting)
        self._admits_cache[key] = (schema, result)
        return result

    def _admits_here(
        self, kind: str, schema: Mapping[str, Any], resolver: _Resolver, visiting: frozenset[int]
    ) -> bool:
        """:meth:`_admits` for one schema node, without the cache."""
        types = _type_names(schema)
        if types and not _kind_in(kind, types):
            return False
        enum = schema.get("enum")
        if isinstance(enum, list) and not any(_kind_in(kind, [_json_type(m)]) for m in enum):
            return False
        if "const" in schema and not _kind_in(kind, [_json_type(schema["const"])]):
            return False
        ref = schema.get("$ref")
        if isinstance(ref, str):
            target = self._lookup(schema, ref, resolver)
            if target is not None and not self._admits(kind, target[0], target[1], visiting):
                return False
            if not self._ref_siblings:
                return True
        all_of = schema.get("allOf")
        if isinstance(all_of, list) and not all(
            self._admits(kind, b, self._enter(b, resolver), visiting) for b in all_of
        ):
            return False
        for keyword in ("anyOf", "oneOf"):
            branches = schema.get(keyword)
            if isinstance(branches, list) and branches and not any(
                self._admits(kind, b, self._enter(b, resolver), visiting) for b in branches
            ):
                return False
        return True

    # ------------------------------------------------------- scalar rules

    def _coerce_type(
        self,
        value: Any,
        schema: Mapping[str, Any],
        path: str,
        changes: list[CoercionChange],
        loose: bool,
    ) -> Any:
        """Apply the ``type`` keyword's conversions, if the type is wrong.

        A value whose type is among the allowed ones is never converted,
        even if it fails other keywords: ``"5"`` for ``["string", "integer"]``
        is a fine string.
        """
        types = _type_names(schema)
        if not types or "any" in types or any(self._is_type(value, t) for t in types):
            return value
        converted = self._convert(value, types, loose)
        if converted is None:
            return value
        new, rule = converted
        changes.append(CoercionChange(path, value, new, rule))
        return new

    def _convert(self, value: Any, types: list[str], loose: bool) -> tuple[Any, str] | None:
        """The first lossless conversion of ``value`` to one of ``types``.

        Preference order for text: integer, number, boolean, object, array,
        so ``"1"`` for ``["boolean", "integer"]`` becomes ``1``.  Booleans are
        never converted (not to numbers, not to text).
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
            for type_name, kind, label in (("object", dict, "object"), ("array", list, "array")):
                if type_name not in types:
                    continue
                decoded = _parse_json(value, kind)
                if decoded is not None:
                    return decoded, f"json-string->{label}"
                decoded = _parse_python(value, kind)
                if decoded is not None:
                    return decoded, f"python-literal->{label}"
            return None
        if isinstance(value, bool):
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
            if loose and "string" in types and not _kind_in("number", types):
                text = _number_text(value)
                if text is not None:
                    return text, "number->string"
        return None

    def _may_wrap(self, value: Any, schema: Mapping[str, Any]) -> bool:
        """Whether ``value`` is a candidate for ``scalar->array`` here.

        The schema must want an array and no other type that could take the
        value as it is (``4.5`` for ``["array", "integer"]`` is a wrong
        integer, not a list); null and list-like text are never wrapped.
        """
        types = _type_names(schema)
        if "array" not in types or value is None or _kind_in(_json_type(value), types):
            return False
        return not (isinstance(value, str) and _LIST_LIKE.search(value))

    def _wrap(
        self,
        value: Any,
        schema: Mapping[str, Any],
        resolver: _Resolver,
        path: str,
        depth: int,
        changes: list[CoercionChange],
    ) -> Any:
        """``value`` -> ``[value]`` if the first item schema accepts it (coerced).

        The element is coerced on its own first (``"5"`` for an array of
        integers becomes ``[5]``); if it then does not validate, or would
        itself need wrapping (a scalar for an array of arrays), nothing is
        changed.
        """
        subschema = self._item_schema(schema, 0)
        if subschema is False:
            return value
        local: list[CoercionChange] = []
        element = value
        if isinstance(subschema, Mapping):
            sub_resolver = self._enter(subschema, resolver)
            element = self._walk(
                value,
                subschema,
                sub_resolver,
                f"{path}[0]",
                depth + 1,
                frozenset(),
                local,
                True,
                ((subschema,), resolver),
            )
            if isinstance(element, list) or self._check(element, subschema, sub_resolver) is not True:
                return value
        changes.append(CoercionChange(path, value, [value], "scalar->array"))
        changes.extend(local)
        return [element]

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


def _kind_in(kind: str, types: list[str]) -> bool:
    """Whether a value of JSON type ``kind`` fits one of ``types`` by kind.

    ``"integer"`` counts for the kind ``"number"`` whatever the number's
    value, and ``"any"`` (draft 3) for everything.
    """
    return kind in types or "any" in types or (kind == "number" and "integer" in types)


def _mentions_integer(schema: Any) -> bool:
    """Whether ``"integer"`` appears as (or in) a ``type`` anywhere in the schema."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, Mapping):
            kind = node.get("type")
            if kind == "integer" or (isinstance(kind, list) and "integer" in kind):
                return True
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False


def _has_integral_float(value: Any, depth: int) -> bool:
    """Whether ``value`` holds a float equal to an integer, down to MAX_DEPTH.

    This is the test that keeps the fast path cheap: a valid value without
    such floats is returned without a second look at the schema.
    """
    if isinstance(value, float):
        return value.is_integer()
    if depth > MAX_DEPTH:
        return False
    if isinstance(value, dict):
        members: Any = value.values()
    elif isinstance(value, list):
        members = value
    else:
        return False
    for member in members:
        if type(member) in _ATOMS:  # the common case, tested first for speed
            continue
        if isinstance(member, float):
            if member.is_integer():
                return True
        elif isinstance(member, dict | list) and _has_integral_float(member, depth + 1):
            return True
    return False


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


class _NotJson(Exception):
    """A decoded Python literal holds something JSON cannot say."""


def _parse_python(text: str, kind: type[dict[Any, Any]] | type[list[Any]]) -> Any:
    """Decode Python-literal text of a dict (or a list/tuple), or None.

    ``"['I', 'V', 'vi']"``, ``"{'math': 90, 'final': True}"`` and ``"(1, 2)"``
    are what models write when they think in Python.  The text is first
    scanned token by token (:func:`_plain_literal`) and only then given to
    :func:`ast.literal_eval`, which evaluates literals and nothing else; the
    result must be JSON (:func:`_json_from_python`).
    """
    stripped = text.strip()
    if not stripped or len(stripped) > MAX_LITERAL_CHARS:
        return None
    if stripped[0] not in ("{" if kind is dict else "[("):
        return None
    if not _plain_literal(stripped):
        return None
    try:
        decoded = ast.literal_eval(stripped)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    if not isinstance(decoded, dict if kind is dict else list | tuple):
        return None
    try:
        return _json_from_python(decoded)
    except (_NotJson, RecursionError):
        return None


def _plain_literal(text: str) -> bool:
    """Whether ``text`` consists only of tokens of a Python literal of JSON values.

    Brackets, ``,`` ``:`` and signs; decimal numbers as :data:`_NUMBER`
    reads them (no ``0x10``, ``1_000``, ``1j``); ``True``/``False``/``None``;
    strings without a bytes or f prefix, without unknown escapes and never
    two in a row (``'a' 'b'`` is implicit concatenation: the model most likely
    forgot a comma, so its meaning is a guess).  Nesting deeper than
    :data:`MAX_DEPTH` is refused before the parser sees it.
    """
    depth = 0
    previous_was_string = False
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            kind, string = token.type, token.string
            if kind in _IGNORED_TOKENS:
                continue
            is_string = kind == tokenize.STRING
            if is_string:
                if previous_was_string or not _plain_string(string):
                    return False
            elif kind == tokenize.OP:
                if string in _OPENERS:
                    depth += 1
                    if depth > MAX_DEPTH:
                        return False
                elif string in _CLOSERS:
                    depth -= 1
                elif string not in _LITERAL_OPERATORS:
                    return False
            elif kind == tokenize.NUMBER:
                if _split_number(string) is None:
                    return False
            elif kind != tokenize.NAME or string not in _LITERAL_NAMES:
                return False
            previous_was_string = is_string
    except (tokenize.TokenError, SyntaxError, ValueError):
        return False
    return True


def _plain_string(token: str) -> bool:
    """A string token without a bytes/f prefix and with known escapes only."""
    quote = min(i for i in (token.find("'"), token.find('"')) if i >= 0)
    prefix = token[:quote].lower()
    if "b" in prefix or "f" in prefix:
        return False
    if "r" in prefix:
        return True
    return all(match.group(1) in _VALID_ESCAPES for match in _ESCAPE.finditer(token, quote))


def _json_from_python(value: Any) -> Any:
    """The JSON value of a decoded Python literal: tuples become lists.

    Raises :class:`_NotJson` for what JSON has no word for: sets, bytes,
    complex numbers, non-finite floats, non-string keys.
    """
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _NotJson(repr(value))
        return value
    if isinstance(value, list | tuple):
        return [_json_from_python(v) for v in value]
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise _NotJson("non-string key")
        return {k: _json_from_python(v) for k, v in value.items()}
    raise _NotJson(type(value).__name__)


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
