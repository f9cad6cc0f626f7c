"""Property tests for the parameter coercer.

Schemas are drawn from a small grammar of the shapes tool schemas use
(scalars, nullable types, enums, objects, arrays, prefixItems, anyOf, oneOf,
allOf, $ref into $defs, a recursive tree); values are drawn to fit a schema
and then "LLM-ified" (numbers and booleans written as text, integers as
floats, enum members in other case, containers JSON-encoded or written as
Python literals, one-element arrays sent as their element), or drawn as
arbitrary JSON.
"""

from __future__ import annotations

import ast
import json
import math
from decimal import Decimal
from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from executors.coercion import REMOVED, Coercer, CoercionChange, CoercionResult

SETTINGS = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

KEYS = ["a", "b", "lat", "unit"]

LEAVES: list[dict[str, Any]] = [
    {"type": "integer"},
    {"type": "number"},
    {"type": "string"},
    {"type": "boolean"},
    {"type": "null"},
    {"type": ["number", "null"]},
    {"type": ["integer", "string"]},
    {"type": ["boolean", "integer"]},
    {"type": "integer", "minimum": 0},
    {"enum": ["Red", "Green", "blue"]},
    {"type": "string", "enum": ["Celsius", "Fahrenheit"]},
    {"enum": [1, 2, 3]},
    {"enum": [True, "auto"]},
    {"const": "Metric"},
    {},
]

TREE: dict[str, Any] = {
    "$defs": {
        "node": {
            "type": "object",
            "properties": {
                "value": {"type": "integer"},
                "children": {"type": "array", "items": {"$ref": "#/$defs/node"}},
            },
            "required": ["value"],
        }
    },
    "$ref": "#/$defs/node",
}


def _containers(
    children: st.SearchStrategy[Any], *, with_one_of: bool = True
) -> st.SearchStrategy[Any]:
    objects = st.builds(
        lambda props, required, extra: {
            "type": "object",
            "properties": props,
            "required": sorted(set(required) & set(props)),
            **({} if extra is None else {"additionalProperties": extra}),
        },
        st.dictionaries(st.sampled_from(KEYS), children, max_size=3),
        st.lists(st.sampled_from(KEYS), max_size=2),
        st.none() | st.just(False) | children,
    )
    arrays = children.map(lambda s: {"type": "array", "items": s})
    tuples = st.builds(
        lambda prefix, rest: {"type": "array", "prefixItems": prefix, "items": rest},
        st.lists(children, min_size=1, max_size=3),
        children,
    )
    any_of = st.lists(children, min_size=1, max_size=3).map(lambda b: {"anyOf": b})
    one_of = st.lists(children, min_size=1, max_size=3).map(lambda b: {"oneOf": b})
    all_of = st.lists(children, min_size=1, max_size=2).map(lambda b: {"allOf": b})
    nullable = children.map(lambda s: {"anyOf": [s, {"type": "null"}]})
    shapes = [objects, arrays, tuples, any_of, all_of, nullable]
    return st.one_of([*shapes, one_of] if with_one_of else shapes)


BODIES = st.recursive(st.sampled_from(LEAVES), _containers, max_leaves=6)


def _with_defs(body: Any) -> dict[str, Any]:
    """Put the schema behind a $ref into $defs, as generated tool schemas do."""
    return {"$defs": {"body": body}, "$ref": "#/$defs/body"}


SCHEMAS = st.one_of(
    BODIES,
    BODIES.map(_with_defs),
    st.just(TREE),
)

# For "garbled valid values come back valid": oneOf is left out because
# garbling can make a value ambiguous in ways no coercion can undo (5 valid
# only for {"type": ["integer", "string"]} becomes "5", which also satisfies a
# sibling {"type": "string"} branch).
_UNAMBIGUOUS_BODIES = st.recursive(
    st.sampled_from(LEAVES),
    lambda children: _containers(children, with_one_of=False),
    max_leaves=6,
)
UNAMBIGUOUS_SCHEMAS = st.one_of(
    _UNAMBIGUOUS_BODIES,
    _UNAMBIGUOUS_BODIES.map(_with_defs),
    st.just(TREE),
)

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**20), 10**20)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
    | st.sampled_from(["1", " 2.5 ", "true", "NO", "celsius", "[1]", '{"a": "1"}', "nan"]),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.sampled_from(KEYS), children, max_size=3)
    ),
    max_leaves=8,
)


