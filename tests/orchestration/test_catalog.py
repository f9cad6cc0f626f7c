"""Catalog loading: schema checks, retry overrides, tool-level defaults, bad files."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from orchestration import Catalog, CatalogError


def tool(**extra: object) -> dict:
    return {"tools": [{"name": "t", "base_url": "http://127.0.0.1:9", **extra,
                       "capabilities": [{"name": "c", "path": "/c",
                                         "retry": {"max_attempts": 5},
                                         "layers": {"max_validation_retries": 1}}]}]}


def test_tool_level_retry_and_layers_are_defaults_merged_per_key() -> None:
    cat = Catalog.from_dict(tool(retry={"backoff": "constant", "max_attempts": 2},
                                 layers={"validation_feedback_enabled": False}, timeout_s=3))
    cap = cat.get("t", "c")
    assert cap.retry == {"backoff": "constant", "max_attempts": 5}
    assert cap.layers == {"validation_feedback_enabled": False, "max_validation_retries": 1}
    assert cap.timeout_s == 3 and cap.url == "http://127.0.0.1:9/c"


def test_bad_retry_override_is_rejected_at_load_naming_the_capability() -> None:
    with pytest.raises(CatalogError, match=r"capability 't.c'.*unknown retry setting\(s\) 'tries'"):
        Catalog.from_dict(tool(retry={"tries": 2}))
    with pytest.raises(CatalogError, match=r"capability 't.c'.*invalid retry setting"):
        Catalog.from_dict(tool(retry={"backoff": "sometimes"}))


def test_invalid_schema_is_rejected_naming_the_capability() -> None:
    cat = Catalog()
    with pytest.raises(CatalogError, match=r"capability 'x.y': invalid input_schema at \$\.properties\.a\.type"):
        cat.add_function(lambda: 1, tool="x", capability="y",
                         input_schema={"type": "object", "properties": {"a": {"type": "nope"}}})


def test_bad_files_say_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="cannot read catalog"):
        Catalog.from_file(tmp_path / "missing.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("tools: [\n")
    with pytest.raises(CatalogError, match="not valid yaml"):
        Catalog.from_file(broken)
    no_tools = tmp_path / "empty.json"
    no_tools.write_text('{"tool": []}')
    with pytest.raises(CatalogError, match="top-level 'tools' list"):
        Catalog.from_file(no_tools)


def test_env_expansion_in_urls(monkeypatch: pytest.MonkeyPatch) -> None:
    data = {"tools": [{"name": "t", "base_url": "${TOOLS_HOST:-http://127.0.0.1}:8000",
                       "capabilities": [{"name": "c", "path": "c"}]}]}
    assert Catalog.from_dict(data).get("t", "c").url == "http://127.0.0.1:8000/c"
    monkeypatch.setenv("TOOLS_HOST", "http://10.0.0.5")
    assert Catalog.from_dict(data).get("t", "c").url == "http://10.0.0.5:8000/c"
    with pytest.raises(CatalogError, match=r"\$\{NOT_SET_VAR\}"):
        Catalog.from_dict({"tools": [{"name": "t", "base_url": "${NOT_SET_VAR}",
                                      "capabilities": [{"name": "c", "path": "c"}]}]})


def test_duplicate_and_unknown_lookups() -> None:
    cat = Catalog()
    cat.add_function(lambda: 1, tool="x", capability="y")
    with pytest.raises(CatalogError, match="defined twice"):
        cat.add_function(lambda: 1, tool="x", capability="y")
    with pytest.raises(CatalogError, match="unknown tool 'z'"):
        cat.get("z", "y")
    assert cat.get("x", "y").idempotent is True
    http = cat.add_http(tool="h", capability="post", url="http://127.0.0.1:9/p")
    assert http.idempotent is False  # POST defaults to non-idempotent


def _one_capability(**fields: object) -> dict[str, object]:
    return {"tools": [{"name": "pay", "base_url": "http://127.0.0.1:9", "capabilities": [
        {"name": "send", "path": "/send", **fields}]}]}


def test_a_misspelt_layer_override_is_rejected_naming_file_tool_capability_and_key() -> None:
    with pytest.raises(CatalogError) as caught:
        Catalog.from_dict(_one_capability(layers={"validaton_feedback_enabled": False}),
                          source="tools.yaml")
    message = str(caught.value)
    assert message.startswith("tools.yaml: tool 'pay': capability 'pay.send': ")
    assert "unknown layer setting(s) 'validaton_feedback_enabled'" in message
    assert "did you mean 'validation_feedback_enabled'?" in message


@pytest.mark.parametrize("overrides", [
    {"max_validation_retries": "two"},
    {"validation_feedback_enabled": "false"},  # a quoted YAML value is not a boolean
    {"semantic_retry_max_attempts": -1},
])
def test_a_layer_override_of_the_wrong_type_is_rejected(overrides: dict[str, object]) -> None:
    with pytest.raises(CatalogError, match=rf"capability 'pay.send': invalid layer setting: {next(iter(overrides))}"):
        Catalog.from_dict(_one_capability(layers=overrides))


# --- honest round trips -------------------------------------------------------------------


def test_a_catalog_round_trips_through_to_dict_and_from_dict() -> None:
    from tests.orchestration._catalog_functions import add

    catalog = Catalog()
    catalog.add_function(add, tool="calc", capability="add", timeout_s=2,
                         input_schema={"type": "object", "properties": {"a": {"type": "number"}}})
    catalog.add_http(tool="fx", capability="convert", url="http://127.0.0.1:9/convert",
                     method="GET", retry={"max_attempts": 2}, max_calls_per_run=3)
    written = catalog.to_dict()
    calc = written["tools"][0]["capabilities"][0]
    assert calc["function"] == "tests.orchestration._catalog_functions:add" and "url" not in calc
    again = Catalog.from_dict(written)
    assert again.get("calc", "add").function is add
    assert again.to_dict() == written
    fx = again.get("fx", "convert")
    assert (fx.url, fx.method, fx.retry, fx.max_calls_per_run) == (
        "http://127.0.0.1:9/convert", "GET", {"max_attempts": 2}, 3)


def test_a_lambda_tool_cannot_be_written_as_a_url_or_at_all() -> None:
    catalog = Catalog()
    catalog.add_function(lambda: 1, tool="t", capability="anon")
    catalog.add_http(tool="h", capability="c", url="http://127.0.0.1:9/c")
    with pytest.raises(CatalogError, match=r"cannot write capability t\.anon: its Python "
                       r"function has no importable name"):
        catalog.to_dict()
    assert [t["name"] for t in catalog.to_dict(skip_unnamed_functions=True)["tools"]] == ["h"]


@pytest.mark.parametrize(("fields", "expected"), [
    ({"url": "python:<lambda>"}, "url must be an http:// or https:// URL, got 'python:<lambda>' "
                                 "(a Python tool is written as function: module:qualname)"),
    ({"url": "ftp://127.0.0.1/x"}, "url must be an http:// or https:// URL"),
    ({"function": "tests.orchestration._catalog_functions:nope"}, "cannot be imported"),
    ({"function": "tests.orchestration._catalog_functions:add", "url": "http://127.0.0.1:9"},
     "gives both 'function' and a URL"),
])
def test_what_is_not_a_callable_url_or_function_is_rejected_at_load(
    fields: dict[str, object], expected: str,
) -> None:
    data = {"tools": [{"name": "t", "capabilities": [{"name": "c", **fields}]}]}
    with pytest.raises(CatalogError, match=re.escape(expected)):
        Catalog.from_dict(data, source="tools.yaml")


def test_every_problem_of_a_catalog_is_reported_at_once(tmp_path: Path) -> None:
    path = tmp_path / "tools.yaml"
    path.write_text("""\
