"""The compiled "certainly valid" check never accepts what jsonschema rejects.

Pre-flight validation and layer 2 ask :func:`orchestration._schema.accept_check` first
and jsonschema only when it does not accept a value, so a value it accepts wrongly would
be sent to a tool unvalidated. Schemas are drawn from the keywords it follows (and a few
it must refuse to compile), values from arbitrary JSON and from values near the schema's
bounds; every value it accepts must be valid for jsonschema, with formats asserted.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from executors._prepare import PreparedCapability
from orchestration import Catalog
from orchestration._schema import accept_check, format_checker, validator

SETTINGS = settings(max_examples=400, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

NAMES = ["a", "b", "n"]
TYPES = ["string", "integer", "number", "boolean", "null", "object", "array"]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.sampled_from([0.0, 1.0, 2.5, -1.5, 3.0])
    | st.sampled_from(["", "a", "b", "2024-01-31", "2024-13-45", "x@y.z", "no"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(NAMES), inner,
                                                                  max_size=3),
    max_leaves=8,
)


def leaf_schemas() -> st.SearchStrategy[dict[str, Any]]:
    type_kw = st.sampled_from(TYPES) | st.lists(st.sampled_from(TYPES), min_size=1, max_size=3,
                                                unique=True)
    number = st.sampled_from([-1, 0, 1, 2, 2.5])
    count = st.integers(0, 3)
    keywords = st.fixed_dictionaries({}, optional={
        "type": type_kw, "minimum": number, "maximum": number, "exclusiveMinimum": number,
        "exclusiveMaximum": number, "minLength": count, "maxLength": count,
        "minItems": count, "maxItems": count, "minProperties": count, "maxProperties": count,
        "enum": st.lists(st.none() | st.booleans() | st.integers(0, 2) | st.sampled_from(
            ["a", "b", ""]), min_size=1, max_size=3),
        "format": st.sampled_from(["date", "email", "ipv4"]),
        "description": st.just("text"),
    })
    return keywords


def schemas() -> st.SearchStrategy[Any]:
    return st.recursive(
        leaf_schemas() | st.just(True),
        lambda inner: st.fixed_dictionaries(
            {"type": st.just("object")},
            optional={"properties": st.dictionaries(st.sampled_from(NAMES), inner, max_size=3),
                      "required": st.lists(st.sampled_from(NAMES), max_size=2, unique=True),
                      "additionalProperties": st.booleans() | inner,
                      "minProperties": st.integers(0, 2)})
        | st.fixed_dictionaries({"type": st.just("array"), "items": inner},
                                optional={"minItems": st.integers(0, 2)}),
        max_leaves=6,
    )


@SETTINGS
@given(schema=schemas(), value=json_values)
def test_what_the_compiled_check_accepts_jsonschema_accepts(schema: Any, value: Any) -> None:
    check = accept_check(schema, format_checker(schema))
    assert check is not None  # every drawn keyword is one it follows
    if check(value):
        assert validator(schema).is_valid(value), (schema, value)


scalars = (st.none() | st.booleans() | st.integers(-3, 4)
           | st.sampled_from([0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, -0.5])
           | st.sampled_from(["", "a", "ab", "abcd", "2024-01-31", "2024-13-45", "1.2.3.4"]))


@SETTINGS
@given(schema=leaf_schemas(), value=scalars | st.lists(scalars, max_size=4)
       | st.dictionaries(st.sampled_from(NAMES), scalars, max_size=4))
def test_on_flat_schemas_near_their_bounds(schema: Any, value: Any) -> None:
    check = accept_check(schema, format_checker(schema))
    assert check is not None
    if check(value):
        assert validator(schema).is_valid(value), (schema, value)


@SETTINGS
@given(schema=schemas(), value=json_values)
def test_without_formats_it_follows_a_validator_without_formats(schema: Any, value: Any) -> None:
    check = accept_check(schema, None)
    assert check is not None
    if check(value):
        assert validator(schema, formats=False).is_valid(value), (schema, value)


@pytest.mark.parametrize("schema", [
    {"$ref": "#/$defs/x", "$defs": {"x": {"type": "integer"}}},
    {"anyOf": [{"type": "integer"}, {"type": "string"}]},
    {"type": "string", "pattern": "^a"},
    {"const": 1},
    {"type": "object", "patternProperties": {"^x": {"type": "integer"}},
     "additionalProperties": False},
    {"type": "array", "prefixItems": [{"type": "integer"}], "items": {"type": "string"}},
    {"$schema": "http://json-schema.org/draft-04/schema#", "type": "integer"},
    {"type": "integer", "multipleOf": 2},
])
def test_schemas_with_keywords_it_does_not_follow_are_left_to_jsonschema(schema: Any) -> None:
    assert accept_check(schema, format_checker(schema)) is None


def test_it_accepts_the_valid_parameters_of_a_typical_tool_and_nothing_invalid() -> None:
    schema = {"type": "object", "additionalProperties": False, "required": ["city"],
              "properties": {"city": {"type": "string", "minLength": 1},
                             "days": {"type": "integer", "minimum": 1, "maximum": 16},
                             "units": {"enum": ["metric", "imperial"]},
                             "start": {"type": "string", "format": "date"}}}
    check = accept_check(schema, format_checker(schema))
    assert check is not None
    assert check({"city": "Oslo", "days": 3, "units": "metric", "start": "2024-05-01"})
    assert check({"city": "Oslo", "days": 3.0})  # 3.0 is an integer from draft 6 on
    for bad in ({"days": 3}, {"city": ""}, {"city": "Oslo", "days": 0},
                {"city": "Oslo", "days": True}, {"city": "Oslo", "units": "kelvin"},
                {"city": "Oslo", "start": "2024-13-01"}, {"city": "Oslo", "extra": 1},
                {"city": "Oslo", "days": "3"}):
        assert not check(bad), bad
        assert not jsonschema.Draft202012Validator(
            schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER).is_valid(bad)


def test_pre_flight_validation_reports_every_issue_when_the_check_does_not_accept() -> None:
    catalog = Catalog()
    catalog.add_function(lambda city, days=1: {}, tool="w", capability="f", input_schema={
        "type": "object", "required": ["city"], "additionalProperties": False,
        "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}}})
    prepared = PreparedCapability(catalog.get("w", "f"))
    assert prepared.validate({"city": "Oslo", "days": 2}) == []
    issues = prepared.validate({"days": 0, "x": 1})
    assert {(i.path, i.validator) for i in issues} == {
        ("$", "required"), ("$", "additionalProperties"), ("$.days", "minimum")}
