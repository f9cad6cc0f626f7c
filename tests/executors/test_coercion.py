"""Table-driven tests for the schema-driven parameter coercer (layer 2).

Each case states the schema, the input, the expected output and the exact
changes (path, old, new, rule).  An expected output of ``SAME`` means the
input must come back as the very same object with no changes.
"""

from __future__ import annotations

import copy
import math
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import FrozenInstanceError, dataclass, field
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from jsonschema.validators import validator_for

from executors.coercion import MAX_DEPTH, Coercer, CoercionChange, CoercionResult, coerce

SAME: Any = object()

POINT = {
    "type": "object",
    "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}},
    "required": ["lat", "lon"],
}

TREE = {
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

PLACE = {
    "$defs": {
        "point": POINT,
        "name": {"type": "string", "minLength": 1},
        "where": {"anyOf": [{"$ref": "#/$defs/point"}, {"$ref": "#/$defs/name"}]},
    },
    "type": "object",
    "properties": {
        "where": {"$ref": "#/$defs/where"},
        "stops": {"type": "array", "items": {"$ref": "#/$defs/where"}},
    },
}


@dataclass(frozen=True)
class Case:
    id: str
    schema: Any
    value: Any
    expected: Any = SAME
    changes: list[tuple[str, Any, Any, str]] = field(default_factory=list)


def num(value: Any) -> Case:
    """Shorthand: ``value`` must stay unchanged for {"type": "number"}."""
    return Case(f"number-keeps-{value!r}", {"type": "number"}, value)


def integer(value: Any) -> Case:
    return Case(f"integer-keeps-{value!r}", {"type": "integer"}, value)


CASES: list[Case] = [
    # --- text to number -------------------------------------------------
    Case(
        "number-decimal", {"type": "number"}, "35.6", 35.6, [("$", "35.6", 35.6, "string->number")]
    ),
    Case(
        "number-exponent",
        {"type": "number"},
        "1e3",
        1000.0,
        [("$", "1e3", 1000.0, "string->number")],
    ),
    Case(
        "number-trimmed-int", {"type": "number"}, " 42 ", 42, [("$", " 42 ", 42, "string->number")]
    ),
    Case(
        "number-negative", {"type": "number"}, "-0.5", -0.5, [("$", "-0.5", -0.5, "string->number")]
    ),
    Case("number-leading-dot", {"type": "number"}, ".5", 0.5, [("$", ".5", 0.5, "string->number")]),
    Case("number-plus-sign", {"type": "number"}, "+7", 7, [("$", "+7", 7, "string->number")]),
    Case(
        "number-huge-int-exact",
        {"type": "number"},
        "123456789012345678901234567890",
        123456789012345678901234567890,
        [("$", "123456789012345678901234567890", 123456789012345678901234567890, "string->number")],
    ),
    num("1,234"),
    num("1.234,5"),
    num("nan"),
    num("NaN"),
    num("inf"),
    num("-Infinity"),
    num("Infinity"),
    num("1e400"),
    num("1e-400"),
    num("0x10"),
    num("1_000"),
    num("\u0663"),
    num("12abc"),
    num(""),
    num("   "),
    num("."),
    num("1e"),
    num(True),
    num(False),
    num(None),
    # --- text to integer --------------------------------------------------
    Case("integer-plain", {"type": "integer"}, "5", 5, [("$", "5", 5, "string->integer")]),
    Case("integer-dot-zero", {"type": "integer"}, "5.0", 5, [("$", "5.0", 5, "string->integer")]),
    Case(
        "integer-exponent",
        {"type": "integer"},
        "1e3",
        1000,
        [("$", "1e3", 1000, "string->integer")],
    ),
    Case(
        "integer-frac-exponent",
        {"type": "integer"},
        "1.5e1",
        15,
        [("$", "1.5e1", 15, "string->integer")],
    ),
    Case(
        "integer-trimmed",
        {"type": "integer"},
        "\t-12 ",
        -12,
        [("$", "\t-12 ", -12, "string->integer")],
    ),
    Case(
        "integer-huge",
        {"type": "integer"},
        "123456789012345678901234567890",
        123456789012345678901234567890,
        [
            (
                "$",
                "123456789012345678901234567890",
                123456789012345678901234567890,
                "string->integer",
            )
        ],
    ),
    Case(
        "integer-big-exponent-exact",
        {"type": "integer"},
        "2e30",
        2 * 10**30,
        [("$", "2e30", 2 * 10**30, "string->integer")],
    ),
    integer("5.5"),
    integer(5.5),
    integer("1e-1"),
    integer("1e999999"),
    integer("five"),
    integer(True),
    integer(False),
    integer("1,234"),
    # 5.0 *is* an integer in Draft 2020-12, so a valid value stays as it is ...
    Case("integer-float-valid-2020", {"type": "integer"}, 5.0),
    # ... but not in draft 4, where it is converted without loss.
    Case(
        "integer-float-draft4",
        {"$schema": "http://json-schema.org/draft-04/schema#", "type": "integer"},
        5.0,
        5,
        [("$", 5.0, 5, "number->integer")],
    ),
    Case(
        "integer-nonintegral-float-draft4",
        {"$schema": "http://json-schema.org/draft-04/schema#", "type": "integer"},
        5.5,
    ),
    # --- booleans -------------------------------------------------------
    *[
        Case(
            f"boolean-{text!r}",
            {"type": "boolean"},
            text,
            expected,
            [("$", text, expected, "string->boolean")],
        )
        for text, expected in [
            ("true", True),
            ("FALSE", False),
            (" Yes ", True),
            ("no", False),
            ("1", True),
            ("0", False),
            ("True\n", True),
        ]
    ],
    Case("boolean-keeps-maybe", {"type": "boolean"}, "maybe"),
    Case("boolean-keeps-on", {"type": "boolean"}, "on"),
    Case("boolean-keeps-number", {"type": "boolean"}, 1),
    # --- to string --------------------------------------------------------
    Case(
        "string-from-true",
        {"type": "string"},
        True,
        "true",
        [("$", True, "true", "boolean->string")],
    ),
    Case(
        "string-from-false",
        {"type": "string"},
        False,
        "false",
        [("$", False, "false", "boolean->string")],
    ),
    Case("string-from-int", {"type": "string"}, 5, "5", [("$", 5, "5", "number->string")]),
    Case(
        "string-from-float", {"type": "string"}, 2.5, "2.5", [("$", 2.5, "2.5", "number->string")]
    ),
    Case("string-keeps-null", {"type": "string"}, None),
    Case("string-keeps-object", {"type": "string"}, {"a": 1}),
    # --- type lists and nullable -------------------------------------------
    Case(
        "nullable-number",
        {"type": ["number", "null"]},
        "3.5",
        3.5,
        [("$", "3.5", 3.5, "string->number")],
    ),
    Case("nullable-number-null", {"type": ["number", "null"]}, None),
    Case("nullable-number-keeps-null-text", {"type": ["number", "null"]}, "null"),
    Case("type-list-allows-string", {"type": ["string", "integer"]}, "5"),
    Case(
        "type-list-prefers-integer",
        {"type": ["boolean", "integer"]},
        "1",
        1,
        [("$", "1", 1, "string->integer")],
    ),
    Case(
        "type-list-boolean",
        {"type": ["boolean", "integer"]},
        "yes",
        True,
        [("$", "yes", True, "string->boolean")],
    ),
    Case(
        "type-list-integer-then-number",
        {"type": ["integer", "number"]},
        "5.5",
        5.5,
        [("$", "5.5", 5.5, "string->number")],
    ),
    # --- enum and const -------------------------------------------------
    Case(
        "enum-case",
        {"type": "string", "enum": ["Celsius", "Fahrenheit"]},
        "celsius",
        "Celsius",
        [("$", "celsius", "Celsius", "enum-case")],
    ),
    Case(
        "enum-case-trimmed",
        {"enum": ["Celsius", "Fahrenheit"]},
        "  FAHRENHEIT ",
        "Fahrenheit",
        [("$", "  FAHRENHEIT ", "Fahrenheit", "enum-case")],
    ),
    Case(
        "enum-trim-exact-wins", {"enum": ["a", "A"]}, " a ", "a", [("$", " a ", "a", "enum-case")]
    ),
    Case("enum-ambiguous-case", {"enum": ["Ab", "aB"]}, "ab"),
    Case("enum-no-match", {"enum": ["Celsius", "Fahrenheit"]}, "kelvin"),
    Case("enum-numeric-text", {"enum": [1, 2, 3]}, "2", 2, [("$", "2", 2, "enum-string->number")]),
    Case(
        "enum-numeric-text-float",
        {"enum": [1.5, 2.5]},
        " 1.50",
        1.5,
        [("$", " 1.50", 1.5, "enum-string->number")],
    ),
    Case("enum-numeric-text-no-match", {"enum": [1, 2, 3]}, "4"),
    Case(
        "enum-boolean-text",
        {"enum": [True, "auto"]},
        "YES",
        True,
        [("$", "YES", True, "enum-string->boolean")],
    ),
    Case(
        "enum-number-to-text", {"enum": ["1", "2"]}, 1, "1", [("$", 1, "1", "enum-number->string")]
    ),
    Case("enum-bool-is-not-number", {"enum": [1, 0]}, True),
    Case(
        "enum-typed-integer",
        {"type": "integer", "enum": [10, 20]},
        " 20 ",
        20,
        [("$", " 20 ", 20, "string->integer")],
    ),
    Case(
        "enum-type-filters-candidates",
        {"type": "string", "enum": ["1", 1]},
        1,
        "1",
        [("$", 1, "1", "number->string")],
    ),
    Case(
        "const-case",
        {"const": "Metric"},
        "metric",
        "Metric",
        [("$", "metric", "Metric", "const-case")],
    ),
    Case("const-number", {"const": 3}, "3", 3, [("$", "3", 3, "const-string->number")]),
    Case("const-no-match", {"const": "Metric"}, "imperial"),
    # --- JSON-encoded containers ------------------------------------------
    Case(
        "json-array",
        {"type": "array", "items": {"type": "string"}},
        '["a","b"]',
        ["a", "b"],
        [("$", '["a","b"]', ["a", "b"], "json-string->array")],
    ),
    Case(
        "json-array-contents-coerced",
        {"type": "array", "items": {"type": "integer"}},
        ' ["1", 2, "3.0"] ',
        [1, 2, 3],
        [
            ("$", ' ["1", 2, "3.0"] ', ["1", 2, "3.0"], "json-string->array"),
            ("$[0]", "1", 1, "string->integer"),
            ("$[2]", "3.0", 3, "string->integer"),
        ],
    ),
    Case(
        "json-object-contents-coerced",
        POINT,
        '{"lat": "35.6897", "lon": 139.69}',
        {"lat": 35.6897, "lon": 139.69},
        [
            (
                "$",
                '{"lat": "35.6897", "lon": 139.69}',
                {"lat": "35.6897", "lon": 139.69},
                "json-string->object",
            ),
            ("$.lat", "35.6897", 35.6897, "string->number"),
        ],
    ),
    Case(
        "json-object-in-property",
        {"type": "object", "properties": {"p": POINT}},
        {"p": '{"lat": 1, "lon": 2}'},
        {"p": {"lat": 1, "lon": 2}},
        [("$.p", '{"lat": 1, "lon": 2}', {"lat": 1, "lon": 2}, "json-string->object")],
    ),
    Case("json-nan-refused", {"type": "array"}, "[1, NaN]"),
    Case("json-infinity-refused", {"type": "array"}, "[Infinity]"),
    Case("json-overflow-refused", {"type": "array"}, "[1e999]"),
    Case("json-broken", {"type": "array"}, "[1, 2"),
    Case("json-wrong-container", {"type": "array"}, '{"a": 1}'),
    Case("json-not-json", {"type": "object"}, "a=1"),
    Case("json-string-allowed", {"type": ["array", "string"]}, "[1]"),
    # --- objects ----------------------------------------------------------
    Case(
        "object-nested",
        {"type": "object", "properties": {"items": {"type": "array", "items": POINT}}},
        {"items": [{"lat": "1.5", "lon": 2}, {"lat": 3, "lon": "-4"}]},
        {"items": [{"lat": 1.5, "lon": 2}, {"lat": 3, "lon": -4}]},
        [
            ("$.items[0].lat", "1.5", 1.5, "string->number"),
            ("$.items[1].lon", "-4", -4, "string->number"),
        ],
    ),
    Case(
        "object-missing-fields-not-created",
        {
            "type": "object",
            "properties": {
                "lat": {"type": "number", "default": 0},
                "unit": {"type": "string", "default": "metric"},
            },
            "required": ["lat", "unit"],
        },
        {"lat": "1"},
        {"lat": 1},
        [("$.lat", "1", 1, "string->number")],
    ),
    Case(
        "object-additional-properties-schema",
        {
            "type": "object",
            "properties": {"a": {"type": "string"}},
            "additionalProperties": {"type": "integer"},
        },
        {"a": 1, "b": "2", "c": "x"},
        {"a": "1", "b": 2, "c": "x"},
        [("$.a", 1, "1", "number->string"), ("$.b", "2", 2, "string->integer")],
    ),
    Case(
        "object-additional-properties-false",
        {"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": False},
        {"a": "1", "b": "2"},
        {"a": 1, "b": "2"},
        [("$.a", "1", 1, "string->integer")],
    ),
    Case(
        "object-pattern-properties",
        {
            "type": "object",
            "properties": {"n_fixed": {"type": "string"}},
            "patternProperties": {"^n_": {"type": "number"}, "^b_": {"type": "boolean"}},
            "additionalProperties": {"type": "string"},
        },
        {"n_1": "1.5", "b_x": "no", "other": 3},
        {"n_1": 1.5, "b_x": False, "other": "3"},
        [
            ("$.n_1", "1.5", 1.5, "string->number"),
            ("$.b_x", "no", False, "string->boolean"),
            ("$.other", 3, "3", "number->string"),
        ],
    ),
    Case(
        "object-odd-key-path",
        {"type": "object", "additionalProperties": {"type": "integer"}},
        {"a key": "1", "2nd": "2", "ok_1": "3"},
        {"a key": 1, "2nd": 2, "ok_1": 3},
        [
            ('$["a key"]', "1", 1, "string->integer"),
            ('$["2nd"]', "2", 2, "string->integer"),
            ("$.ok_1", "3", 3, "string->integer"),
        ],
    ),
    # --- arrays -----------------------------------------------------------
    Case(
        "array-items",
        {"type": "array", "items": {"type": "number"}},
        ["1", 2, "x", "3e1"],
        [1, 2, "x", 30.0],
        [("$[0]", "1", 1, "string->number"), ("$[3]", "3e1", 30.0, "string->number")],
    ),
    Case(
        "array-prefix-items",
        {
            "type": "array",
            "prefixItems": [{"type": "number"}, {"type": "boolean"}],
            "items": {"type": "string"},
        },
        ["1.5", "true", 3, False],
        [1.5, True, "3", "false"],
        [
            ("$[0]", "1.5", 1.5, "string->number"),
            ("$[1]", "true", True, "string->boolean"),
            ("$[2]", 3, "3", "number->string"),
            ("$[3]", False, "false", "boolean->string"),
        ],
    ),
    Case(
        "array-draft7-tuple-items",
        {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "array",
            "items": [{"type": "integer"}],
            "additionalItems": {"type": "boolean"},
        },
        ["1", "no"],
        [1, False],
        [("$[0]", "1", 1, "string->integer"), ("$[1]", "no", False, "string->boolean")],
    ),
    # --- $ref / $defs ---------------------------------------------------
    Case(
        "ref-defs",
        {
            "$defs": {"point": POINT},
            "type": "object",
            "properties": {"p": {"$ref": "#/$defs/point"}},
        },
        {"p": {"lat": "1", "lon": "2.5"}},
        {"p": {"lat": 1, "lon": 2.5}},
        [("$.p.lat", "1", 1, "string->number"), ("$.p.lon", "2.5", 2.5, "string->number")],
    ),
    Case(
        "ref-draft7-definitions-ignores-siblings",
        {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "definitions": {"n": {"type": "integer"}},
            "properties": {"x": {"$ref": "#/definitions/n", "type": "string"}},
        },
        {"x": "4"},
        {"x": 4},
        [("$.x", "4", 4, "string->integer")],
    ),
    Case(
        "ref-by-id",
        {
            "$id": "https://example.com/schemas/trip",
            "$defs": {"coords": {"$id": "coords", **POINT}},
            "type": "array",
            "items": {"$ref": "coords"},
        },
        [{"lat": "1", "lon": "2"}],
        [{"lat": 1, "lon": 2}],
        [("$[0].lat", "1", 1, "string->number"), ("$[0].lon", "2", 2, "string->number")],
    ),
    Case(
        "ref-anyof-point",
        PLACE,
        {"where": {"lat": "35.6897", "lon": "139.6922"}},
        {"where": {"lat": 35.6897, "lon": 139.6922}},
        [
            ("$.where.lat", "35.6897", 35.6897, "string->number"),
            ("$.where.lon", "139.6922", 139.6922, "string->number"),
        ],
    ),
    # A JSON string is also a valid "name": anyOf leaves an already valid value alone.
    Case("ref-anyof-valid-string-kept", PLACE, {"stops": ["Tokyo", '{"lat": "1", "lon": 2}']}),
    Case(
        "ref-anyof-array-elements",
        PLACE,
        {"stops": ["Tokyo", {"lat": "1", "lon": 2}]},
        {"stops": ["Tokyo", {"lat": 1, "lon": 2}]},
        [("$.stops[1].lat", "1", 1, "string->number")],
    ),
    Case("ref-anyof-no-branch-valid", PLACE, {"where": {"lat": "1", "lon": "east"}}),
    Case("ref-unresolvable-left-alone", {"$ref": "https://example.invalid/missing.json"}, "1"),
    # --- anyOf / oneOf / allOf ------------------------------------------------
    Case(
        "anyof-first-branch-that-validates",
        {"anyOf": [{"type": "integer"}, {"type": "boolean"}]},
        "true",
        True,
        [("$", "true", True, "string->boolean")],
    ),
    Case(
        "anyof-first-branch-wins",
        {"anyOf": [{"type": "integer"}, {"type": "number"}]},
        "5",
        5,
        [("$", "5", 5, "string->integer")],
    ),
    Case("anyof-valid-later-branch-kept", {"anyOf": [{"type": "number"}, {"type": "string"}]}, "5"),
    Case(
        "anyof-nullable",
        {"anyOf": [{"type": "number"}, {"type": "null"}]},
        "2.5",
        2.5,
        [("$", "2.5", 2.5, "string->number")],
    ),
    Case(
        "anyof-branch-must-validate",
        {"anyOf": [{"type": "integer", "minimum": 10}, {"type": "boolean"}]},
        "5",
    ),
    Case(
        "oneof-first-validating-branch",
        {"oneOf": [{"type": "integer", "minimum": 10}, {"type": "integer", "maximum": 5}]},
        "3",
        3,
        [("$", "3", 3, "string->integer")],
    ),
    Case(
        "oneof-skips-ambiguous-candidate",
        {"oneOf": [{"type": "number"}, {"type": "integer"}, {"type": "boolean"}]},
        "1",
        # 1 would satisfy both "number" and "integer", i.e. still fail the oneOf.
        True,
        [("$", "1", True, "string->boolean")],
    ),
    Case(
        "oneof-multiple-matches-is-not-valid",
        {"oneOf": [{"type": "integer"}, {"type": "string"}, {"type": "string", "maxLength": 3}]},
        "12",
        12,
        [("$", "12", 12, "string->integer")],
    ),
    Case(
        "oneof-objects",
        {
            "oneOf": [
                {
                    "type": "object",
                    "properties": {"kind": {"const": "circle"}, "r": {"type": "number"}},
                    "required": ["kind", "r"],
                },
                {
                    "type": "object",
                    "properties": {"kind": {"const": "square"}, "side": {"type": "number"}},
                    "required": ["kind", "side"],
                },
            ]
        },
        {"kind": "Square", "side": "2"},
        {"kind": "square", "side": 2},
        [("$.kind", "Square", "square", "const-case"), ("$.side", "2", 2, "string->number")],
    ),
    Case(
        "allof-each-branch",
        {
            "allOf": [
                {"type": "object", "properties": {"a": {"type": "integer"}}},
                {"properties": {"b": {"type": "boolean"}}},
            ]
        },
        {"a": "1", "b": "false", "c": "x"},
        {"a": 1, "b": False, "c": "x"},
        [("$.a", "1", 1, "string->integer"), ("$.b", "false", False, "string->boolean")],
    ),
    Case(
        "allof-contradiction-no-round-trip",
        {"allOf": [{"type": "number"}, {"type": "string"}]},
        "5",
    ),
    # --- recursion ------------------------------------------------------
    Case(
        "recursive-tree",
        TREE,
        {"value": "1", "children": [{"value": 2}, {"value": "3", "children": [{"value": "4.0"}]}]},
        {"value": 1, "children": [{"value": 2}, {"value": 3, "children": [{"value": 4}]}]},
        [
            ("$.value", "1", 1, "string->integer"),
            ("$.children[1].value", "3", 3, "string->integer"),
            ("$.children[1].children[0].value", "4.0", 4, "string->integer"),
        ],
    ),
    Case(
        "ref-cycle-without-value-depth",
        {
            "$defs": {"a": {"allOf": [{"$ref": "#/$defs/a"}], "type": "integer"}},
            "$ref": "#/$defs/a",
        },
        "5",
        5,
        [("$", "5", 5, "string->integer")],
    ),
    # Terminates; jsonschema itself cannot decide the first branch (it recurses
    # forever), and an undecidable branch might accept the value, so anyOf
    # leaves it alone.
    Case("ref-to-root-cycle", {"anyOf": [{"$ref": "#"}, {"type": "number"}]}, "5"),
    # --- valid values and no-ops -------------------------------------------
    Case("valid-object", POINT, {"lat": 1.5, "lon": 2}),
    Case("empty-schema", {}, "anything"),
    Case("true-schema", True, "1"),
    Case("false-schema", False, "1"),
    Case("no-type-keyword", {"minimum": 3}, "5"),
    Case("invalid-but-uncoercible-object", POINT, {"lat": "north", "lon": "east"}),
]


def _assert_case(case: Case) -> None:
    before = copy.deepcopy(case.value)
    result = coerce(case.value, case.schema)
    assert case.value == before, "input was mutated"
    got = [(c.path, c.old, c.new, c.rule) for c in result.changes]
    if case.expected is SAME:
        assert result.value is case.value
        assert got == []
        return
    assert _strict(result.value) == _strict(case.expected)
    assert got == case.changes
    for change in result.changes:
        assert _strict(change.old) != _strict(change.new), "a change must change something"


def _strict(value: Any) -> Any:
    """A representation in which True != 1 and 1 != 1.0, for exact comparison."""
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_strict(v) for v in value]
    return (type(value).__name__, value)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id)
