"""Table-driven tests for the schema-driven parameter coercer (layer 2).

Each case states the schema, the input, the expected output and the exact
changes (path, old, new, rule).  An expected output of ``SAME`` means the
input must come back as the very same object with no changes.
"""

from __future__ import annotations

import copy
import json
import math
import pickle
import sys
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import FrozenInstanceError, dataclass, field
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from jsonschema.validators import validator_for

from executors.coercion import (
    MAX_DEPTH,
    MAX_LITERAL_CHARS,
    REMOVED,
    Coercer,
    CoercionChange,
    CoercionResult,
    coerce,
)
from orchestration.result import CoercionRecord

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
    # 5.0 *is* an integer in Draft 2020-12, but tools want an int: the one
    # change made to a valid value (same JSON number, Python int) ...
    Case(
        "integer-float-valid-2020",
        {"type": "integer"},
        5.0,
        5,
        [("$", 5.0, 5, "number->integer")],
    ),
    # ... and in draft 4, where it is not an integer, the same conversion.
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
    # A boolean for a string is a guess either way ("true"? "True"? "yes"?).
    Case("string-keeps-true", {"type": "string"}, True),
    Case("string-keeps-false", {"type": "string"}, False),
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
        ["1.5", "true", 3, 4.5],
        [1.5, True, "3", "4.5"],
        [
            ("$[0]", "1.5", 1.5, "string->number"),
            ("$[1]", "true", True, "string->boolean"),
            ("$[2]", 3, "3", "number->string"),
            ("$[3]", 4.5, "4.5", "number->string"),
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
    # --- Python-literal containers ----------------------------------------
    Case(
        "py-list-of-strings",
        {"type": "array", "items": {"type": "string"}},
        "['I', 'V', 'vi']",
        ["I", "V", "vi"],
        [("$", "['I', 'V', 'vi']", ["I", "V", "vi"], "python-literal->array")],
    ),
    Case(
        "py-dict-contents-coerced",
        {"type": "object", "additionalProperties": {"type": "integer"}},
        "{'math': 90, 'science': '85'}",
        {"math": 90, "science": 85},
        [
            (
                "$",
                "{'math': 90, 'science': '85'}",
                {"math": 90, "science": "85"},
                "python-literal->object",
            ),
            ("$.science", "85", 85, "string->integer"),
        ],
    ),
    Case(
        "py-tuple-for-array",
        {"type": "array", "items": {"type": "integer"}},
        "(1, 2)",
        [1, 2],
        [("$", "(1, 2)", [1, 2], "python-literal->array")],
    ),
    Case(
        "py-one-tuple",
        {"type": "array"},
        " ('a',) ",
        ["a"],
        [("$", " ('a',) ", ["a"], "python-literal->array")],
    ),
    Case(
        "py-constants-inside",
        {"type": "array", "items": {"type": ["boolean", "null"]}},
        "[True, None, False]",
        [True, None, False],
        [("$", "[True, None, False]", [True, None, False], "python-literal->array")],
    ),
    Case(
        "py-nested-tuples-become-arrays",
        {
            "type": "array",
            "items": {
                "type": "array",
                "prefixItems": [{"type": "integer"}, {"type": "string"}],
            },
        },
        "[(1, 'a'), (2, 'b')]",
        [[1, "a"], [2, "b"]],
        [("$", "[(1, 'a'), (2, 'b')]", [[1, "a"], [2, "b"]], "python-literal->array")],
    ),
    Case(
        "py-trailing-comma-and-comment",
        {"type": "array", "items": {"type": "string"}},
        "[\n  'a',  # first\n  \"b\",\n]",
        ["a", "b"],
        [("$", "[\n  'a',  # first\n  \"b\",\n]", ["a", "b"], "python-literal->array")],
    ),
    Case(
        "py-escapes-and-raw-strings",
        {"type": "array", "items": {"type": "string"}},
        r"['it\'s', 'a\tb', r'C:\dir', '\u00e9']",
        ["it's", "a\tb", "C:\\dir", "é"],
        [
            (
                "$",
                r"['it\'s', 'a\tb', r'C:\dir', '\u00e9']",
                ["it's", "a\tb", "C:\\dir", "é"],
                "python-literal->array",
            )
        ],
    ),
    Case(
        "py-integral-floats-then-ints",
        {"type": "array", "items": {"type": "integer"}},
        "(1.0, -2.0)",
        [1, -2],
        [
            ("$", "(1.0, -2.0)", [1.0, -2.0], "python-literal->array"),
            ("$[0]", 1.0, 1, "number->integer"),
            ("$[1]", -2.0, -2, "number->integer"),
        ],
    ),
    Case(
        "py-in-property",
        {"type": "object", "properties": {"notes": {"type": "array", "items": {"type": "string"}}}},
        {"notes": "['C', 'E', 'G']"},
        {"notes": ["C", "E", "G"]},
        [("$.notes", "['C', 'E', 'G']", ["C", "E", "G"], "python-literal->array")],
    ),
    Case(
        "py-in-nullable-anyof",
        {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]},
        "['x']",
        ["x"],
        [("$", "['x']", ["x"], "python-literal->array")],
    ),
    Case("py-string-kept-for-string", {"type": "string"}, "['a']"),
    Case("py-parenthesized-string-is-not-a-tuple", {"type": "array", "items": {"type": "string"}}, "('C')"),
    Case("py-parenthesized-number-is-not-a-tuple", {"type": "array"}, "(5)"),
    Case("py-set-for-array", {"type": "array"}, "{1, 2}"),
    Case("py-set-for-object", {"type": "object"}, "{1, 2}"),
    Case("py-dict-for-array", {"type": "array"}, "{'a': 1}"),
    Case("py-list-for-object", {"type": "object"}, "['a']"),
    Case("py-non-string-key", {"type": "object"}, "{1: 'a'}"),
    Case("py-bytes", {"type": "array"}, "[b'x']"),
    Case("py-f-string", {"type": "array"}, "[f'{x}']"),
    Case("py-complex", {"type": "array"}, "[1j]"),
    Case("py-complex-sum", {"type": "array"}, "[1+2j]"),
    Case("py-hex", {"type": "array"}, "[0x10]"),
    Case("py-underscore-number", {"type": "array"}, "[1_000]"),
    Case("py-float-call", {"type": "array"}, "[float('nan')]"),
    Case("py-nan-name", {"type": "array"}, "[nan]"),
    Case("py-overflow", {"type": "array"}, "(1e999,)"),
    Case("py-name", {"type": "array"}, "[x]"),
    Case("py-call", {"type": "array"}, "[__import__('os').getcwd()]"),
    Case("py-comprehension", {"type": "array"}, "[i for i in (1, 2)]"),
    Case("py-arithmetic", {"type": "array"}, "[1 + 2]"),
    Case("py-implicit-concatenation", {"type": "array"}, "['a' 'b']"),
    Case("py-implicit-concatenation-across-lines", {"type": "array"}, "['a'\n 'b']"),
    Case("py-unknown-escape", {"type": "array"}, r"['C:\d']"),
    Case("py-unbalanced", {"type": "array"}, "['a', 'b'"),
    Case("py-ellipsis", {"type": "array"}, "[...]"),
    # --- null for an optional property ------------------------------------
    Case(
        "null-optional-removed",
        {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
            "required": ["city"],
        },
        {"city": "Paris", "unit": None},
        {"city": "Paris"},
        [("$.unit", None, REMOVED, "optional-null->removed")],
    ),
    Case(
        "null-optional-enum-removed-nested",
        {
            "type": "object",
            "properties": {
                "filters": {
                    "type": "object",
                    "properties": {
                        "category": {"enum": ["books", "music"]},
                        "max_price": {"type": "number"},
                    },
                }
            },
        },
        {"filters": {"category": None, "max_price": "100"}},
        {"filters": {"max_price": 100}},
        [
            ("$.filters.category", None, REMOVED, "optional-null->removed"),
            ("$.filters.max_price", "100", 100, "string->number"),
        ],
    ),
    Case(
        "null-optional-in-anyof-branch",
        {
            "anyOf": [
                {"type": "object", "properties": {"a": {"type": "integer"}}},
                {"type": "string"},
            ]
        },
        {"a": None},
        {},
        [("$.a", None, REMOVED, "optional-null->removed")],
    ),
    Case(
        "null-required-kept",
        {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        {"city": None},
    ),
    Case(
        "null-required-by-allof-sibling-kept",
        {"allOf": [{"type": "object", "properties": {"u": {"type": "string"}}}, {"required": ["u"]}]},
        {"u": None},
    ),
    Case(
        "null-required-by-ref-target-kept",
        {
            "$defs": {"q": {"type": "object", "properties": {"u": {"type": "string"}}, "required": ["u"]}},
            "type": "object",
            "properties": {"q": {"$ref": "#/$defs/q"}},
        },
        {"q": {"u": None}},
    ),
    Case(
        "null-required-in-some-branch-kept",
        {
            "anyOf": [
                {"type": "object", "properties": {"u": {"type": "string"}}, "required": ["u"]},
                {"type": "object", "properties": {"v": {"type": "string"}}},
            ]
        },
        {"u": None},
    ),
    Case(
        "null-dependent-required-kept",
        {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
            "dependentRequired": {"city": ["unit"]},
        },
        {"city": "x", "unit": None},
    ),
    Case(
        "null-draft3-required-kept",
        {
            "$schema": "http://json-schema.org/draft-03/schema#",
            "type": "object",
            "properties": {"u": {"type": "string", "required": True}},
        },
        {"u": None},
    ),
    Case(
        "null-allowed-kept",
        {"type": "object", "properties": {"u": {"type": ["string", "null"]}}},
        {"u": None},
    ),
    Case(
        "null-undeclared-member-kept",
        {"type": "object", "additionalProperties": {"type": "string"}},
        {"u": None},
    ),
    Case("null-array-element-kept", {"type": "array", "items": {"type": "string"}}, [None]),
    Case("null-top-level-kept", {"type": "string"}, None),
    # --- integer-valued floats for integers -------------------------------
    Case(
        "int-float-nested-and-in-arrays",
        {
            "type": "object",
            "properties": {
                "limit": {"type": "integer"},
                "page": {"type": "object", "properties": {"size": {"type": "integer"}}},
                "dims": {"type": "array", "items": {"type": "integer"}},
                "ratio": {"type": "number"},
            },
        },
        {"limit": 4.0, "page": {"size": 2.0}, "dims": [3.0, 4, 5.0], "ratio": 2.0},
        {"limit": 4, "page": {"size": 2}, "dims": [3, 4, 5], "ratio": 2.0},
        [
            ("$.limit", 4.0, 4, "number->integer"),
            ("$.page.size", 2.0, 2, "number->integer"),
            ("$.dims[0]", 3.0, 3, "number->integer"),
            ("$.dims[2]", 5.0, 5, "number->integer"),
        ],
    ),
    Case(
        "int-float-nullable-type-list",
        {"type": ["integer", "null"]},
        4.0,
        4,
        [("$", 4.0, 4, "number->integer")],
    ),
    Case(
        "int-float-anyof-integer-branch",
        {"anyOf": [{"type": "integer"}, {"type": "string"}]},
        7.0,
        7,
        [("$", 7.0, 7, "number->integer")],
    ),
    Case("int-float-anyof-number-branch-first-kept", {"anyOf": [{"type": "number"}, {"type": "integer"}]}, 7.0),
    Case(
        "int-float-oneof",
        {"oneOf": [{"type": "integer", "minimum": 0}, {"type": "string"}]},
        3.0,
        3,
        [("$", 3.0, 3, "number->integer")],
    ),
    Case(
        "int-float-allof-and-ref",
        {"$defs": {"count": {"type": "integer"}}, "allOf": [{"$ref": "#/$defs/count"}, {"minimum": 1}]},
        2.0,
        2,
        [("$", 2.0, 2, "number->integer")],
    ),
    Case(
        "int-float-draft7",
        {"$schema": "http://json-schema.org/draft-07/schema#", "type": "integer"},
        -0.0,
        0,
        [("$", -0.0, 0, "number->integer")],
    ),
    Case(
        "int-float-large",
        {"type": "integer"},
        1e20,
        10**20,
        [("$", 1e20, 10**20, "number->integer")],
    ),
    Case(
        "int-float-beside-a-string-fix",
        {"type": "object", "properties": {"days": {"type": "integer"}, "limit": {"type": "integer"}}},
        {"days": "3", "limit": 4.0},
        {"days": 3, "limit": 4},
        [("$.days", "3", 3, "string->integer"), ("$.limit", 4.0, 4, "number->integer")],
    ),
    Case(
        "int-float-beside-an-uncoercible-value",
        {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
        {"a": 4.0, "b": "x"},
        {"a": 4, "b": "x"},
        [("$.a", 4.0, 4, "number->integer")],
    ),
    Case("int-float-number-kept", {"type": "number"}, 4.0),
    Case("int-float-untyped-enum-kept", {"enum": [1, 2, 3]}, 2.0),
    Case("int-float-any-schema-kept", {}, 4.0),
    Case("int-float-nonintegral-kept-in-type-list", {"type": ["integer", "null"]}, 4.5),
    # --- a single value for an array ---------------------------------------
    Case(
        "wrap-string",
        {"type": "array", "items": {"type": "string"}},
        "flour",
        ["flour"],
        [("$", "flour", ["flour"], "scalar->array")],
    ),
    Case(
        "wrap-integer",
        {"type": "array", "items": {"type": "integer"}},
        42,
        [42],
        [("$", 42, [42], "scalar->array")],
    ),
    Case(
        "wrap-then-coerce-element",
        {"type": "array", "items": {"type": "integer"}},
        "5",
        [5],
        [("$", "5", ["5"], "scalar->array"), ("$[0]", "5", 5, "string->integer")],
    ),
    Case(
        "wrap-object",
        {"type": "array", "items": POINT},
        {"lat": 1, "lon": "2"},
        [{"lat": 1, "lon": 2}],
        [
            ("$", {"lat": 1, "lon": "2"}, [{"lat": 1, "lon": "2"}], "scalar->array"),
            ("$[0].lon", "2", 2, "string->number"),
        ],
    ),
    Case(
        "wrap-in-property-nullable",
        {"type": "object", "properties": {"to": {"type": ["array", "null"], "items": {"type": "string"}}}},
        {"to": "bob@example.com"},
        {"to": ["bob@example.com"]},
        [("$.to", "bob@example.com", ["bob@example.com"], "scalar->array")],
    ),
    Case(
        "wrap-prefix-items",
        {"type": "array", "prefixItems": [{"type": "integer"}], "items": {"type": "string"}},
        "3",
        [3],
        [("$", "3", ["3"], "scalar->array"), ("$[0]", "3", 3, "string->integer")],
    ),
    Case(
        "wrap-anyof-when-no-branch-takes-scalar",
        {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "integer"}]},
        "a",
        ["a"],
        [("$", "a", ["a"], "scalar->array")],
    ),
    Case(
        "wrap-anyof-scalar-branch-wins",
        {"anyOf": [{"type": "array", "items": {"type": "integer"}}, {"type": "integer"}]},
        "5",
        5,
        [("$", "5", 5, "string->integer")],
    ),
    Case(
        "wrap-not-when-another-branch-takes-strings",
        {"anyOf": [{"type": "string", "maxLength": 3}, {"type": "array", "items": {"type": "string"}}]},
        "abcdef",
    ),
    Case("wrap-not-comma-list", {"type": "array", "items": {"type": "string"}}, "C, E, G"),
    Case("wrap-not-semicolon-list", {"type": "array", "items": {"type": "string"}}, "a; b"),
    Case("wrap-not-lines", {"type": "array", "items": {"type": "string"}}, "a\nb"),
    Case("wrap-not-broken-json", {"type": "array", "items": {"type": "string"}}, '["a", "b"'),
    Case("wrap-not-null", {"type": "array", "items": {"type": ["string", "null"]}}, None),
    Case("wrap-not-item-rejects", {"type": "array", "items": {"type": "integer"}}, "x"),
    Case("wrap-not-lossy-element", {"type": "array", "items": {"type": "integer"}}, "4.5"),
    Case("wrap-not-boolean-for-strings", {"type": "array", "items": {"type": "string"}}, True),
    Case("wrap-not-twice", {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}}, 5),
    Case("wrap-not-items-false", {"type": "array", "items": False}, "a"),
    Case("wrap-not-number-for-integer-type-list", {"type": ["array", "integer"], "items": {"type": "number"}}, 4.5),
    # --- numbers for strings -----------------------------------------------
    Case(
        "string-from-int-property",
        {"type": "object", "properties": {"zip": {"type": "string"}}},
        {"zip": 90210},
        {"zip": "90210"},
        [("$.zip", 90210, "90210", "number->string")],
    ),
    Case(
        "string-from-float-keeps-its-spelling",
        {"type": "string"},
        1.0,
        "1.0",
        [("$", 1.0, "1.0", "number->string")],
    ),
    Case(
        "string-from-negative-int",
        {"type": "string"},
        -7,
        "-7",
        [("$", -7, "-7", "number->string")],
    ),
    Case(
        "string-from-huge-int",
        {"type": "string"},
        12345678901234567890123,
        "12345678901234567890123",
        [("$", 12345678901234567890123, "12345678901234567890123", "number->string")],
    ),
    Case(
        "string-from-number-in-nullable-anyof",
        {"anyOf": [{"type": "string"}, {"type": "null"}]},
        42,
        "42",
        [("$", 42, "42", "number->string")],
    ),
    Case("string-not-when-integer-also-allowed", {"type": ["string", "integer"]}, 4.5),
    Case(
        "string-not-when-integer-branch-out-of-range",
        {"anyOf": [{"type": "integer", "maximum": 10}, {"type": "string"}]},
        42,
    ),
    Case("string-not-when-numeric-enum-branch", {"anyOf": [{"enum": [1, 2]}, {"type": "string"}]}, 42),
    Case("string-keeps-true-in-array", {"type": "array", "items": {"type": "string"}}, [True]),
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
    "int-float-beside-an-uncoercible-value",
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
        {"type": "array", "items": {"allOf": [{"enum": [1, "auto"]}, {"type": "string"}]}}
    )
    first = coercer.coerce([1])
    assert first.value == ["1"]
    second = coercer.coerce(first.value)
    assert second.value is first.value
    assert second.changes == []


