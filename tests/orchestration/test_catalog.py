"""Catalog loading: schema checks, retry overrides, tool-level defaults, bad files."""

from __future__ import annotations

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