def test_table(case: Case) -> None:
    _assert_case(case)


def test_case_ids_are_unique() -> None:
    ids = [case.id for case in CASES]
    assert len(ids) == len(set(ids))


# --------------------------------------------------------------- API shape


def test_valid_value_returns_same_object_and_is_valid() -> None:
    coercer = Coercer(PLACE)
    value = {"where": "Tokyo", "stops": [{"lat": 1, "lon": 2}]}
    result = coercer.coerce(value)
    assert result.value is value
    assert result.changes == []
    assert not result.changed


def test_unchanged_subobjects_are_shared_not_copied() -> None:
    untouched = {"lat": 1, "lon": 2}
    value: dict[str, Any] = {"stops": [untouched, {"lat": "3", "lon": 4}]}
    result = coerce(value, PLACE)
    assert result.changed
    assert result.value["stops"][0] is untouched
    assert value["stops"][1]["lat"] == "3"


def test_change_and_result_are_frozen() -> None:
    result = coerce("1", {"type": "integer"})
    assert isinstance(result, CoercionResult)
    change = result.changes[0]
    assert change == CoercionChange(path="$", old="1", new=1, rule="string->integer")
    with pytest.raises(FrozenInstanceError):
        change.path = "$.x"  # type: ignore[misc]


# Cases whose expected output is deliberately still invalid: only part of the
# value could be fixed, the rest is left for validation to report.
PARTLY_INVALID = {
    "array-items",
    "object-additional-properties-false",
    "object-additional-properties-schema",
    "object-missing-fields-not-created",
}


