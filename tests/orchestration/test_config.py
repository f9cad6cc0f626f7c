"""Configuration: env parsing, masking, and docs kept in step with the code."""

from __future__ import annotations

import importlib.util
from types import ModuleType

import pytest

from orchestration import Catalog, ConfigError, Orchestrator, OrchestratorConfig
from orchestration.cli import main
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
    with pytest.raises(ValueError, match="max_concurrency"):
        OrchestratorConfig()


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