tools:
  - name: pay
    base_url: http://127.0.0.1:9
    capabilities:
      - name: send
        path: /send
        input_schema: {type: object, properties: {a: {type: nope}, b: {minimum: high}}}
        layers: {validaton_feedback_enabled: false}
      - name: refund
        path: /refund
        output_schema: {type: 12}
  - name: fx
    capabilities:
      - name: convert
        url: python:convert
      - name: rates
""")
    with pytest.raises(CatalogError) as caught:
        Catalog.from_file(path)
    problems = caught.value.problems
    where = f"{path}: tool"
    assert problems == [
        f"{where} 'pay': capability 'pay.send': invalid input_schema at $.properties.a.type: "
        + problems[0].split("$.properties.a.type: ", 1)[1],
        f"{where} 'pay': capability 'pay.send': invalid input_schema at $.properties.b.minimum: "
        + problems[1].split("$.properties.b.minimum: ", 1)[1],
        problems[2],
        f"{where} 'pay': capability 'pay.refund': invalid output_schema at $.type: "
        + problems[3].split("$.type: ", 1)[1],
        problems[4],
        f"{where} 'fx': capability 'rates' needs 'url', 'path' or 'function'",
    ]
    assert "unknown layer setting(s) 'validaton_feedback_enabled'" in problems[2]
    assert "capability 'fx.convert'" in problems[4] and "python:convert" in problems[4]
    assert str(caught.value).startswith(f"{path}: 6 problems in the catalog:\n  1. ")


def test_yaml_and_json_errors_name_the_file_line_and_column(tmp_path: Path) -> None:
    broken = tmp_path / "tools.yaml"
    broken.write_text("tools:\n  - name: x\n    capabilities: [\n")
    with pytest.raises(CatalogError) as caught:
        Catalog.from_file(broken)
    assert str(caught.value).startswith(f"{broken}:4:1: catalog is not valid yaml: ")
    assert "<unicode string>" not in str(caught.value)
    bad_json = tmp_path / "tools.json"
    bad_json.write_text('{"tools": [\n  {"name": "x",}\n]}')
    with pytest.raises(CatalogError, match=re.escape(f"{bad_json}:2:16: catalog is not valid json")):
        Catalog.from_file(bad_json)


def test_a_catalog_file_that_is_not_utf8_is_a_catalog_error(tmp_path: Path) -> None:
    """Before: a raw UnicodeDecodeError escaped Catalog.from_file (the file was read with
    read_text, and only OSError was caught)."""
    latin1 = tmp_path / "tools.yaml"
    latin1.write_bytes("tools:\n  - name: café\n".encode("latin-1"))
    with pytest.raises(CatalogError, match=re.escape(
            f"{latin1}: catalog is not UTF-8 text (invalid continuation byte at byte 20)")):
        Catalog.from_file(latin1)