def test_a_rule_applied_late_is_followed_through_so_the_result_is_a_fixed_point() -> None:
    # Examples hypothesis found for test_idempotent: one walk left work for a second.
    # The second allOf branch turns "0.0" into 0.0 after the first had passed the text;
    # for {"type": ["integer", "string"]} the float is then 0, as for a valid 0.0.
    coercer = Coercer({"type": "array", "items": {"allOf": [
        {"type": ["integer", "string"]}, {"type": "number"}]}})
    first = coercer.coerce(["0.0"])
    assert first.value == [0] and isinstance(first.value[0], int)
    assert [c.rule for c in first.changes] == ["string->number", "number->integer"]
    assert first.known_valid  # checked on the last pass: the executor need not again
    assert coercer.coerce(first.value).changes == []
    # branches that keep undoing each other: followed until they settle
    fighting = Coercer({"type": "array", "items": {"allOf": [
        {"enum": [1, 2, 3]}, {"type": "string"}]}})
    settled = fighting.coerce([1.0])
    again = fighting.coerce(settled.value)
    assert again.changes == [] and again.value is settled.value


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


# ------------------------------------------------------- the new rules' edges


def test_removed_marker_is_a_json_string_singleton() -> None:
    result = coerce({"unit": None}, {"type": "object", "properties": {"unit": {"type": "string"}}})
    change = result.changes[0]
    assert result.value == {} and change.new is REMOVED
    assert repr(change) == "CoercionChange(path='$.unit', old=None, new=<removed>, rule='optional-null->removed')"
    assert json.dumps(change.new) == '"<removed>"'
    assert copy.deepcopy(change).new is REMOVED
    assert pickle.loads(pickle.dumps(REMOVED)) is REMOVED
    # Run results carry changes as CoercionRecord and are dumped to JSON.
    record = CoercionRecord(path=change.path, old=change.old, new=change.new, rule=change.rule)
    assert record.model_dump(mode="json")["new"] == "<removed>"
    assert record.new is REMOVED