def test_coerced_values_validate_unless_partly_uncoercible() -> None:
    for case in CASES:
        if case.expected is SAME or case.id == "ref-cycle-without-value-depth":
            continue  # (jsonschema cannot validate the cyclic schema at all)
        validator = validator_for(case.schema, default=Draft202012Validator)(case.schema)
        valid = validator.is_valid(case.expected)
        assert valid != (case.id in PARTLY_INVALID), case.id


def test_format_checker_decides_what_is_already_valid() -> None:
    schema = {"anyOf": [{"type": "string", "format": "date"}, {"type": "integer"}]}
    assert coerce("5", schema).value == "5"  # formats not asserted: a fine string
    strict = Coercer(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)
    result = strict.coerce("5")
    assert result.value == 5
    assert [(c.path, c.rule) for c in result.changes] == [("$", "string->integer")]
    assert strict.coerce("2024-05-01").changes == []


def test_invalid_schema_fails_at_preparation() -> None:
    with pytest.raises(SchemaError):
        Coercer({"type": "no-such-type"})


def test_floats_produced_are_finite() -> None:
    for text in ["1e308", "-1e308", "4.9e-324", "0.0", "-0"]:
        value = coerce(text, {"type": "number"}).value
        assert isinstance(value, int | float) and math.isfinite(value)


