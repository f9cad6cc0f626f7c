"""Configuration: env parsing, masking, and docs kept in step with the code."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
from prometheus_client import CollectorRegistry

from orchestration import Catalog, ConfigError, Orchestrator, OrchestratorConfig
from orchestration.cli import main
from orchestration.llm.base import LLMRequest
from tests import ROOT


def _gen() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_config_docs", ROOT / "docs" / "gen_config_docs.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_and_example_env_list_every_setting() -> None:
    gen = _gen()
    assert (ROOT / "docs" / "configuration.md").read_text() == gen.render_markdown(), \
        "docs/configuration.md is stale: run python docs/gen_config_docs.py"
    assert (ROOT / "config" / "example.env").read_text() == gen.render_env(), \
        "config/example.env is stale: run python docs/gen_config_docs.py"


def test_env_variables_map_to_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_MAX_CONCURRENCY", "3")
    monkeypatch.setenv("ORCH_TYPE_COERCION_ENABLED", "false")
    monkeypatch.setenv("ORCH_VALIDATION_ERROR_PATTERNS", "bad thing, worse thing")
    config = OrchestratorConfig()
    assert config.max_concurrency == 3
    assert config.type_coercion_enabled is False
    assert config.validation_error_patterns == ["bad thing", "worse thing"]
    assert OrchestratorConfig(max_concurrency=5).max_concurrency == 5


def test_invalid_values_name_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_MAX_CONCURRENCY", "0")
    with pytest.raises(ConfigError, match=r"^ORCH_MAX_CONCURRENCY='0' is not valid: .*; "
                       r"allowed: an integer ≥ 1$"):
        OrchestratorConfig()


@pytest.mark.parametrize(("env", "expected"), [
    ({"ORCH_MAX_CONCURRENCY": "abc"},
     "ORCH_MAX_CONCURRENCY='abc' is not valid: Input should be a valid integer"),
    ({"ORCH_LLM_PROVIDER": "openia"},
     "ORCH_LLM_PROVIDER='openia' is not valid; allowed: one of openai, anthropic, scripted"
     " — did you mean 'openai'?"),
    ({"ORCH_LLM_STRUCTURED_OUTPUT": "tool"},
     "ORCH_LLM_STRUCTURED_OUTPUT='tool' is not valid; allowed: one of auto, json_schema, "
     "json_object, none"),
    ({"ORCH_RETRY_JITTER": "2"}, "allowed: a number ≥ 0 and ≤ 1"),
    ({"ORCH_TYPE_COERCION_ENABLED": "maybe"}, "allowed: true or false"),
    ({"ORCH_LLM_PRICES": "{not json"}, "ORCH_LLM_PRICES is not valid: it must be a JSON object"),
    ({"ORCH_LLM_PRICES": '{"gpt-x": {"input_per_1k": 1}}'},
     "ORCH_LLM_PRICES: gpt-x.output_per_1k: Field required"),
    ({"ORCH_MAX_COST_PER_RUN": "0.5"}, "ORCH_MAX_COST_PER_RUN needs a price table: set ORCH_LLM_PRICES"),
])
def test_a_bad_variable_is_a_config_error_naming_it_the_value_and_what_is_allowed(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], expected: str,
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as caught:
        OrchestratorConfig()
    assert expected in str(caught.value)
    assert caught.value.__cause__ is None and "pydantic" not in str(caught.value)


def test_every_bad_value_is_reported_at_once_and_secrets_are_not_echoed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ORCH_MAX_CONCURRENCY", "0")
    monkeypatch.setenv("ORCH_LOG_FORMAT", "xml")
    with pytest.raises(ConfigError) as caught:
        OrchestratorConfig(llm_api_key=12345678)  # type: ignore[arg-type]
    text = str(caught.value)
    assert text.startswith("invalid configuration:\n")
    assert "ORCH_MAX_CONCURRENCY='0'" in text and "ORCH_LOG_FORMAT='xml'" in text
    assert "llm_api_key='********' (argument of OrchestratorConfig)" in text
    assert "12345678" not in text


def test_an_unknown_orch_variable_is_warned_about_once_with_the_closest_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import warnings

    from orchestration.config import _WARNED
    from orchestration.errors import ConfigWarning

    monkeypatch.setenv("ORCH_MAX_CONCURENCY", "3")
    monkeypatch.setenv("ORCH_NOTHING_LIKE_IT", "1")
    _WARNED.discard("ORCH_MAX_CONCURENCY")
    _WARNED.discard("ORCH_NOTHING_LIKE_IT")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert OrchestratorConfig().max_concurrency == 8  # the misspelt value is not used
        OrchestratorConfig()
    messages = [str(w.message) for w in caught if issubclass(w.category, ConfigWarning)]
    assert messages == [
        "ORCH_MAX_CONCURENCY is not a dagwright setting and is ignored; "
        "did you mean ORCH_MAX_CONCURRENCY?",
        "ORCH_NOTHING_LIKE_IT is not a dagwright setting and is ignored; "
        "`dagwright config` lists every setting",
    ]


def test_structured_output_modes_that_do_nothing_for_the_provider_are_rejected() -> None:
    with pytest.raises(ConfigError, match="ORCH_LLM_STRUCTURED_OUTPUT=json_object is a mode of "
                       "OpenAI-compatible servers; with ORCH_LLM_PROVIDER=anthropic use auto"):
        Orchestrator(catalog=Catalog(), config=OrchestratorConfig(
            llm_provider="anthropic", llm_model="claude", llm_structured_output="json_object"))


def test_from_env_takes_a_catalog_object_or_file(monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    monkeypatch.delenv("ORCH_CATALOG", raising=False)
    monkeypatch.setenv("ORCH_LLM_PROVIDER", "scripted")
    script = tmp_path / "script.json"
    script.write_text("[]")
    monkeypatch.setenv("ORCH_LLM_SCRIPT", str(script))
    catalog = Catalog()
    catalog.add_function(lambda: 1, tool="t", capability="c")
    assert Orchestrator.from_env(catalog=catalog).catalog is catalog
    from_file = Orchestrator.from_env(catalog=ROOT / "config" / "catalog.example.yaml")
    assert from_file.catalog.has("currency", "convert")


def test_price_table_prices_models_and_a_default() -> None:
    config = OrchestratorConfig(llm_prices={
        "big": {"input_per_1k": 10, "output_per_1k": 30}, "*": {"input_per_1k": 1, "output_per_1k": 2}})
    big = config.price_of("big")
    assert big is not None and big.cost(1000, 500) == 25
    other = config.price_of("small")
    assert other is not None and other.cost(2000, 1000) == 4
    assert OrchestratorConfig().price_of("big") is None


def test_config_command_masks_secrets(monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("ORCH_LLM_API_KEY", "sk-very-secret-123")
    assert main(["config"]) == 0
    out = capsys.readouterr().out
    assert "sk-very-secret-123" not in out
    assert "ORCH_LLM_API_KEY=********" in out
    assert "ORCH_MAX_CONCURRENCY=8" in out


def test_missing_llm_settings_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="ORCH_LLM_MODEL"):
        Orchestrator(catalog=Catalog(), config=OrchestratorConfig(llm_provider="openai"))
    with pytest.raises(ConfigError, match="ORCH_LLM_BASE_URL"):
        Orchestrator(catalog=Catalog(),
                     config=OrchestratorConfig(llm_provider="openai", llm_model="m"))
    monkeypatch.delenv("ORCH_CATALOG", raising=False)
    with pytest.raises(ConfigError, match="ORCH_CATALOG"):
        Orchestrator.from_env()


# --- ORCH_LLM_SCRIPT naming a function ------------------------------------------------------
def scripted_by_purpose(request: LLMRequest) -> str | dict[str, object]:
    """A scripted model that answers by purpose (what a service's test double does)."""
    if request.purpose == "plan":
        return {"steps": [{"id": "a", "tool": "math", "capability": "add",
                           "params": {"a": 1, "b": 2}}]}
    return f"answered {request.purpose}"


def test_a_scripted_model_may_be_a_function_named_module_colon_name() -> None:
    config = OrchestratorConfig(
        llm_provider="scripted",
        llm_script="tests.orchestration.test_config:scripted_by_purpose")
    catalog = Catalog()
    catalog.add_function(lambda a, b: {"sum": a + b}, tool="math", capability="add",
                         input_schema={"type": "object", "properties": {
                             "a": {"type": "integer"}, "b": {"type": "integer"}}})
    result = Orchestrator(catalog, config=config.model_copy(update={"store_url": "memory://"}),
                          registry=CollectorRegistry()).run("add one and two")
    assert result.status == "succeeded", result.error
    assert result.steps["a"].output == {"sum": 3} and result.answer == "answered synthesis"

    with pytest.raises(ConfigError, match=r"ORCH_LLM_SCRIPT=tests\.nowhere:answer: cannot be imported"):
        Orchestrator(catalog, config=OrchestratorConfig(llm_provider="scripted",
                                                        llm_script="tests.nowhere:answer"))
