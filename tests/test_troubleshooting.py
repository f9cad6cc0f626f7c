"""docs/troubleshooting.md is built from the messages users actually get: each case below
makes dagwright produce a message, and the page must quote the same wording."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
from prometheus_client import CollectorRegistry

from orchestration import (
    Catalog,
    CatalogError,
    ConfigError,
    LLMRequest,
    LLMResponse,
    Orchestrator,
    OrchestratorConfig,
    ScriptedLLM,
    TokenUsage,
)
from orchestration.cli import EXIT_CODES
from tests import ROOT

PAGE = (ROOT / "docs" / "troubleshooting.md").read_text(encoding="utf-8")


def config_error(**env: str) -> Callable[[pytest.MonkeyPatch, Path], str]:
    def make(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        with pytest.raises(ConfigError) as caught:
            OrchestratorConfig()
        return str(caught.value)
    return make


def unknown_variable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    from orchestration.config import _WARNED

    monkeypatch.setenv("ORCH_MAX_CONCURENCY", "3")
    _WARNED.discard("ORCH_MAX_CONCURENCY")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        OrchestratorConfig()
    return str(caught[0].message)


def catalog_error(text: str, name: str = "tools.yaml") -> Callable[[pytest.MonkeyPatch, Path], str]:
    def make(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(CatalogError) as caught:
            Catalog.from_file(path)
        return str(caught.value).replace(str(tmp_path) + "/", "")
    return make


def token_budget(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    catalog = Catalog()
    catalog.add_function(lambda: 1, tool="t", capability="c")
    plan = '{"steps": [{"id": "a", "tool": "t", "capability": "c"}]}'

    def respond(request: LLMRequest) -> LLMResponse:
        return LLMResponse(content=plan, usage=TokenUsage(600, 100))

    result = Orchestrator(catalog, ScriptedLLM(respond), OrchestratorConfig(
        max_tokens_per_run=500), registry=CollectorRegistry()).run("q")
    return result.error or ""


def dataset_error(text: str) -> Callable[[pytest.MonkeyPatch, Path], str]:
    def make(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
        from orchestration.eval import Dataset, DatasetError

        path = tmp_path / "demo.jsonl"
        path.write_text(text)
        with pytest.raises(DatasetError) as caught:
            Dataset.from_file(path)
        return str(caught.value).replace(str(tmp_path) + "/", "")
    return make


def eval_env_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    from orchestration.eval import config_from_env_file

    path = tmp_path / "layers.env"
    path.write_text("ORCH_VALIDATON_FEEDBACK_ENABLED=false\n")
    with pytest.raises(ConfigError) as caught:
        config_from_env_file("layers", path)
    return str(caught.value).replace(str(tmp_path) + "/", "")


def missing_cassette(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    from orchestration.eval import Cassettes

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as caught:
        Cassettes("cassettes", "replay").book("layers-on")
    return str(caught.value)


CASES: dict[str, tuple[Callable[[pytest.MonkeyPatch, Path], str], str]] = {
    "bad integer": (config_error(ORCH_MAX_CONCURRENCY="abc"),
                    "ORCH_MAX_CONCURRENCY='abc' is not valid: Input should be a valid integer"),
    "literal": (config_error(ORCH_LLM_PROVIDER="openia"),
                "ORCH_LLM_PROVIDER='openia' is not valid; allowed: one of openai, anthropic, "
                "scripted — did you mean 'openai'?"),
    "tool mode": (config_error(ORCH_LLM_STRUCTURED_OUTPUT="tool"),
                  "ORCH_LLM_STRUCTURED_OUTPUT='tool' is not valid; allowed: one of auto, "
                  "json_schema, json_object, none"),
    "cost needs prices": (config_error(ORCH_MAX_COST_PER_RUN="1"),
                          "ORCH_MAX_COST_PER_RUN needs a price table: set ORCH_LLM_PRICES"),
    "unknown variable": (unknown_variable, "ORCH_MAX_CONCURENCY is not a dagwright setting and "
                                           "is ignored; did you mean ORCH_MAX_CONCURRENCY?"),
    "python url": (catalog_error("tools:\n  - name: fx\n    capabilities:\n      - name: convert\n"
                                 "        url: python:convert\n"),
                   "url must be an http:// or https:// URL, got 'python:convert' (a Python tool "
                   "is written as function: module:qualname)"),
    "yaml position": (catalog_error("tools:\n  - name: x\n    capabilities: [\n"),
                      "tools.yaml:4:1: catalog is not valid yaml: "),
    "eval dataset": (dataset_error('{"id": "a", "query": "q", "expect": {"calls": [{"capability": '
                                   '"weather.forecast", "params_schema": {"type": "objekt"}}]}}\n'),
                     "demo.jsonl:1 (case 'a'): expect.calls[0].params_schema: params_schema is "
                     "not a valid JSON Schema: "),
    "eval env file": (eval_env_file, "layers.env: ORCH_VALIDATON_FEEDBACK_ENABLED is not a "
                                     "dagwright setting; did you mean "
                                     "ORCH_VALIDATION_FEEDBACK_ENABLED?"),
    "eval cassette": (missing_cassette, "no cassette to replay configuration 'layers-on': "
                                        "cassettes/layers-on.json does not exist; record one first"),
    "token budget": (token_budget, "run stopped: the run's LLM token budget is spent: 700 of 500 "
                                   "tokens (ORCH_MAX_TOKENS_PER_RUN)"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_page_quotes_the_message_dagwright_gives(
    case: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    make, wording = CASES[case]
    message = make(monkeypatch, tmp_path)
    assert wording in message, f"dagwright no longer says {wording!r}: {message!r}"
    assert wording in PAGE, f"docs/troubleshooting.md does not quote {wording!r}"


def test_the_page_lists_every_exit_code() -> None:
    for code in EXIT_CODES:
        assert f"| {code} | " in PAGE, code


def test_the_page_covers_every_error_class_the_cli_can_print() -> None:
    """``main`` prints any :class:`DagwrightError` it catches: each kind is named on the page
    with what it means and what to do."""
    import inspect

    from orchestration import errors

    kinds = {cls.__name__ for module in (errors, *_cli_modules())
             for _, cls in inspect.getmembers(module, inspect.isclass)
             if issubclass(cls, errors.DagwrightError) and cls is not errors.DagwrightError}
    assert {"ApprovalError", "RunLeased", "RunNotFound", "StoreError", "AmbiguousRunId"} <= kinds
    missing = sorted(kind for kind in kinds if f"`{kind}`" not in PAGE)
    assert missing == [], f"docs/troubleshooting.md does not name {missing}"


def test_every_next_step_the_cli_points_to_here_has_its_section() -> None:
    import re

    anchors = {anchor for module in _cli_modules()
               for anchor in re.findall(r"docs/troubleshooting\.md#([\w-]+)",
                                        Path(str(module.__file__)).read_text())}
    headings = {re.sub(r"[^\w -]", "", h).strip().lower().replace(" ", "-")
                for h in re.findall(r"^## (.+)$", PAGE, re.M)}
    assert anchors and anchors <= headings, anchors - headings


def _cli_modules() -> list[ModuleType]:
    """Every module of the ``dagwright`` command (one per command group, and what they share)."""
    import importlib
    import pkgutil

    from orchestration import cli

    return [cli, *(importlib.import_module(info.name)
                   for info in pkgutil.iter_modules(cli.__path__, "orchestration.cli.")
                   if info.name != "orchestration.cli.__main__")]