def _resolve(schema: Any, root: Any) -> Any:
    while isinstance(schema, dict) and "$ref" in schema:
        schema = root["$defs"][schema["$ref"].rsplit("/", 1)[1]]
    return schema


def _value_for(schema: Any, root: Any, depth: int = 0) -> st.SearchStrategy[Any]:
    """Values aimed at the schema (not always valid; callers filter)."""
    schema = _resolve(schema, root)
    if not isinstance(schema, dict) or depth > 4:
        return JSON
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "const" in schema:
        return st.just(schema["const"])
    for keyword in ("anyOf", "oneOf", "allOf"):
        if keyword in schema:
            return st.one_of([_value_for(b, root, depth + 1) for b in schema[keyword]])
    kind = schema.get("type")
    if isinstance(kind, list):
        return st.one_of([_value_for({**schema, "type": k}, root, depth) for k in kind])
    if kind == "integer":
        integers = st.integers(schema.get("minimum", -(10**20)), 10**20)
        # valid in 2020-12 as they are; coercion makes them ints
        return integers | integers.filter(lambda i: abs(i) <= 2**53).map(float)
    if kind == "number":
        return st.integers(-1000, 1000) | st.floats(allow_nan=False, allow_infinity=False)
    if kind == "string":
        return st.text(max_size=8)
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "object":
        props = schema.get("properties", {})
        required = [k for k in schema.get("required", []) if k in props]
        optional = [k for k in props if k not in required]
        return st.fixed_dictionaries(
            {k: _value_for(props[k], root, depth + 1) for k in required},
            optional={k: _value_for(props[k], root, depth + 1) for k in optional},
        )
    if kind == "array":
        prefix = schema.get("prefixItems", [])
        items = schema.get("items", {})
        return st.builds(
            lambda head, tail: head + tail,
            st.tuples(*[_value_for(s, root, depth + 1) for s in prefix]).map(list),
            st.lists(_value_for(items, root, depth + 1), max_size=2 if depth < 3 else 0),
        )
    return JSON


def _llmify(value: Any) -> st.SearchStrategy[Any]:
    """Ways an LLM garbles a correct value while keeping its meaning."""
    if isinstance(value, bool):
        return st.sampled_from([value, "true" if value else "false", "TRUE" if value else " No "])
    if isinstance(value, int | float):
        text = repr(value) if isinstance(value, float) else str(value)
        forms = [value, text, f" {text} "]
        if isinstance(value, int) and abs(value) <= 2**53:
            forms.append(float(value))
        return st.sampled_from(forms)
    if isinstance(value, str):
        return st.sampled_from([value, value.upper(), value.lower(), f" {value}"])
    if isinstance(value, list):
        elements = st.tuples(*[_llmify(v) for v in value]).map(list)
        garbled = elements | elements.map(json.dumps) | _python_text(value)
        if len(value) == 1 and _wrappable(value[0]):
            garbled |= st.just(value[0])  # one item sent without its array
        return garbled
    if isinstance(value, dict):
        members = st.fixed_dictionaries({k: _llmify(v) for k, v in value.items()})
        return members | members.map(json.dumps) | _python_text(value)
    return st.just(value)


def _python_text(value: list[Any] | dict[str, Any]) -> st.SearchStrategy[str]:
    """The container as Python writes it: repr, or a tuple for an array."""
    forms = [repr(value)]
    if isinstance(value, list):
        forms.append(repr(tuple(value)))
    return st.sampled_from(forms)


