"""Reading a plan while it streams: the step scanner and the per-step checks.

The scanner must find exactly the elements the final parse finds, however the answer
is cut into pieces (property-tested over random plans and random cuts, strings full of
brackets, quotes and escapes included), and stop on what the final parse would refuse.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestration import Catalog
from planners._plan_stream import PlanStream
from planners._step_scanner import StepScanner


def scan(text: str, cuts: list[int] | None = None, **limits: int) -> tuple[list[Any], StepScanner]:
    """Feed ``text`` cut at ``cuts`` (every character when None); the decoded steps."""
    scanner = StepScanner(max_depth=limits.get("max_depth", 64),
                          max_steps=limits.get("max_steps", 1000),
                          max_element_chars=limits.get("max_element_chars", 1_000_000))
    bounds = sorted({0, len(text), *(cuts if cuts is not None else range(len(text)))})
    found: list[Any] = []
    for start, end in itertools.pairwise(bounds):
        for step in scanner.feed(text[start:end]):
            value = json.loads(step.text)
            if step.decoded:  # read whole at once: its value is what its text decodes to
                assert step.value == value and json.dumps(step.value) == json.dumps(value)
            found.append(value)
    return found, scanner


STEPS = [
    {"id": "a", "tool": "t", "capability": "c",
     "params": {"q": "brackets ] } [ { and \"quotes\" and a \\ backslash", "n": [1, {"k": []}]}},
    {"id": "b", "tool": "t", "capability": "c", "params": {"s": "\u00e9\u4e2d \U0001f600 \n"}},
]


@pytest.mark.parametrize("shape", [
    lambda steps: {"steps": steps},
    lambda steps: steps,
    lambda steps: {"plan": steps},
    lambda steps: {"plan": {"reasoning": "x", "steps": steps}},
    lambda steps: {"reasoning": "use [geo] then {weather}: \"steps\": [1]", "steps": steps},
])
def test_every_accepted_shape_yields_the_steps_one_character_at_a_time(shape: Any) -> None:
    text = json.dumps(shape(STEPS))
    found, scanner = scan(text)
    assert found == STEPS
    assert scanner.finished and scanner.failed is None


def test_text_around_the_json_is_skipped_and_later_arrays_are_ignored() -> None:
    text = ("Here is the plan:\n```json\n" + json.dumps({"steps": STEPS[:1]})
            + "\n```\nand another [1, 2] {\"steps\": [{}]}")
    found, scanner = scan(text, cuts=[3, 17, 40])
    assert found == STEPS[:1] and scanner.finished


def test_a_step_is_returned_as_soon_as_its_object_closes() -> None:
    text = json.dumps({"steps": STEPS})
    end_of_first = len('{"steps": [') + len(json.dumps(STEPS[0]))
    scanner = StepScanner(max_depth=64, max_steps=10)
    assert scanner.feed(text[:end_of_first - 1]) == []
    (first,) = scanner.feed(text[end_of_first - 1:end_of_first])
    assert json.loads(first.text) == STEPS[0] and first.index == 0 and first.enclosing == 2


def test_a_step_whole_in_one_piece_is_read_as_the_final_parse_reads_it() -> None:
    # the same value as the bounded decoder gives for its text: the last of a duplicate
    # key, big integers exact; a number that overflows is left to that decoder, which
    # refuses it (the step is then not handed back, and the answer is refused at the end)
    text = ('{"steps": [{"id": "a", "id": "b", "tool": "geo", "capability": "locate", '
            '"params": {"city": "x", "n": 123456789012345678901234567890}}, '
            '{"id": "c", "tool": "geo", "capability": "locate", "params": {"f": 1e999}}]}')
    scanner = StepScanner(max_depth=64, max_steps=10)
    first, second = scanner.feed(text)
    assert first.decoded and first.value["id"] == "b"
    assert first.value["params"]["n"] == 123456789012345678901234567890
    assert not second.decoded and json.loads(second.text)["params"]["f"] == float("inf")
    reader = PlanStream(catalog(), max_steps=10, max_depth=64, check_references=False)
    assert reader.feed(text) == []  # nothing more of an answer that cannot be accepted
    assert reader.doomed is not None and "does not fit a float" in reader.doomed


def test_an_escape_cut_between_backslash_and_quote_stays_inside_the_string() -> None:
    text = json.dumps([{"id": "a", "tool": "t", "capability": "c", "params": {"q": 'x"}]'}}])
    cut = text.index('\\"') + 1  # the piece ends with the backslash
    found, _ = scan(text, cuts=[cut])
    assert found[0]["params"]["q"] == 'x"}]'


@pytest.mark.parametrize(("text", "limits", "reason"), [
    ('{"steps": [{"id": "a"}, "b"]}', {}, "element 2 of the step array is not a JSON object"),
    ('{"steps": [[1]]}', {}, "element 1 of the step array is not a JSON object"),
    ('{"steps": [{"p": ' + "[" * 70 + "]" * 70 + "}]}", {}, "nested deeper than 64 levels"),
    ('{"steps": [{"id": "a"}, {"id": "b"}, {"id": "c"}]}', {"max_steps": 2},
     "more than 2 steps"),
    ('{"steps": [{"id": "a"]}', {}, "brackets of the answer do not match"),
    ('{"steps": [{"id": "' + "x" * 200 + '"}]}', {"max_element_chars": 100},
     "longer than 100 characters"),
])
@pytest.mark.parametrize("whole", [False, True], ids=["char by char", "in one piece"])
def test_the_scanner_stops_on_what_the_final_parse_refuses(
    text: str, limits: dict[str, int], reason: str, whole: bool
) -> None:
    found, scanner = scan(text, [] if whole else None, **limits)
    assert scanner.failed is not None and reason in scanner.failed
    assert len(found) <= limits.get("max_steps", 1)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=st.sampled_from('ab{}[]":,\\ \n\u00e9\u4e2d'), max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.text(alphabet=st.sampled_from('ks{}[]":\\'), max_size=5), inner, max_size=3),
    max_leaves=12,
)
step_objects = st.fixed_dictionaries(
    {"id": st.from_regex(r"[a-z][a-z0-9_]{0,5}", fullmatch=True), "tool": st.just("t"),
     "capability": st.just("c"), "params": st.dictionaries(st.text(max_size=4), json_values,
                                                            max_size=3)})


@settings(max_examples=150, deadline=None)
@given(steps=st.lists(step_objects, max_size=5), data=st.data(),
       indent=st.sampled_from([None, 2]), ensure_ascii=st.booleans())
def test_any_cut_of_any_plan_yields_exactly_the_parsed_steps(
    steps: list[dict[str, Any]], data: st.DataObject, indent: int | None, ensure_ascii: bool
) -> None:
    text = json.dumps({"reasoning": "r", "steps": steps}, indent=indent,
                      ensure_ascii=ensure_ascii)
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=30))
    found, scanner = scan(text, cuts)
    assert found == json.loads(text)["steps"]
    assert scanner.finished and scanner.failed is None


# --- the per-step checks ------------------------------------------------------------------


def catalog() -> Catalog:
    cat = Catalog()

    @cat.tool("geo.locate")
    def locate(city: str) -> dict[str, float]:
        return {"lat": 1.0}

    cat.add_function(lambda lat: {"temp": 1}, tool="weather", capability="now",
                     input_schema={"type": "object", "properties": {"lat": {"type": "number"}}},
                     output_schema={"type": "object", "properties": {"temp": {"type": "number"}},
                                    "additionalProperties": False})
    return cat


def stream(steps: list[dict[str, Any]], **options: Any) -> tuple[list[str], PlanStream]:
    reader = PlanStream(catalog(), max_steps=options.get("max_steps", 100), max_depth=64,
                        check_references=options.get("check_references", True))
    ready: list[str] = []
    text = json.dumps({"steps": steps})
    for i in range(0, len(text), 5):
        ready += [s.id for s in reader.feed(text[i:i + 5])]
    return ready, reader


def geo(sid: str, **extra: Any) -> dict[str, Any]:
    return {"id": sid, "tool": "geo", "capability": "locate", "params": {"city": "x"}, **extra}


def weather(sid: str, lat: str) -> dict[str, Any]:
    return {"id": sid, "tool": "weather", "capability": "now", "params": {"lat": lat}}


def test_steps_come_after_the_steps_they_use_even_when_written_before_them() -> None:
    ready, reader = stream([weather("w", "{{g.lat}}"), geo("a"),
                            geo("b", depends_on=["g"]), geo("g")])
    assert ready == ["a", "g", "w", "b"]
    assert reader.doomed is None


def test_a_step_using_a_step_that_never_comes_or_a_cycle_is_never_ready() -> None:
    ready, reader = stream([geo("a", depends_on=["ghost"]), geo("x", depends_on=["y"]),
                            geo("y", depends_on=["x"]), geo("ok")])
    assert ready == ["ok"] and reader.doomed is None  # the final validation names them


@pytest.mark.parametrize(("steps", "words"), [
    ([geo("a"), {"id": "b", "tool": "nope", "capability": "x", "params": {}}, geo("c")],
     ["step 'b'", "nope"]),
    ([geo("a"), geo("a")], ["step id 'a' is used twice"]),
    ([geo("a", depends_on=["a"])], ["depends_on names the step itself"]),
    ([geo("a"), {"id": "b", "tool": "geo"}], ["step 2 of the plan does not have the shape",
                                              "capability"]),
    ([geo("a"), weather("w", "{{a.lat}}"), weather("v", "{{w.wind}}")],
     ["step 'v'", "{{w.wind}}"]),  # a path the upstream output schema does not have
])
def test_a_step_that_fails_its_checks_dooms_the_answer(
    steps: list[dict[str, Any]], words: list[str]
) -> None:
    ready, reader = stream(steps)
    assert reader.doomed is not None
    for word in words:
        assert word in reader.doomed
    assert "c" not in ready  # nothing after it is handed over
    assert reader.feed("") == []


def test_reference_paths_are_only_checked_when_asked() -> None:
    ready, reader = stream([geo("a"), weather("w", "{{a.lat}}"), weather("v", "{{w.wind}}")],
                           check_references=False)
    assert ready == ["a", "w", "v"] and reader.doomed is None