def test_idempotent_on_table() -> None:
    for case in CASES:
        coercer = Coercer(case.schema)
        first = coercer.coerce(case.value)
        second = coercer.coerce(first.value)
        assert second.value is first.value, case.id
        assert second.changes == [], case.id


def test_idempotent_with_contradictory_schema() -> None:
    # Rules from the two branches undo each other on the second pass; the
    # round trip must not be reported.
    coercer = Coercer(
        {"type": "array", "items": {"allOf": [{"enum": [True, "auto"]}, {"type": "string"}]}}
    )
    first = coercer.coerce([True])
    assert first.value == ["true"]
    second = coercer.coerce(first.value)
    assert second.value is first.value
    assert second.changes == []


# ---------------------------------------------------------- depth and reuse


def _nested_lists(depth: int, leaf: Any) -> Any:
    value: Any = leaf
    for _ in range(depth):
        value = [value]
    return value


def test_deep_value_does_not_raise_and_stops_at_max_depth() -> None:
    schema = {
        "$defs": {
            "n": {"anyOf": [{"type": "integer"}, {"type": "array", "items": {"$ref": "#/$defs/n"}}]}
        },
        "$ref": "#/$defs/n",
    }
    deep = _nested_lists(5000, "1")
    result = coerce(deep, schema)
    # The leaf lies far below MAX_DEPTH: nothing changed, same object back.
    assert result.value is deep
    assert result.changes == []

    shallow = _nested_lists(3, "7")
    result = coerce(shallow, schema)
    assert result.value == [[[7]]]
    assert [(c.path, c.rule) for c in result.changes] == [("$[0][0][0]", "string->integer")]