def test_integral_float_result_is_known_valid_and_equal() -> None:
    schema = {"type": "object", "properties": {"limit": {"type": "integer"}}}
    value = {"limit": 4.0}
    result = Coercer(schema).coerce(value)
    assert result.known_valid
    assert result.value == value and result.value is not value
    assert type(result.value["limit"]) is int
    assert value == {"limit": 4.0} and type(value["limit"]) is float


def test_integral_floats_left_alone_where_no_schema_says_integer() -> None:
    value = {"ratio": 2.0, "any": [1.0]}
    schema = {"type": "object", "properties": {"ratio": {"type": "number"}}}
    result = coerce(value, schema)
    assert result.value is value and result.changes == [] and result.known_valid


def test_draft4_integer_conversion_rechecked_against_not() -> None:
    # Draft 4 tells 4 from 4.0: here only the float is valid, so it stays.
    schema = {
        "$schema": "http://json-schema.org/draft-04/schema#",
        "type": ["integer", "number"],
        "not": {"type": "integer"},
    }
    assert coerce(4.0, schema).value == 4.0
    assert coerce(4.0, schema).changes == []


def test_python_literal_never_warns() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for text in [r"['\d']", r"['\q', 'a']", "['a' 'b']", "[1 if True else 2]", "[0777]", "[07]"]:
            assert coerce(text, {"type": "array"}).value == text


