"""Configurations as env files: the file's ORCH_* values over the environment's, paths
relative to the file, JSON settings, secrets masked in what the report shows, and every
mistake refused naming the file and the variable."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestration import ConfigError
from orchestration.eval import config_from_env_file, parse_config_option


def test_an_env_file_lays_its_settings_over_the_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_REPLAN_MAX", "3")
    monkeypatch.setenv("ORCH_MAX_CONCURRENCY", "5")
    (tmp_path / "models").mkdir()
    env = tmp_path / "models" / "gpt.env"
    env.write_text("# a comment\nORCH_REPLAN_MAX=1\nORCH_LLM_SCRIPT=script.json\n"
                   "ORCH_LLM_API_KEY=sk-secret-123456\n"
                   'ORCH_LLM_PRICES={"m": {"input_per_1k": 0.5, "output_per_1k": 1.5}}\n')
    spec = config_from_env_file("gpt", env)
    config = spec.config
    assert config.replan_max == 1  # the file wins over the environment
    assert config.max_concurrency == 5  # what the file does not set comes from it
    assert config.llm_script == tmp_path / "models" / "script.json"
    price = config.price_of("m")
    assert price is not None and price.cost(1000, 1000) == 2.0
    assert spec.source == str(env)
    assert spec.settings == {
        "ORCH_REPLAN_MAX": 1, "ORCH_LLM_SCRIPT": str(tmp_path / "models" / "script.json"),
        "ORCH_LLM_API_KEY": "********",
        "ORCH_LLM_PRICES": {"m": {"input_per_1k": 0.5, "output_per_1k": 1.5}}}


@pytest.mark.parametrize(("text", "message"), [
    ("ORCH_REPLAN_MAXX=1\n", "ORCH_REPLAN_MAXX is not a dagwright setting; did you mean "
                             "ORCH_REPLAN_MAX?"),
    ("OPENAI_API_KEY=x\n", "OPENAI_API_KEY is not an ORCH_* setting (only those configure a run)"),
    ("ORCH_REPLAN_MAX\n", "ORCH_REPLAN_MAX has no value; write ORCH_REPLAN_MAX=VALUE"),
    ("ORCH_REPLAN_MAX=-1\n", "ORCH_REPLAN_MAX='-1' is not valid: Input should be greater than or "
                             "equal to 0"),
    ("ORCH_LLM_PRICES={nope\n", "ORCH_LLM_PRICES is not valid: it must be a JSON object"),
])
def test_a_mistake_in_an_env_file_is_refused_naming_it(tmp_path: Path, text: str,
                                                       message: str) -> None:
    env = tmp_path / "c.env"
    env.write_text(text)
    with pytest.raises(ConfigError) as caught:
        config_from_env_file("c", env)
    assert str(caught.value).startswith(f"{env}: ")
    assert message in str(caught.value)


def test_the_config_option_and_its_name() -> None:
    assert parse_config_option("on=a/b.env") == ("on", Path("a/b.env"))
    with pytest.raises(ConfigError, match="expected NAME=ENV_FILE"):
        parse_config_option("a/b.env")
    with pytest.raises(ConfigError, match="is not a file"):
        config_from_env_file("x", "/nonexistent.env")
    from orchestration.eval import EvalConfig

    with pytest.raises(ConfigError, match="configuration name 'a b' is not usable"):
        EvalConfig("a b")


def test_two_prompt_templates_compared_as_two_configurations(tmp_path: Path) -> None:
    """ORCH_PLANNER_TEMPLATE_DIR in a configuration's env file: the same model, asked with
    another system prompt, plans differently, and the eval says which prompt did better."""
    from orchestration import Catalog
    from orchestration.eval import Dataset, run_eval
    from planners.prompt import default_template

    catalog = Catalog()

    @catalog.tool("calc.double")
    def double(x: int) -> dict:
        """Twice x."""
        return {"value": 2 * x}

    templates = tmp_path / "strict"
    templates.mkdir()
    (templates / "system.txt").write_text(
        default_template("system") + "\nNUMBERS-AS-DIGITS: write every number as digits.\n")
    plan = '{{"steps": [{{"id": "d", "tool": "calc", "capability": "double", "params": {{"x": {x}}}}}]}}'
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"rules": [
        {"purpose": "plan", "prompt_contains": "NUMBERS-AS-DIGITS", "answer": plan.format(x="21")},
        {"purpose": "plan", "answer": plan.format(x='"twenty-one"')},
        {"purpose": "synthesis", "answer": "42"}]}))
    base = f"ORCH_LLM_PROVIDER=scripted\nORCH_LLM_SCRIPT={script}\nORCH_STORE_URL=memory://\n"
    (tmp_path / "default.env").write_text(base)
    (tmp_path / "strict.env").write_text(base + "ORCH_PLANNER_TEMPLATE_DIR=strict\n")
    dataset = Dataset.from_cases([{"id": "double", "query": "double twenty-one", "expect": {
        "outputs": [{"capability": "calc.double", "path": "value", "equals": 42}]}}])
    report = run_eval(dataset, [config_from_env_file(n, tmp_path / f"{n}.env")
                                for n in ("default", "strict")], catalog=catalog)
    assert report.config("strict").settings == {
        "ORCH_LLM_PROVIDER": "scripted", "ORCH_LLM_SCRIPT": str(script),
        "ORCH_STORE_URL": "memory://", "ORCH_PLANNER_TEMPLATE_DIR": str(templates)}
    assert (report.config("default").pass_rate, report.config("strict").pass_rate) == (0.0, 1.0)

    (templates / "sytem.txt").write_text("typo")
    with pytest.raises(ConfigError, match=r"ORCH_PLANNER_TEMPLATE_DIR=.*unknown planner "
                                          r"template\(s\) sytem"):
        run_eval(dataset, [config_from_env_file("strict", tmp_path / "strict.env")],
                 catalog=catalog)