def test_deep_value_is_coerced_above_max_depth() -> None:
    schema = {
        "$defs": {
            "n": {
                "type": "object",
                "properties": {"v": {"type": "integer"}, "next": {"$ref": "#/$defs/n"}},
            }
        },
        "$ref": "#/$defs/n",
    }
    value: Any = {"v": "0"}
    for level in range(1, 400):
        value = {"v": str(level), "next": value}
    result = coerce(value, schema)
    assert result.changed
    paths = {c.path for c in result.changes}
    assert "$.v" in paths
    assert "$" + ".next" * 10 + ".v" in paths
    # Nothing at or below MAX_DEPTH + 1 containers was touched.
    assert all(c.path.count(".next") <= MAX_DEPTH for c in result.changes)
    node = result.value
    for _ in range(MAX_DEPTH + 1):
        node = node["next"]
    assert isinstance(node["v"], str)


def test_deeply_nested_json_string_is_left_alone() -> None:
    text = "[" * 100_000 + "]" * 100_000
    result = coerce(text, {"type": "array"})
    assert result.value is text


def test_works_with_little_stack_left() -> None:
    def recurse(n: int) -> CoercionResult:
        if n == 0:
            return coerce({"value": "1", "children": [{"value": "2"}]}, TREE)
        return recurse(n - 1)

    limit = sys.getrecursionlimit()
    result = recurse(max(0, limit - 150))
    # Either coerced or (if the stack ran out) unchanged, but never an exception.
    assert result.value in (
        {"value": 1, "children": [{"value": 2}]},
        {"value": "1", "children": [{"value": "2"}]},
    )


def test_coercer_is_reusable_and_thread_safe() -> None:
    coercer = Coercer(PLACE)
    barrier = threading.Barrier(8)

    def work(i: int) -> tuple[Any, list[tuple[str, str]]]:
        barrier.wait()
        result = coercer.coerce(
            {"where": {"lat": str(i), "lon": "2"}, "stops": ["x", {"lat": 1, "lon": str(i)}]}
        )
        return result.value, [(c.path, c.rule) for c in result.changes]

    with ThreadPoolExecutor(max_workers=8) as pool:
        outcomes = list(pool.map(work, range(8)))
    for i, (value, changes) in enumerate(outcomes):
        assert value == {"where": {"lat": i, "lon": 2}, "stops": ["x", {"lat": 1, "lon": i}]}
        assert changes == [
            ("$.where.lat", "string->number"),
            ("$.where.lon", "string->number"),
            ("$.stops[1].lon", "string->number"),
        ]
