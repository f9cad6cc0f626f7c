"""Attribution of the layers the example cannot show without injected faults (resilience,
the transient override), cassettes that replay those faults without the tools, and a
replay that asks something not recorded: it fails clearly, naming the key, and reaches
nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestration import Catalog, ConfigError, Orchestrator, OrchestratorConfig, ScriptedLLM
from orchestration.demo.tools import DemoTools, RateLimited, ServiceUnavailable, start_demo_tools
from orchestration.eval import (
    CASSETTE_MISS,
    Cassettes,
    Dataset,
    EvalConfig,
    run_eval,
)
from orchestration.eval._cassette import CassetteTransport
from orchestration.llm.scripted import ScriptRule, answer_by_rules

FAST = OrchestratorConfig(retry_base_delay_s=0.01, store_url="memory://")


def _quote(symbol: str) -> dict:
    return {"steps": [{"id": "q", "tool": "stocks", "capability": "quote",
                       "params": {"symbol": symbol}}]}


TRANSIENT = {"should_retry": False, "is_transient_error": True, "corrected_parameters": {},
             "analysis": "the service timed out; the same call will do"}


def _llm() -> ScriptedLLM:
    return ScriptedLLM(answer_by_rules([
        ScriptRule(_quote("NVDA"), "plan", ("Nvidia",)),
        ScriptRule(_quote("AAPL"), "plan", ("Apple",)),
        ScriptRule(TRANSIENT, "semantic_retry"),
        ScriptRule("done", "synthesis"),
    ]))


def _dataset(*names: str) -> Dataset:
    cases = {
        "nvidia": {"id": "nvidia", "query": "What is Nvidia trading at?",
                   "expect": {"calls": [{"capability": "stocks.quote", "params": {"symbol": "NVDA"}}]}},
        "apple": {"id": "apple", "query": "What is Apple trading at?",
                  "expect": {"outputs": [{"capability": "stocks.quote", "path": "price",
                                          "equals": 227.52}]}},
    }
    return Dataset.from_cases([cases[n] for n in names], name="faults")


def test_resilience_and_the_transient_override_are_named_and_replayed_without_the_tools(
        tmp_path: Path) -> None:
    cassettes = tmp_path / "cassettes"
    with start_demo_tools() as tools:
        catalog = Catalog.from_dict(tools.catalog_dict())
        # a 429, then (on the retry) a 503 the tool says is not retryable
        tools["stocks"].inject("/quote", RateLimited(0.05), ServiceUnavailable(retryable=False))
        recorded = run_eval(_dataset("apple"), [EvalConfig("default", FAST, llm=_llm())],
                            catalog=catalog, cassettes=Cassettes(cassettes, "record"))
    apple = recorded.result("default", "apple")
    assert apple.outcome == "passed"
    assert apple.attribution is not None
    assert [(f.attempt, f.label, f.category, f.recovered_by) for f in apple.attribution.faults] == [
        (1, "envelope/RATE_LIMITED", "RATE_LIMIT", "resilience"),
        (2, "envelope/REQUEST_TIMEOUT", "SERVICE_ERROR", "transient_override")]
    summary = recorded.config("default")
    assert summary.layer("resilience").recovered == 1
    assert summary.layer("transient_override").recovered == 1
    assert summary.spend["semantic_retry"].calls == 1  # the override's LLM call: layer 4's

    # the tools are gone: the 429, the 503 and the answer come from the cassette
    replayed = run_eval(_dataset("apple"), [EvalConfig("default", FAST)], catalog=catalog,
                        cassettes=Cassettes(cassettes, "replay"))
    again = replayed.result("default", "apple")
    assert again.outcome == "passed"
    assert again.attribution is not None
    assert again.attribution.recovering_layers() == ["transient_override", "resilience"]


def test_a_replay_that_asks_something_not_recorded_fails_naming_the_key(
        tmp_path: Path, demo_tools: DemoTools) -> None:
    catalog = Catalog.from_dict(demo_tools.catalog_dict())
    run_eval(_dataset("apple"), [EvalConfig("default", FAST, llm=_llm())], catalog=catalog,
             cassettes=Cassettes(tmp_path, "record"))
    sent = len(demo_tools["stocks"].requests)
    # the model now plans another symbol: that quote was never recorded
    changed = ScriptedLLM(answer_by_rules([ScriptRule(_quote("MSFT"), "plan"),
                                           ScriptRule("done", "synthesis")]))
    report = run_eval(_dataset("apple"), [EvalConfig("default", FAST, llm=changed)],
                      catalog=catalog, cassettes=Cassettes(tmp_path, "replay", scope=["tools"]))
    result = report.result("default", "apple")
    assert result.outcome == "error" and report.config("default").errors == 1
    assert result.error is not None
    assert result.error.startswith("replay: stocks.quote {\"symbol\": \"MSFT\"} (key stocks.quote:")
    assert "this request was not recorded" in result.error and "run apple#0" in result.error
    assert len(demo_tools["stocks"].requests) == sent  # nothing reached the tool
    step = report.result("default", "apple").attribution
    assert step is not None and step.faults[0].code == CASSETTE_MISS

    # an LLM request not recorded: the plan's prompt changes with the query
    other = Dataset.from_cases([{"id": "apple", "query": "What is Apple trading at now?"}])
    report = run_eval(other, [EvalConfig("default", FAST)], catalog=catalog,
                      cassettes=Cassettes(tmp_path, "replay"))
    result = report.result("default", "apple")
    assert result.outcome == "error" and result.status == "failed"
    assert result.error is not None and "a 'plan' LLM request (key plan:" in result.error


def test_a_case_without_a_recording_and_a_missing_cassette(tmp_path: Path,
                                                           demo_tools: DemoTools) -> None:
    catalog = Catalog.from_dict(demo_tools.catalog_dict())
    run_eval(_dataset("apple"), [EvalConfig("default", FAST, llm=_llm())], catalog=catalog,
             cassettes=Cassettes(tmp_path, "record"))
    report = run_eval(_dataset("apple", "nvidia"), [EvalConfig("default", FAST)], catalog=catalog,
                      cassettes=Cassettes(tmp_path, "replay"))
    assert report.result("default", "apple").outcome == "passed"
    missing = report.result("default", "nvidia")
    assert missing.outcome == "error"
    assert "the cassette has no recording of this run at all" in (missing.error or "")
    with pytest.raises(ConfigError, match=r"no cassette to replay configuration 'other'"):
        run_eval(_dataset("apple"), [EvalConfig("other", FAST)], catalog=catalog,
                 cassettes=Cassettes(tmp_path, "replay"))


def test_cassettes_mask_the_catalogs_secrets(tmp_path: Path, demo_tools: DemoTools) -> None:
    data = demo_tools.catalog_dict()
    secret = "s3cr3t-token-9f8e7d"
    for tool in data["tools"]:
        tool["headers"] = {"X-Api-Key": secret}
    catalog = Catalog.from_dict(data)
    echo = ScriptedLLM(answer_by_rules([
        ScriptRule(_quote("AAPL"), "plan"),
        ScriptRule(f"the key is {secret}", "synthesis")]))
    run_eval(_dataset("apple"), [EvalConfig("default", FAST, llm=echo)], catalog=catalog,
             cassettes=Cassettes(tmp_path, "record"))
    text = (tmp_path / "default.json").read_text()
    assert secret not in text and "the key is [REDACTED]" in text
    assert json.loads(text)["tracks"]["apple#0"]["tools"][0]["data"]["price"] == 227.52


def test_a_transport_layer_is_refused_on_temporal() -> None:
    with pytest.raises(ConfigError, match="transport_layer= wraps this process's tool transport"):
        Orchestrator(Catalog(), ScriptedLLM([]), OrchestratorConfig(backend="temporal"),
                     transport_layer=CassetteTransport)
