"""A scripted model that answers by what it is asked (ORCH_LLM_SCRIPT with rules), so runs
that go on at the same time each get their own plan and answers."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from orchestration import Catalog, ConfigError, Orchestrator, OrchestratorConfig
from orchestration.llm.scripted import ScriptedLLM, ScriptRule, answer_by_rules


def _catalog() -> Catalog:
    catalog = Catalog()

    @catalog.tool("calc.double")
    def double(x: int) -> dict:
        """Twice x."""
        return {"value": 2 * x}

    return catalog


def _plan(x: int) -> dict:
    return {"steps": [{"id": "d", "tool": "calc", "capability": "double", "params": {"x": x}}]}


def test_rules_from_orch_llm_script_answer_concurrent_runs_by_their_query(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"rules": [
        {"purpose": "plan", "prompt_contains": "double three", "answer": _plan(3)},
        {"purpose": "plan", "prompt_contains": ["double", "four"], "answer": _plan(4)},
        {"purpose": "synthesis", "prompt_contains": "double three", "answer": "six"},
        {"purpose": "synthesis", "answer": "eight", "note": "any other answer request"},
    ]}))
    config = OrchestratorConfig(llm_provider="scripted", llm_script=script,
                                store_url="memory://")
    orch = Orchestrator.from_env(config=config, catalog=_catalog())

    async def both() -> list:
        return list(await asyncio.gather(orch.arun("please double four"),
                                         orch.arun("double three")))

    four, three = asyncio.run(both())
    assert (four.steps["d"].output, four.answer) == ({"value": 8}, "eight")
    assert (three.steps["d"].output, three.answer) == ({"value": 6}, "six")


def test_a_request_no_rule_matches_fails_naming_its_purpose() -> None:
    llm = ScriptedLLM(answer_by_rules([ScriptRule(_plan(1), "plan", ("double zebra",))]))
    result = Orchestrator(_catalog(), llm, OrchestratorConfig(store_url="memory://",
                                                              planner_max_retries=0)).run("two")
    assert result.status == "failed"
    assert "none of its 1 rules matches this 'plan' request" in (result.error or "")


@pytest.mark.parametrize(("content", "message"), [
    ({"rule": []}, "expected {\"rules\": [...]}"),
    ({"rules": [{"purpose": "plan"}]}, "rules[0]: each rule is an object with an \"answer\""),
    ({"rules": [{"answer": 1, "prompt": "x"}]}, "rules[0]: unknown key(s) prompt"),
    ({"rules": [{"answer": 1, "prompt_contains": [3]}]},
     "rules[0].prompt_contains: expected a text or a list of texts"),
])
def test_a_malformed_rules_script_is_a_config_error_naming_the_rule(
        tmp_path: Path, content: object, message: str) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps(content))
    config = OrchestratorConfig(llm_provider="scripted", llm_script=script)
    with pytest.raises(ConfigError) as raised:
        Orchestrator.from_env(config=config, catalog=_catalog())
    assert str(raised.value).startswith(f"ORCH_LLM_SCRIPT={script}: ")
    assert message in str(raised.value)
