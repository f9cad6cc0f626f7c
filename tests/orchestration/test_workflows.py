"""Saved workflows: loaded and checked against the catalog, run with inputs and no
planning call, per-step settings from the file, answers and outputs — through the
public API, the CLI in a real process, and ``dagwright serve`` over HTTP."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client import CollectorRegistry

from orchestration import Approval, Catalog, InvalidInput, Orchestrator, OrchestratorConfig, ScriptedLLM
from orchestration.demo.tools import DemoTools, Hang, ServiceUnavailable
from orchestration.errors import WorkflowError
from orchestration.events import RunEvent
from orchestration.workflows import Workflow, WorkflowLibrary, draft_workflow, read_workflow
from tests import ROOT
from tests.llm_servers import FakeOpenAIServer
from tests.orchestration.server.live import live_server

ISSUE_EXAMPLE = """\
name: weekly-report
inputs:
  team: {type: string}
  weeks: {type: integer, minimum: 1, maximum: 12}
steps:
  - id: stats
    tool: tracker
    capability: team_stats
    params: {team: "{{inputs.team}}", weeks: "{{inputs.weeks}}"}
outputs:
  summary: "{{stats.summary}}"
"""
TEAM_STATS_SCHEMA = {
    "type": "object",
    "properties": {"team": {"type": "string", "minLength": 1},
                   "weeks": {"type": "integer", "minimum": 1, "maximum": 52}},
    "required": ["team", "weeks"], "additionalProperties": False,
}
CALLS: list[dict[str, Any]] = []


def team_stats(team: str, weeks: int) -> dict[str, Any]:
    """Closed issues of a team over the last weeks."""
    CALLS.append({"team": team, "weeks": weeks})
    return {"summary": f"{team} closed {weeks * 7} issues in {weeks} weeks",
            "closed": weeks * 7}


def tracker_catalog(schema: dict[str, Any] | None = None) -> Catalog:
    catalog = Catalog()
    catalog.add_function(team_stats, tool="tracker", capability="team_stats",
                         input_schema=schema or TEAM_STATS_SCHEMA,
                         output_schema={"type": "object", "properties": {
                             "summary": {"type": "string"}, "closed": {"type": "integer"}}})
    return catalog


def orchestrator(catalog: Catalog, registry: CollectorRegistry, llm: Any = None,
                 **config: Any) -> Orchestrator:
    settings = {"synthesis_strategy": "raw", **config}
    return Orchestrator(catalog, llm or ScriptedLLM([]), OrchestratorConfig(**settings),
                        registry=registry)


@pytest.fixture
def example_file(tmp_path: Path) -> Path:
    path = tmp_path / "workflows" / "weekly-report.yaml"
    path.parent.mkdir()
    path.write_text(ISSUE_EXAMPLE)
    CALLS.clear()
    return path


# --- the file format and its checks ---------------------------------------------------------
def test_the_example_of_the_issue_loads_as_written_and_runs_without_an_llm(
    example_file: Path, registry: CollectorRegistry,
) -> None:
    llm = ScriptedLLM([])
    orch = orchestrator(tracker_catalog(), registry, llm)
    workflow = orch.load_workflow(example_file)
    assert (workflow.name, list(workflow.inputs), [s.id for s in workflow.steps]) == (
        "weekly-report", ["team", "weeks"], ["stats"])
    events: list[RunEvent] = []
    result = orch.run_workflow(example_file, {"team": "Platform", "weeks": "3"},
                               on_event=events.append)
    assert result.status == "succeeded", result.error
    assert CALLS == [{"team": "Platform", "weeks": 3}]  # "3" coerced by layer 2
    assert result.plan_source == "workflow"
    assert result.workflow is not None
    assert result.workflow.inputs == {"team": "Platform", "weeks": 3}
    assert result.workflow.outputs == {"summary": "Platform closed 21 issues in 3 weeks"}
    assert json.loads(result.answer or "") == result.workflow.outputs  # raw: the outputs
    assert llm.requests == [] and result.usage.llm_calls == 0
    assert next(e for e in events if e.type == "plan_ready").data["source"] == "workflow"
    assert result.workflow.revision == workflow.revision
    # the run is in the store like any run, found by its query
    stored = orch.get_run(result.run_id)
    assert stored is not None and stored.workflow == result.workflow


def test_workflows_are_found_by_name_beside_the_catalog_and_in_orch_workflows_dir(
    example_file: Path, tmp_path: Path, registry: CollectorRegistry,
) -> None:
    orch = orchestrator(tracker_catalog(), registry, workflows_dir=example_file.parent)
    result = orch.run_workflow("weekly-report", {"team": "Ops", "weeks": 1})
    assert result.workflow is not None and result.workflow.path == str(example_file)
    # beside the catalog file when ORCH_WORKFLOWS_DIR is unset
    catalog_file = tmp_path / "catalog.yaml"
    catalog_file.write_text("tools: []\n")
    library = WorkflowLibrary.for_config(OrchestratorConfig(), Catalog.from_file(catalog_file))
    assert library.directory == tmp_path / "workflows"
    assert library.find("weekly-report") == example_file
    with pytest.raises(WorkflowError, match=r"no workflow 'nope' in .*workflows there: weekly-report"):
        library.find("nope")


def test_a_workflow_that_no_longer_fits_the_catalog_is_refused_at_load(
    example_file: Path, registry: CollectorRegistry,
) -> None:
    changed = {**TEAM_STATS_SCHEMA, "properties": {"team": {"type": "string", "maxLength": 3},
                                                   "window": {"type": "integer"}},
               "required": ["team", "window"]}
    orch = orchestrator(tracker_catalog(changed), registry)
    with pytest.raises(WorkflowError) as caught:
        orch.load_workflow(example_file)
    message = str(caught.value)
    assert f"the catalog at revision {orch.catalog.fingerprint}" in message
    assert caught.value.problems == [
        "step 'stats': param 'weeks': the capability tracker.team_stats does not take it "
        "(it takes: team, window)",
        "step 'stats': the capability tracker.team_stats requires 'window', which the step "
        "does not give",
    ]
    gone = Catalog()
    gone.add_function(team_stats, tool="tracker", capability="other_stats")
    with pytest.raises(WorkflowError) as caught:
        orchestrator(gone, CollectorRegistry()).run_workflow(example_file, {"team": "a", "weeks": 1})
    assert "tool 'tracker' has no capability 'team_stats' (it has: other_stats)" in str(caught.value)
    assert gone.fingerprint in str(caught.value)
    assert CALLS == []


def test_every_problem_of_a_workflow_file_is_reported_at_once(
    tmp_path: Path, registry: CollectorRegistry,
) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump({
        "name": "broken", "query": "stats of {{stats.team}}",
        "inputs": {"team": {"type": "strin"}},
        "steps": [{"id": "inputs", "tool": "tracker", "capability": "team_stats",
                   "params": {"team": "{{inputs.teem}}", "weeks": "many"}},
                  {"id": "b", "tool": "tracker", "capability": "team_stats",
                   "params": {"team": "x", "weeks": 1}, "depends_on": ["zzz"]}],
        "outputs": {"total": "{{nowhere.x}}", "closed": "{{b.closd}}"},
        "answer": {"strategy": "template", "template": "{% if %}"},
    }))
    with pytest.raises(WorkflowError) as caught:
        orchestrator(tracker_catalog(), registry).load_workflow(path)
    text = "\n".join(caught.value.problems)
    for expected in ("input 'team': invalid schema", "step 'inputs': the name is taken",
                     "{{inputs.teem}} names no input", "query: it may use only inputs",
                     "{{nowhere.x}} names no step", "depends_on names unknown step 'zzz'",
                     "param $.weeks: 'many' is not of type 'integer'", "answer.template: line 1",
                     "outputs.closed: {{b.closd}}"):
        assert expected in text, (expected, text)


def test_a_misspelt_key_and_bad_yaml_are_reported_with_where(tmp_path: Path) -> None:
    typo = tmp_path / "typo.yaml"
    typo.write_text(ISSUE_EXAMPLE.replace("outputs:", "outptus:"))
    with pytest.raises(WorkflowError, match="outptus"):
        read_workflow(typo)
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nsteps: [\n")
    with pytest.raises(WorkflowError, match=r"bad.yaml:3:1: workflow is not valid yaml"):
        read_workflow(bad)


# --- inputs ------------------------------------------------------------------------------------
def test_inputs_that_do_not_fit_are_refused_before_anything_is_recorded(
    example_file: Path, registry: CollectorRegistry,
) -> None:
    orch = orchestrator(tracker_catalog(), registry)
    with pytest.raises(InvalidInput) as caught:
        orch.run_workflow(example_file, {"team": "", "weeks": 13, "colour": "red"})
    text = str(caught.value)
    assert "input 'colour' is not an input of the workflow (inputs: team, weeks)" in text
    assert "input 'weeks': 13 is greater than the maximum of 12" in text
    with pytest.raises(InvalidInput, match=r"input 'weeks' is missing \(it has no default\)"):
        orch.run_workflow(example_file, {"team": "Ops"})
    with pytest.raises(InvalidInput, match="it would read as a reference"):
        orch.run_workflow(example_file, {"team": "{{stats.secret}}", "weeks": 1})
    # the input fits its own schema but not the tool's (minLength 1): refused before sending
    with pytest.raises(InvalidInput, match=r"step 'stats' param \$\.team: '' should be non-empty"):
        orch.run_workflow(example_file, {"team": "", "weeks": 2})
    assert CALLS == [] and orch.list_runs() == []


# --- saved from a planned run, run again with other inputs ---------------------------------------
WEATHER_PLAN = {"steps": [
    {"id": "geo", "tool": "weather", "capability": "geocode", "params": {"location": "Paris"}},
    {"id": "fc", "tool": "weather", "capability": "forecast",
     "params": {"lat": "{{geo.lat}}", "lon": "{{geo.lon}}", "days": 2, "units": "celsius"}},
]}


def _demo_catalog_file(tmp_path: Path, demo: DemoTools) -> Path:
    path = tmp_path / "catalog.yaml"
    path.write_text(yaml.safe_dump(demo.catalog_dict()))
    return path


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestration", *args], env=env,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def test_a_planned_run_saved_as_a_workflow_runs_again_with_other_inputs_and_no_planning_call(
    openai_server: FakeOpenAIServer, demo_tools: DemoTools, tmp_path: Path,
) -> None:
    catalog = _demo_catalog_file(tmp_path, demo_tools)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_")}
    env.update({"ORCH_CATALOG": str(catalog), "ORCH_LLM_PROVIDER": "openai",
                "ORCH_LLM_BASE_URL": openai_server.base_url, "ORCH_LLM_MODEL": "test-model",
                "ORCH_STORE_URL": f"sqlite:///{tmp_path}/runs.db", "PYTHONPATH": str(ROOT)})
    openai_server.answer(json.dumps(WEATHER_PLAN))
    saved = tmp_path / "workflows" / "paris-weather.yaml"
    made = _cli(["plan", "Weather in Paris for 2 days?", "--save", str(saved), "--yes"], env)
    assert made.returncode == 0, made.stderr
    assert len(openai_server.requests) == 1
    assert "input location: string (was 'Paris', in geo.location)" in made.stdout
    assert "input days: integer (was 2, in fc.days)" in made.stdout
    data = yaml.safe_load(saved.read_text())
    assert data["query"] == "Weather in {{inputs.location}} for {{inputs.days}} days?"
    assert data["inputs"]["days"] == {"type": "integer", "minimum": 1, "maximum": 7,
                                      "examples": [2]}
    assert data["steps"][0]["params"] == {"location": "{{inputs.location}}"}
    assert data["steps"][1]["params"]["units"] == "celsius"  # not in the query: kept
    assert data["outputs"] == {"fc": "{{fc}}"}
    assert data["catalog"] == Catalog.from_file(catalog).fingerprint

    # again, with other inputs, from the CLI: no LLM call at all (raw answer)
    ran = _cli(["run", "--workflow", "paris-weather", "--input", "location=Berlin",
                "--input", "days=3", "--synthesis", "raw", "--json",
                "--context", "tenant=acme", "--session", "trip"], env)
    assert ran.returncode == 0, ran.stderr
    result = json.loads(ran.stdout)
    assert len(openai_server.requests) == 1  # still only the planning call of `plan --save`
    assert result["plan_source"] == "workflow" and result["usage"]["llm_calls"] == 0
    assert result["query"] == "Weather in Berlin for 3 days?"
    assert (result["context"], result["session"], result["session_run"]) == (
        {"tenant": "acme"}, "trip", 1)
    assert [(s["id"], s["tool"], s["capability"]) for s in result["plan"]["steps"]] == [
        (s["id"], s["tool"], s["capability"]) for s in WEATHER_PLAN["steps"]]
    assert [r.body for r in demo_tools["weather"].requests_to("/geocode")] == [
        {"location": "Berlin"}]
    assert len(result["workflow"]["outputs"]["fc"]["daily"]) == 3
    # an input it does not declare: refused, and the next step says where they are listed
    wrong = _cli(["run", "--workflow", "paris-weather", "--input", "colour=red"], env)
    assert wrong.returncode == 2
    assert "input 'colour' is not an input of the workflow (inputs: location, days)" \
        in wrong.stderr
    assert "next: correct what it names (a workflow's inputs: `dagwright workflows` lists " \
        "them); nothing was recorded or sent" in wrong.stderr

    # and through the Python API
    orch = Orchestrator(Catalog.from_file(catalog), ScriptedLLM([]), OrchestratorConfig(
        synthesis_enabled=False), registry=CollectorRegistry())
    again = orch.run_workflow(saved, {"location": "Tokyo", "days": 1})
    assert again.status == "succeeded" and again.usage.llm_calls == 0
    assert again.steps["geo"].output["name"] == "Tokyo"


def test_lifted_inputs_can_be_renamed_or_refused(demo_catalog: Catalog) -> None:
    query = "Weather in Paris for 2 days?"
    draft = draft_workflow(query, validated(demo_catalog), demo_catalog, name="w")
    assert [(lift.name, lift.value, lift.uses) for lift in draft.lifts] == [
        ("location", "Paris", [("geo", "location")]), ("days", 2, [("fc", "days")])]
    draft.lifts[0].name = "city"
    draft.lifts[1].accepted = False
    workflow = draft.to_workflow()
    assert list(workflow.inputs) == ["city"]
    assert workflow.query == "Weather in {{inputs.city}} for 2 days?"
    assert workflow.steps[1].params["days"] == 2


def validated(catalog: Catalog) -> Any:
    from orchestration.plan import Plan, validate_plan
    return validate_plan(Plan.model_validate(WEATHER_PLAN), catalog)


# --- per-step settings from the file -------------------------------------------------------------
def weather_workflow(tmp_path: Path, **fc: Any) -> Path:
    path = tmp_path / "forecast.yaml"
    path.write_text(yaml.safe_dump({
        "name": "forecast", "query": "forecast for {{inputs.city}}",
        "inputs": {"city": {"type": "string"}},
        "steps": [{"id": "geo", "tool": "weather", "capability": "geocode",
                   "params": {"location": "{{inputs.city}}"}},
                  {"id": "fc", "tool": "weather", "capability": "forecast",
                   "params": {"lat": "{{geo.lat}}", "lon": "{{geo.lon}}", "days": 1}, **fc}],
        "outputs": {"today": "{{fc.daily[0].condition}}", "country": "{{geo.country}}"},
        "answer": {"strategy": "template",
                   "template": "{{ inputs.city }} ({{ outputs.country }}): {{ outputs.today }}"},
    }))
    return path


def test_a_step_that_requires_approval_in_the_file_waits_for_a_person(
    demo_tools: DemoTools, demo_catalog: Catalog, registry: CollectorRegistry, tmp_path: Path,
) -> None:
    orch = orchestrator(demo_catalog, registry)
    paused = orch.run_workflow(weather_workflow(tmp_path, requires_approval=True),
                               {"city": "Paris"})
    assert paused.status == "awaiting_approval"
    assert [p.step_id for p in paused.pending_approvals] == ["fc"]
    assert demo_tools["weather"].requests_to("/forecast") == []
    done = orch.resume(paused.run_id, approvals={"fc": Approval(approved=True)})
    assert done.status == "succeeded"
    assert done.answer == "Paris (FR): " + done.steps["fc"].output["daily"][0]["condition"]
    assert done.answer_strategy == "template"


def test_a_step_timeout_and_retry_from_the_file_apply_to_its_calls(
    demo_tools: DemoTools, demo_catalog: Catalog, registry: CollectorRegistry, tmp_path: Path,
) -> None:
    orch = orchestrator(demo_catalog, registry, retry_base_delay_s=0)
    demo_tools["weather"].inject("/forecast", Hang(5.0))
    slow = orch.run_workflow(weather_workflow(tmp_path, timeout_s=0.3, retry={"max_attempts": 1}),
                             {"city": "Paris"})
    fc = slow.steps["fc"]
    assert fc.status == "failed" and fc.error is not None and fc.error.code == "READ_TIMEOUT"
    assert "within 0.3s" in fc.error.message and len(fc.attempts) == 1
    assert slow.workflow is not None and slow.workflow.outputs == {"today": None, "country": "FR"}
    assert any("workflow output 'today' has no value" in w for w in slow.warnings)
    # the same workflow with retries allowed: the 503 is retried by resilience
    demo_tools["weather"].inject("/forecast", ServiceUnavailable())
    retried = orch.run_workflow(weather_workflow(tmp_path, retry={"max_attempts": 3}),
                                {"city": "Paris"})
    assert [a.layer for a in retried.steps["fc"].attempts] == ["plan", "resilience"]
    assert retried.status == "succeeded"


# --- listing -----------------------------------------------------------------------------------
def test_dagwright_workflows_lists_them_and_says_which_do_not_fit(
    example_file: Path, tmp_path: Path,
) -> None:
    broken = example_file.parent / "broken.yaml"
    broken.write_text(ISSUE_EXAMPLE.replace("weekly-report", "broken").replace(
        "team_stats", "team_statz"))
    (example_file.parent / "notes.txt").write_text("not a workflow")
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text(yaml.safe_dump({"tools": [{"name": "tracker", "capabilities": [{
        "name": "team_stats", "function": "tests.orchestration.test_workflows:team_stats",
        "input_schema": TEAM_STATS_SCHEMA}]}]}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_")}
    env.update({"ORCH_CATALOG": str(catalog), "PYTHONPATH": str(ROOT)})
    listed = _cli(["workflows"], env)
    assert listed.returncode == 2, listed.stderr
    assert "weekly-report" in listed.stdout and "fits" in listed.stdout
    assert "inputs: team (string), weeks (integer)" in listed.stdout
    assert "broken" in listed.stdout and "DOES NOT FIT" in listed.stdout
    assert "has no capability 'team_statz'" in listed.stdout
    assert "2 workflow(s)" in listed.stdout and "1 fit the catalog" in listed.stdout
    as_json = json.loads(_cli(["workflows", "--json"], env).stdout)
    assert {(w["name"], w["fits"]) for w in as_json} == {("weekly-report", True),
                                                         ("broken", False)}


# --- dagwright serve ---------------------------------------------------------------------------
def test_serve_starts_a_workflow_by_name_with_its_inputs(example_file: Path) -> None:
    orch = Orchestrator(tracker_catalog(), ScriptedLLM([]), OrchestratorConfig(
        store_url="memory://", synthesis_strategy="raw", workflows_dir=example_file.parent),
        registry=CollectorRegistry())
    with live_server(orch) as server, httpx.Client(base_url=server.url, timeout=15) as http:
        done = http.post("/v1/runs", json={"workflow": "weekly-report", "wait": True,
                                           "inputs": {"team": "Web", "weeks": 2}})
        assert done.status_code == 200, done.text
        body = done.json()
        assert body["status"] == "succeeded" and body["plan_source"] == "workflow"
        assert body["workflow"]["outputs"] == {"summary": "Web closed 14 issues in 2 weeks"}
        page = http.get(f"/ui/runs/{body['run_id']}")
        assert "workflow <code>weekly-report</code>" in page.text
        assert "saved workflow (no planning call)" in page.text

        missing = http.post("/v1/runs", json={"workflow": "nope", "inputs": {}})
        assert missing.status_code == 404
        assert missing.json()["error"]["code"] == "workflow_not_found"
        bad = http.post("/v1/runs", json={"workflow": "weekly-report",
                                          "inputs": {"team": "Web", "weeks": 99}})
        assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid_inputs"
        assert "greater than the maximum of 12" in bad.json()["error"]["message"]
        # a client names workflows, never files: the server's paths are not its business
        # (and nor is advice for the server's operator)
        directory = str(example_file.parent)
        assert directory not in missing.text and directory not in bad.text
        assert "ORCH_WORKFLOWS_DIR" not in missing.text
        assert "no workflow 'nope' in the server's workflows directory (workflows there: " \
               "weekly-report)" in missing.json()["error"]["message"]
        assert f"'weekly-report' ({example_file.name})" in bad.json()["error"]["message"]
        for name in ("../weekly-report", "/etc/passwd"):
            refused = http.post("/v1/runs", json={"workflow": name, "inputs": {}})
            assert refused.status_code == 422
        both = http.post("/v1/runs", json={"workflow": "weekly-report", "query": "q"})
        assert both.status_code == 422 and "either 'query' or 'workflow'" in both.text
        # a file the server can read, named like a workflow, is not read unless it is in
        # the workflows directory
        outside = example_file.parent.parent / "outside.yaml"
        outside.write_text(ISSUE_EXAMPLE.replace("weekly-report", "outside"))
        assert http.post("/v1/runs", json={"workflow": "outside.yaml"}).status_code == 404
    assert CALLS == [{"team": "Web", "weeks": 2}]


def test_serve_runs_a_workflow_as_the_tenant_of_the_token(example_file: Path,
                                                          tmp_path: Path) -> None:
    tokens = {hashlib.sha256(t.encode()).hexdigest(): name
              for t, name in ((ACME, "acme"), (GLOBEX, "globex"))}
    (tmp_path / "tokens.json").write_text(json.dumps(tokens))
    orch = Orchestrator(tracker_catalog(), ScriptedLLM([]), OrchestratorConfig(
        store_url="memory://", synthesis_strategy="raw", workflows_dir=example_file.parent),
        registry=CollectorRegistry())
    with live_server(orch, tenants=str(tmp_path / "tokens.json")) as server, \
            _as(server.url, ACME) as acme, _as(server.url, GLOBEX) as globex:
        done = acme.post("/v1/runs", json={
            "workflow": "weekly-report", "inputs": {"team": "Web", "weeks": 1},
            "context": {"user": "ann"}, "session_id": "weekly", "run_id": "wf-acme-1",
            "wait": True})
        assert done.status_code == 200, done.text
        run = done.json()
        assert run["status"] == "succeeded" and run["plan_source"] == "workflow"
        assert run["context"] == {"user": "ann", "tenant": "acme"}  # the token's tenant
        assert (run["session"], run["session_run"]) == ("weekly", 1)
        # the other tenant neither sees it nor takes its run id
        assert globex.get(f"/v1/runs/{run['run_id']}").status_code == 404
        assert globex.get("/v1/runs").json()["runs"] == []
        taken = globex.post("/v1/runs", json={"workflow": "weekly-report", "run_id": "wf-acme-1",
                                              "inputs": {"team": "Web", "weeks": 1}})
        assert taken.status_code == 409 and taken.json()["error"]["code"] == "run_id_conflict"
        # nor runs a workflow as another tenant
        other = globex.post("/v1/runs", json={"workflow": "weekly-report",
                                              "inputs": {"team": "Web", "weeks": 1},
                                              "context": {"tenant": "acme"}})
        assert other.status_code == 403
        assert other.json()["error"]["code"] == "forbidden_tenant"
        # a context that cannot be used is named as the context, not as the inputs
        bad = acme.post("/v1/runs", json={"workflow": "weekly-report",
                                          "inputs": {"team": "Web", "weeks": 1},
                                          "context": {"user": "x" * 5000}})
        assert bad.status_code == 422, bad.text
        assert bad.json()["error"]["details"]["fields"][0]["field"] == "context"
    assert CALLS == [{"team": "Web", "weeks": 1}]


def test_a_workflow_run_carries_its_context_and_joins_a_session(
    example_file: Path, registry: CollectorRegistry,
) -> None:
    orch = orchestrator(tracker_catalog(), registry, store_url="memory://")
    acme = {"tenant": "acme", "user": "ann"}
    first = orch.run_workflow(example_file, {"team": "Platform", "weeks": 2}, context=acme,
                              session_id="weekly")
    assert first.status == "succeeded", first.error
    assert (first.context, first.session, first.session_run) == (acme, "weekly", 1)
    assert [r.run_id for r in orch.list_runs(tenant="acme", user="ann")] == [first.run_id]
    # a later run of the session cites the workflow run's output
    follow_up = orch.run("and the same for that summary", session_id="weekly", context=acme,
                         plan={"steps": [{"id": "again", "tool": "tracker",
                                          "capability": "team_stats",
                                          "params": {"team": "{{run:1.stats.summary}}",
                                                     "weeks": 1}}]})
    assert follow_up.status == "succeeded", follow_up.error
    assert follow_up.session_run == 2
    assert CALLS[-1] == {"team": "Platform closed 14 issues in 2 weeks", "weeks": 1}
    with pytest.raises(InvalidInput, match="context"):
        orch.run_workflow(example_file, {"team": "Platform", "weeks": 2},
                          context={"bad key!": 1})


def _as(url: str, token: str) -> httpx.Client:
    return httpx.Client(base_url=url, timeout=15, headers={"Authorization": f"Bearer {token}"})


ACME = "acme-token-0123456789abcdef"
GLOBEX = "globex-token-0123456789abcdef"


def test_a_workflow_given_in_code_runs_as_well(registry: CollectorRegistry) -> None:
    workflow = Workflow.from_data(yaml.safe_load(ISSUE_EXAMPLE))
    result = orchestrator(tracker_catalog(), registry).run_workflow(
        workflow, {"team": "QA", "weeks": 1}, synthesis="template")
    assert result.status == "succeeded"
    # no workflow template and no capability template: raw, with a warning
    assert result.answer_strategy == "raw"
    assert any("found no template" in w for w in result.warnings)


def test_plan_save_refuses_a_file_the_workflows_directory_would_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """`plan --save workflows/x.txt` once wrote the workflow, and then neither
    `run --workflow x` nor `dagwright workflows` found it: refused before planning now."""
    from orchestration.cli import main

    monkeypatch.setenv("ORCH_CATALOG", str(ROOT / "config" / "catalog.example.yaml"))
    monkeypatch.setenv("ORCH_LLM_PROVIDER", "scripted")
    monkeypatch.setenv("ORCH_LLM_SCRIPT", str(tmp_path / "no-such-script.json"))  # (unused)
    target = tmp_path / "workflows" / "weather.txt"
    assert main(["plan", "Weather in Paris for 2 days?", "--save", str(target)]) == 2
    err = capsys.readouterr().err
    assert "a workflow file ends in .yaml, .yml or .json" in err
    assert f"--save {target.with_suffix('.yaml')}" in err
    assert not target.parent.exists()
