"""An eval pointed at a real model through ORCH_LLM_*: an OpenAI-compatible server on
127.0.0.1 (tests/llm_servers.py) streams the plan and answers; the eval records it —
a 429 and its retry included —, prices it with ORCH_LLM_PRICES, and replays it with the
server stopped. The LLM judge is a model named by an env file too."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from orchestration import Catalog
from orchestration.cli import main
from orchestration.eval import Cassettes, Dataset, config_from_env_file, run_eval
from tests import ROOT
from tests.llm_servers import FakeOpenAIServer

PLAN = {"steps": [{"id": "d", "tool": "calc", "capability": "double", "params": {"x": "21"}}]}


def _catalog() -> Catalog:
    catalog = Catalog()

    @catalog.tool("calc.double")
    def double(x: int) -> dict:
        """Twice x."""
        return {"value": 2 * x}

    return catalog


def _env(tmp_path: Path, base_url: str) -> Path:
    env = tmp_path / "gpt.env"
    env.write_text(f"ORCH_LLM_PROVIDER=openai\nORCH_LLM_BASE_URL={base_url}\n"
                   "ORCH_LLM_MODEL=gpt-test\n"
                   'ORCH_LLM_PRICES={"gpt-test": {"input_per_1k": 1.0, "output_per_1k": 2.0}}\n'
                   "ORCH_RETRY_BASE_DELAY_S=0.01\n")
    return env


def test_a_real_model_is_recorded_priced_and_replayed_without_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_LLM_API_KEY", "sk-test-key-123456")
    dataset = Dataset.from_cases([{"id": "double", "query": "double 21", "expect": {
        "calls": [{"capability": "calc.double", "params": {"x": 21}}],
        "outputs": [{"capability": "calc.double", "path": "value", "equals": 42}],
        "answer": {"contains": "42"}}}])
    with FakeOpenAIServer(api_key="sk-test-key-123456") as server:
        server.error(429, "slow down", headers={"Retry-After": "0"})
        text = json.dumps(PLAN)
        server.stream_answer([text[:20], text[20:]], prompt_tokens=1000, completion_tokens=500)
        server.answer("21 doubled is 42.", prompt_tokens=100, completion_tokens=50)
        env = _env(tmp_path, server.base_url)
        spec = config_from_env_file("gpt", env)
        recorded = run_eval(dataset, [spec], catalog=_catalog(),
                            cassettes=Cassettes(tmp_path / "cassettes", "record"))
        assert len(server.requests) == 3
    result = recorded.result("gpt", "double")
    assert result.outcome == "passed", result.why()
    assert result.attribution is not None
    assert [f.recovered_by for f in result.attribution.faults] == ["coercion"]  # "21" → 21
    planning = result.attribution.spend["planning"]
    assert (planning.calls, planning.input_tokens, planning.cost) == (1, 1000, pytest.approx(2.0))
    cost = recorded.config("gpt").llm.cost
    assert cost == pytest.approx(2.0 + 0.2)
    cassette = (tmp_path / "cassettes" / "gpt.json").read_text()
    assert '"kind": "rate_limit"' in cassette  # the 429 is in the track, before the plan
    assert "sk-test-key-123456" not in cassette

    # the server is gone; the replay is the same run, at the same price, with no model
    replayed = run_eval(dataset, [config_from_env_file("gpt", env)], catalog=_catalog(),
                        cassettes=Cassettes(tmp_path / "cassettes", "replay"))
    again = replayed.result("gpt", "double")
    assert again.outcome == "passed" and again.error is None
    assert replayed.config("gpt").llm.cost == pytest.approx(cost)
    assert again.attribution is not None and again.attribution.spend == result.attribution.spend


def test_the_judge_is_a_model_an_env_file_names(tmp_path: Path) -> None:
    example = ROOT / "config" / "eval"
    with FakeOpenAIServer() as judge:
        judge.answer(json.dumps({"pass": False, "reason": "it names no temperatures"}))
        env = tmp_path / "judge.env"
        env.write_text(f"ORCH_LLM_PROVIDER=openai\nORCH_LLM_BASE_URL={judge.base_url}\n"
                       "ORCH_LLM_MODEL=judge\n")
        out = io.StringIO()
        code = main(["eval", str(example / "demo.jsonl"),
                     "--config", f"layers-on={example / 'layers-on.env'}",
                     "--replay", str(example / "cassettes"), "--judge", str(env),
                     "--json", "-q"], out=out)
        [request] = judge.requests
    assert code == 0
    report = json.loads(out.getvalue())
    summary = report["configs"][0]
    assert summary["passed"] == 10  # the judge's "no" is counted apart
    assert summary["judge"] == {"passed": 0, "failed": 1, "no_verdict": 0}
    tokyo = next(r for r in report["results"] if r["case"] == "tokyo-weather")
    assert tokyo["outcome"] == "passed"
    assert tokyo["judge"]["passed"] is False
    assert tokyo["judge"]["detail"] == "it names no temperatures"
    assert "The answer gives the weather in Tokyo" in json.dumps(request.body)