def test_python_literal_nesting_is_bounded() -> None:
    schema = {"type": "array"}
    too_deep = "[" * (MAX_DEPTH + 1) + "'x'" + "]" * (MAX_DEPTH + 1)  # (not JSON)
    assert coerce(too_deep, schema).value is too_deep
    hostile = "(" * 100_000
    assert coerce(hostile, schema).value is hostile
    deep_ok = "[" * 50 + "'x'" + "]" * 50
    decoded = coerce(deep_ok, schema).value
    for _ in range(49):
        decoded = decoded[0]
    assert decoded == ["x"]


def test_python_literal_size_is_bounded() -> None:
    schema = {"type": "array", "items": {"type": "string"}}
    count = (MAX_LITERAL_CHARS - 2) // 5
    fits = "[" + "'a', " * count + "]"
    assert len(fits) <= MAX_LITERAL_CHARS
    assert coerce(fits, schema).value == ["a"] * count
    too_long = "[" + "'a', " * (count + 1) + "]"
    assert len(too_long) > MAX_LITERAL_CHARS
    assert coerce(too_long, schema).value is too_long
    schema = {"type": "array", "items": {"type": "integer"}}
    # JSON text has no such bound: it is parsed in C, without a token scan.
    json_text = "[" + "1, " * 10_000 + "1]"
    assert coerce(json_text, schema).value == [1] * 10_001