def _wrappable(element: Any) -> bool:
    """Elements whose missing array coercion can restore (see the module's scalar->array)."""
    if element is None or isinstance(element, list):
        return False
    if isinstance(element, str):
        return not any(c in element for c in ",;\n") and not element.lstrip().startswith(("[", "(", "{"))
    return True


def _valid(schema: Any, value: Any) -> bool:
    return Draft202012Validator(schema).is_valid(value)


@st.composite
def schema_and_valid_value(
    draw: st.DrawFn, schemas: st.SearchStrategy[Any] = SCHEMAS
) -> tuple[Any, Any]:
    schema = draw(schemas)
    value = draw(_value_for(schema, schema))
    assume(_valid(schema, value))
    return schema, value


@st.composite
def schema_and_any_value(draw: st.DrawFn) -> tuple[Any, Any]:
    schema = draw(SCHEMAS)
    aimed = draw(_value_for(schema, schema))
    value = draw(st.one_of(_llmify(aimed), JSON))
    return schema, value


@SETTINGS
@given(schema_and_any_value())
def test_idempotent(case: tuple[Any, Any]) -> None:
    schema, value = case
    coercer = Coercer(schema)
    first = coercer.coerce(value)
    second = coercer.coerce(first.value)
    assert second.changes == []
    assert second.value is first.value


def _has_integral_float(value: Any) -> bool:
    if isinstance(value, float):
        return value.is_integer()
    if isinstance(value, dict):
        return any(_has_integral_float(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_integral_float(v) for v in value)
    return False


def _assert_unchanged_but_integral_floats(value: Any, result: CoercionResult) -> None:
    """A valid value comes back as itself, or JSON-equal with only 4.0 -> 4 changes."""
    if not _has_integral_float(value):
        assert result.value is value
        assert result.changes == []
        return
    assert all(c.rule == "number->integer" for c in result.changes), result.changes
    assert result.value == value  # same JSON numbers (4 == 4.0)
    assert (result.value is value) == (not result.changes)


@SETTINGS
@given(schema_and_valid_value())
def test_valid_value_is_returned_unchanged(case: tuple[Any, Any]) -> None:
    """...except integer-valued floats at integer places, which become ints."""
    schema, value = case
    snapshot = json.dumps(value, sort_keys=True)
    result = Coercer(schema).coerce(value)
    _assert_unchanged_but_integral_floats(value, result)
    assert result.known_valid
    assert _valid(schema, result.value)
    assert json.dumps(value, sort_keys=True) == snapshot


@SETTINGS
@given(schema_and_any_value())
def test_input_never_mutated_and_changes_consistent(case: tuple[Any, Any]) -> None:
    schema, value = case
    snapshot = json.dumps(value, sort_keys=True)
    result = Coercer(schema).coerce(value)
    assert json.dumps(value, sort_keys=True) == snapshot
    assert (result.value is value) == (not result.changes)
    if _valid(schema, value):
        _assert_unchanged_but_integral_floats(value, result)


@SETTINGS
@given(schema_and_valid_value(UNAMBIGUOUS_SCHEMAS), st.data())
def test_garbled_valid_value_coerces_to_valid(case: tuple[Any, Any], data: st.DataObject) -> None:
    """A valid value garbled the way LLMs do comes back valid (maybe a different spelling)."""
    schema, value = case
    garbled = data.draw(_llmify(value))
    result = Coercer(schema).coerce(garbled)
    assert _valid(schema, result.value), (garbled, result)


# ------------------------------------------------- every change is faithful

_BOOLEAN_WORDS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}


def _strict(value: Any) -> Any:
    """A representation in which True != 1 and 1 != 1.0, tuples are lists."""
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_strict(v) for v in value]
    return (type(value).__name__, value)


def _same_number(text: str, number: Any) -> bool:
    if isinstance(number, bool) or not isinstance(number, int | float):
        return False
    if isinstance(number, float):
        return math.isfinite(number) and float(text.strip()) == number
    return Decimal(text.strip()) == number


