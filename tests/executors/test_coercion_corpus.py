"""A corpus of mistaken tool calls in the style real models produce, through layer 2.

The calls are hand-written after the kinds of mistakes visible in the published
outputs of the Berkeley Function Calling Leaderboard (ShishirPatil/gorilla,
``berkeley-function-call-leaderboard/result/*``): Python-literal lists and dicts
where the schema wants JSON (``items=['burgers', 'chicken wings']`` written as
text), integers sent as ``5.0``, ``null`` for parameters the model meant to
leave out, one value where a list is wanted, numbers for string parameters, and
the mistakes no machine can fix without guessing (``"4.5"`` for an integer, a
comma-separated string for a list, a boolean for text).  No leaderboard data is
used here, only the kinds.

Every call is labelled with what a lossless coercion must produce, or as
``LOSSY`` when nothing may be changed (layer 3 explains the problem to the
model instead).  The test computes the fraction of the lossless calls layer 2
fixes and requires all of them.  Measured on this corpus, the coercer at
commit 22bc972 (before the Python-literal, optional-null, integer-float and
single-value rules, and before number->string and boolean->string were
narrowed) fixed 8 of the 33 lossless calls (24%) and changed 2 of the 13
lossy ones (``True`` -> ``"true"``, an out-of-range integer -> text); now it
fixes 33 of 33 and leaves all 13 lossy calls as they were sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator

from executors import coerce

LOSSY: Any = object()


def obj(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required or []}


STRING = {"type": "string"}
INTEGER = {"type": "integer"}
NUMBER = {"type": "number"}
STRINGS = {"type": "array", "items": STRING}
INTEGERS = {"type": "array", "items": INTEGER}
NUMBERS = {"type": "array", "items": NUMBER}
UNIT = {"type": "string", "enum": ["celsius", "fahrenheit"]}


@dataclass(frozen=True)
class Call:
    id: str
    schema: dict[str, Any]
    params: dict[str, Any]
    fixed: Any  # the parameters layer 2 must produce, or LOSSY


CORPUS: list[Call] = [
    # --- Python-literal containers (prompt-style models think in Python) ----
    Call("chord-notes", obj({"notes": STRINGS}, ["notes"]),
         {"notes": "['C', 'E', 'G']"}, {"notes": ["C", "E", "G"]}),
    Call("progression", obj({"chords": STRINGS, "key": STRING}, ["chords"]),
         {"chords": "['I', 'V', 'vi', 'IV']", "key": "C"}, {"chords": ["I", "V", "vi", "IV"], "key": "C"}),
    Call("grades", obj({"scores": {"type": "object", "additionalProperties": INTEGER}}, ["scores"]),
         {"scores": "{'math': 90, 'science': 85}"}, {"scores": {"math": 90, "science": 85}}),
    Call("polynomial-tuple", obj({"coefficients": NUMBERS}, ["coefficients"]),
         {"coefficients": "(1, -3, 2)"}, {"coefficients": [1, -3, 2]}),
    Call("order-items", obj({"restaurant": STRING, "items": STRINGS, "quantities": INTEGERS}),
         {"restaurant": "uber pitada", "items": "['burgers', 'chicken wings']", "quantities": "[5, 6]"},
         {"restaurant": "uber pitada", "items": ["burgers", "chicken wings"], "quantities": [5, 6]}),
    Call("device-body", obj({"body": obj({"mode": STRING, "monitoring": {"type": "boolean"},
                                          "target": INTEGER})}, ["body"]),
         {"body": "{'mode': 'AIR_CLEAN', 'monitoring': True, 'target': '22'}"},
         {"body": {"mode": "AIR_CLEAN", "monitoring": True, "target": 22}}),
    Call("interval-floats", obj({"interval": INTEGERS}),
         {"interval": "[1.0, 3.0]"}, {"interval": [1, 3]}),
    Call("flags-with-none", obj({"flags": {"type": "array", "items": {"type": ["boolean", "null"]}}}),
         {"flags": "[True, None, False]"}, {"flags": [True, None, False]}),
    Call("trailing-comma", obj({"ids": INTEGERS}), {"ids": "[101, 102,]"}, {"ids": [101, 102]}),
    Call("matrix-of-tuples", obj({"matrix": {"type": "array", "items": NUMBERS}}),
         {"matrix": "[(1, 2), (3, 4)]"}, {"matrix": [[1, 2], [3, 4]]}),
    Call("filters-with-none", obj({"filters": obj({"genre": STRING, "year": INTEGER})}),
         {"filters": "{'genre': 'jazz', 'year': None}"}, {"filters": {"genre": "jazz"}}),
    # --- JSON text (fixed before as well) --------------------------------------
    Call("json-list", obj({"tags": STRINGS}), {"tags": '["a", "b"]'}, {"tags": ["a", "b"]}),
    Call("json-object", obj({"point": obj({"lat": NUMBER, "lon": NUMBER})}),
         {"point": '{"lat": "35.68", "lon": 139.69}'}, {"point": {"lat": 35.68, "lon": 139.69}}),
    # --- integer-valued floats ------------------------------------------------
    Call("limit-float", obj({"query": STRING, "limit": INTEGER}, ["query"]),
         {"query": "hotels", "limit": 4.0}, {"query": "hotels", "limit": 4}),
    Call("page-float-nested", obj({"paging": obj({"page": INTEGER, "size": INTEGER})}),
         {"paging": {"page": 2.0, "size": 50}}, {"paging": {"page": 2, "size": 50}}),
    Call("nullable-count", obj({"count": {"type": ["integer", "null"]}}), {"count": 5.0}, {"count": 5}),
    Call("years-floats", obj({"years": INTEGERS}), {"years": [2020.0, 2021.0]}, {"years": [2020, 2021]}),
    Call("anyof-integer", obj({"n": {"anyOf": [INTEGER, {"type": "null"}]}}), {"n": 3.0}, {"n": 3}),
    Call("floats-beside-text", obj({"days": INTEGER, "top_k": INTEGER}),
         {"days": "3", "top_k": 10.0}, {"days": 3, "top_k": 10}),
    # --- null for an optional parameter ---------------------------------------
    Call("weather-unit-null", obj({"location": STRING, "unit": UNIT}, ["location"]),
         {"location": "Tel Aviv", "unit": None}, {"location": "Tel Aviv"}),
    Call("sort-null", obj({"botId": STRING, "sortBy": {"enum": ["ASC", "DESC"]}, "maxResults": INTEGER},
                          ["botId"]),
         {"botId": "B12345", "sortBy": None, "maxResults": None}, {"botId": "B12345"}),
    Call("nested-null", obj({"ride": obj({"loc": STRING, "time": INTEGER}, ["loc"])}),
         {"ride": {"loc": "2020 Addison Street", "time": None}}, {"ride": {"loc": "2020 Addison Street"}}),
    # --- one value where a list is wanted --------------------------------------
    Call("single-ingredient", obj({"ingredients": STRINGS}, ["ingredients"]),
         {"ingredients": "flour"}, {"ingredients": ["flour"]}),
    Call("single-id", obj({"item_ids": INTEGERS}), {"item_ids": 102}, {"item_ids": [102]}),
    Call("single-id-text", obj({"item_ids": INTEGERS}), {"item_ids": "102"}, {"item_ids": [102]}),
    Call("single-recipient", obj({"to": STRINGS, "subject": STRING}),
         {"to": "bob@example.com", "subject": "Hi"}, {"to": ["bob@example.com"], "subject": "Hi"}),
    Call("single-stop", obj({"stops": {"type": "array", "items": obj({"lat": NUMBER, "lon": NUMBER})}}),
         {"stops": {"lat": 1.5, "lon": "2"}}, {"stops": [{"lat": 1.5, "lon": 2}]}),
    # --- numbers for strings ------------------------------------------------------
    Call("zip-number", obj({"zip_code": STRING}), {"zip_code": 90210}, {"zip_code": "90210"}),
    Call("year-number", obj({"year": STRING, "genre": STRING}),
         {"year": 2023, "genre": "rock"}, {"year": "2023", "genre": "rock"}),
    Call("version-float", obj({"version": STRING}), {"version": 1.5}, {"version": "1.5"}),
    Call("account-id", obj({"account": {"anyOf": [STRING, {"type": "null"}]}}),
         {"account": 12345678901234567890}, {"account": "12345678901234567890"}),
    # --- text for numbers and booleans (fixed before as well) ------------------
    Call("lat-text", obj({"latitude": NUMBER, "longitude": NUMBER}),
         {"latitude": "37.8651", "longitude": "-119.5383"}, {"latitude": 37.8651, "longitude": -119.5383}),
    Call("flag-text", obj({"aligned": {"type": "boolean"}, "unit": UNIT}),
         {"aligned": "True", "unit": "Celsius"}, {"aligned": True, "unit": "celsius"}),
    # --- what must stay untouched ---------------------------------------------
    Call("limit-text-fraction", obj({"limit": INTEGER}), {"limit": "4.5"}, LOSSY),
    Call("limit-fraction", obj({"limit": INTEGER}), {"limit": 4.5}, LOSSY),
    Call("nan-text", obj({"amount": NUMBER}), {"amount": "nan"}, LOSSY),
    Call("words-for-number", obj({"amount": NUMBER}), {"amount": "five"}, LOSSY),
    Call("thousands-separator", obj({"amount": NUMBER}), {"amount": "1,234"}, LOSSY),
    Call("comma-separated-list", obj({"repos": STRINGS}),
         {"repos": "ShishirPatil/gorilla,gorilla-llm/gorilla-cli"}, LOSSY),
    Call("parenthesized-string", obj({"notes": STRINGS}), {"notes": "('C')"}, LOSSY),
    Call("set-literal", obj({"ids": INTEGERS}), {"ids": "{1, 2}"}, LOSSY),
    Call("missing-comma", obj({"notes": STRINGS}), {"notes": "['C' 'E']"}, LOSSY),
    Call("bool-for-text", obj({"answer": STRING}), {"answer": True}, LOSSY),
    Call("required-null", obj({"location": STRING}, ["location"]), {"location": None}, LOSSY),
    Call("fraction-in-list", obj({"ids": INTEGERS}), {"ids": [1.5]}, LOSSY),
    Call("integer-out-of-range-not-text", obj({"q": {"anyOf": [{"type": "integer", "maximum": 10}, STRING]}}),
         {"q": 42}, LOSSY),
]


def _strict(value: Any) -> Any:
    """Compare with True != 1 and 4 != 4.0."""
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_strict(v) for v in value]
    return (type(value).__name__, value)


def _fixes(call: Call) -> bool:
    result = coerce(call.params, call.schema)
    return _strict(result.value) == _strict(call.fixed) and Draft202012Validator(
        call.schema
    ).is_valid(result.value)


def test_corpus_is_realistic_in_size_and_ids_are_unique() -> None:
    ids = [call.id for call in CORPUS]
    assert len(ids) == len(set(ids))
    lossless = [call for call in CORPUS if call.fixed is not LOSSY]
    assert len(lossless) >= 30 and len(CORPUS) - len(lossless) >= 10


def test_layer2_fixes_every_lossless_call() -> None:
    lossless = [call for call in CORPUS if call.fixed is not LOSSY]
    fixed = [call.id for call in lossless if _fixes(call)]
    assert len(fixed) / len(lossless) == 1.0, sorted({c.id for c in lossless} - set(fixed))


def test_lossy_calls_are_left_exactly_as_sent() -> None:
    for call in CORPUS:
        if call.fixed is not LOSSY:
            continue
        result = coerce(call.params, call.schema)
        assert result.value is call.params, call.id
        assert result.changes == [], call.id
        # ... and they really are invalid, so layer 3 gets to explain them
        assert not Draft202012Validator(call.schema).is_valid(call.params), call.id


def test_every_lossless_call_was_broken_to_begin_with() -> None:
    # A call that is already right would inflate the fraction; only a float
    # for an integer is valid JSON Schema as sent (and still wrong for tools).
    for call in CORPUS:
        if call.fixed is LOSSY:
            continue
        assert _strict(call.params) != _strict(call.fixed), call.id