def _faithful(change: CoercionChange) -> bool:
    """Whether a change is exactly what its rule promises (nothing lost, nothing guessed)."""
    old, new, rule = change.old, change.new, change.rule
    if rule == "string->integer":
        return type(new) is int and Decimal(old.strip()) == new
    if rule in ("string->number", "enum-string->number", "const-string->number"):
        return _same_number(old, new)
    if rule in ("string->boolean", "enum-string->boolean", "const-string->boolean"):
        return type(new) is bool and _BOOLEAN_WORDS.get(old.strip().casefold()) is new
    if rule.startswith("json-string->"):
        return _strict(json.loads(old)) == _strict(new)
    if rule.startswith("python-literal->"):
        return _strict(ast.literal_eval(old.strip())) == _strict(new)
    if rule == "number->integer":
        return type(old) is float and type(new) is int and old == new
    if rule in ("number->string", "enum-number->string", "const-number->string"):
        expected = repr(old) if isinstance(old, float) else str(old)
        return not isinstance(old, bool) and new.strip() == expected
    if rule in ("enum-boolean->string", "const-boolean->string"):
        return type(old) is bool and new.strip().casefold() == ("true" if old else "false")
    if rule == "scalar->array":
        return old is not None and not isinstance(old, list) and _strict(new) == _strict([old])
    if rule == "optional-null->removed":
        return old is None and new is REMOVED
    if rule in ("enum-case", "const-case"):
        return old.strip().casefold() == new.strip().casefold()
    return False


@SETTINGS
@given(schema_and_any_value())
def test_every_change_is_what_its_rule_says(case: tuple[Any, Any]) -> None:
    schema, value = case
    result = Coercer(schema).coerce(value)
    for change in result.changes:
        assert _faithful(change), change


# --------------------------------------------------- optional nulls dropped

OPTIONAL_NULL_OBJECTS = st.builds(
    lambda props, required: {
        "type": "object",
        "properties": props,
        "required": sorted(set(required) & set(props)),
    },
    st.dictionaries(st.sampled_from(KEYS), st.sampled_from(LEAVES), min_size=1, max_size=4),
    st.lists(st.sampled_from(KEYS), max_size=2),
)


@SETTINGS
@given(OPTIONAL_NULL_OBJECTS, st.data())
def test_null_for_optional_property_is_dropped_only_where_null_is_invalid(
    schema: dict[str, Any], data: st.DataObject
) -> None:
    value = data.draw(_value_for(schema, schema))
    assume(_valid(schema, value))
    nulled = data.draw(st.sets(st.sampled_from(sorted(schema["properties"]))))
    sent = {**value, **dict.fromkeys(nulled)}
    result = Coercer(schema).coerce(sent)
    for name in nulled:
        optional = name not in schema["required"]
        null_ok = _valid(schema["properties"][name], None)
        assert (name in result.value) == (null_ok or not optional), (name, result)
        if name in result.value:
            assert result.value[name] is None
    if all(_valid(schema["properties"][n], None) or n not in schema["required"] for n in nulled):
        assert _valid(schema, result.value)


# ---------------------------------------------------------- hostile text

PYTHONISH = st.text(alphabet="[](){},:'\"\\ -+.0123456789eEjxabTrueFalsNon_#\n\t", max_size=40)


@SETTINGS
@given(
    st.sampled_from(["[", "(", "{", " ["]).flatmap(lambda head: PYTHONISH.map(lambda tail: head + tail)),
    st.sampled_from(
        [
            {"type": "array"},
            {"type": "object"},
            {"type": "array", "items": {"type": "integer"}},
            {"type": ["array", "object", "null"]},
        ]
    ),
)
def test_container_text_never_raises_and_decodes_faithfully(text: str, schema: dict[str, Any]) -> None:
    coercer = Coercer(schema)
    result = coercer.coerce(text)
    for change in result.changes:
        assert _faithful(change), change
    assert coercer.coerce(result.value).changes == []
