"""The CLI as a new user meets it: a paused run, run ids by prefix, misspellings, a
closed pipe, log levels, the first line of ``run`` on a pipe, unset settings.

Real processes where the behaviour is about the process (exit codes, pipes, streams);
in-process ``main`` where it is about the words.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestration import Catalog, Orchestrator, OrchestratorConfig, ScriptedLLM
from orchestration.cli import EXIT_AWAITING_APPROVAL, EXIT_CLOSED_PIPE, Progress, main
from orchestration.events import RunEvent
from tests.support.cli import dagwright, run_killed_while_paying, scripted_env
from tests.support.side_effects import SideEffectTools, pay_plan


def catalog_spec(tools: SideEffectTools, *, approval: bool) -> dict[str, Any]:
    spec = tools.catalog()
    for tool in spec["tools"]:
        for cap in tool["capabilities"]:
            if cap["name"] == "pay":
                cap["requires_approval"] = approval
    return spec


def environment(tools: SideEffectTools, tmp_path: Path, *, approval: bool,
                answers: list[Any]) -> dict[str, str]:
    return scripted_env(tmp_path, catalog_spec(tools, approval=approval), answers)


def test_a_paused_run_has_its_own_exit_code_and_says_what_to_type_next(
    tools: SideEffectTools, tmp_path: Path,
) -> None:
    env = environment(tools, tmp_path, approval=True, answers=[pay_plan()])
    paused = dagwright(env, "run", "pay for one share")
    assert paused.returncode == EXIT_AWAITING_APPROVAL == 5, paused.stderr
    run_id = paused.stdout.splitlines()[0].split()[1]
    assert f"next: waiting for approval: `dagwright approve {run_id} pay` sends the call" \
        in paused.stdout
    assert "each failed step above" not in paused.stdout
    # progress: the step waits, and the run is said to wait, not to have failed
    assert "  pay: waiting for approval: the capability requires approval" in paused.stderr
    assert f"run {run_id} waiting for approval (pay)" in paused.stderr
    assert " INFO " not in paused.stderr  # logs: warnings only unless -v
    assert "WARNING" not in paused.stderr  # and a run waiting for a person is no warning
    assert "/pay" not in tools.executed

    # the id by a prefix, and an edit of one parameter: the rest is kept
    done = dagwright(env, "approve", run_id[:8], "pay", "--params", '{"amount": 100}')
    assert done.returncode == 0, done.stderr
    assert tools.requests[-2][2] == {"amount": 100, "to": "broker"}
    assert "  status: succeeded" in done.stdout


def test_approve_shows_the_run_going_on_at_the_level_asked(
    tools: SideEffectTools, tmp_path: Path,
) -> None:
    """A run that goes on after a decision is not 'planning'; -q and -v after approve do
    what they do after run (they were accepted and ignored); resume shares the code."""
    env = environment(tools, tmp_path, approval=True, answers=[pay_plan(), pay_plan()])
    first = dagwright(env, "run", "pay for one share").stdout.splitlines()[0].split()[1]
    quiet = dagwright(env, "approve", first, "pay", "-q")
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stderr == "" and "  status: succeeded" in quiet.stdout

    second = dagwright(env, "run", "pay again").stdout.splitlines()[0].split()[1]
    shown = dagwright(env, "approve", second, "pay", "-v")
    assert shown.returncode == 0, shown.stderr
    assert "planning" not in shown.stderr and "streams in" not in shown.stderr
    assert "  pay: succeeded after 1 attempt(s)" in shown.stderr
    assert f"run {second} succeeded" in shown.stderr
    assert re.search(r" INFO +dagwright\.run ", shown.stderr)  # -v: the run's INFO log lines
    assert tools.executed["/pay"] == 2


def test_the_first_line_reaches_a_pipe_while_the_run_goes_on(
    tools: SideEffectTools, tmp_path: Path,
) -> None:
    env = environment(tools, tmp_path, approval=False, answers=[pay_plan()])
    tools.hold.set()  # the payment's answer is held back until the line was read
    proc = subprocess.Popen([sys.executable, "-m", "orchestration", "-q", "run", "pay"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("run ") and len(first.split()[1]) == 32
        assert proc.poll() is None and tools.executed["/receipt"] == 0  # still running
        tools.release.set()
        rest, errors = proc.communicate(timeout=60)
    finally:
        tools.release.set()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, errors
    assert errors == ""  # -q: no progress, no log lines
    assert "  status: succeeded" in rest and "run " not in rest.splitlines()[0]


def test_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    env = {**os.environ, "ORCH_STORE_URL": f"sqlite:///{tmp_path}/runs.db"}
    proc = subprocess.Popen([sys.executable, "-m", "orchestration", "config"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # `| head` that has read enough: gone before anything was written
    errors = proc.stderr.read().decode()
    assert proc.wait(60) == EXIT_CLOSED_PIPE == 141
    assert errors == ""  # no BrokenPipeError traceback


@pytest.fixture
def two_runs(tools: SideEffectTools, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    store = f"sqlite:///{tmp_path}/runs.db"
    monkeypatch.setenv("ORCH_STORE_URL", store)
    orch = Orchestrator(catalog=Catalog.from_dict(catalog_spec(tools, approval=True), source="t"),
                        llm=ScriptedLLM(["unused"]),
                        config=OrchestratorConfig(store_url=store, synthesis_enabled=False))
    for run_id in ("alpha-one", "alpha-two"):
        assert orch.run("pay", plan=pay_plan(), run_id=run_id).status == "awaiting_approval"
    orch.close()
    return store


def test_run_ids_by_prefix_and_an_ambiguous_one_lists_the_candidates(
    two_runs: str, capsys: pytest.CaptureFixture[str],
) -> None:
    out = io.StringIO()
    assert main(["runs", "show", "alpha-o"], out=out) == 0
    assert out.getvalue().startswith("run alpha-one: pay")
    assert main(["runs", "show", "alpha"], out=io.StringIO()) == 2
    err = capsys.readouterr().err
    assert "'alpha' is the start of 2 run ids: alpha-two (awaiting_approval); " \
        "alpha-one (awaiting_approval); give more characters" in err
    assert "next: `dagwright runs list` shows the run ids" in err
    assert main(["runs", "show", "nothing-like-it"], out=io.StringIO()) == 2
    assert "no run id starts with it" in capsys.readouterr().err
    listed = io.StringIO()
    assert main(["approvals", "list", "alpha-t"], out=listed) == 0
    assert listed.getvalue().startswith("alpha-two pay: bank.pay")
    # the store is only read: both still wait
    assert main(["runs", "list", "--status", "awaiting_approval", "--json"], out=out) == 0


def test_a_wrong_status_or_command_is_refused_with_the_closest_name(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["runs", "list", "--status", "faild"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'faild'" in err and "did you mean 'failed'?" in err
    with pytest.raises(SystemExit):
        main(["rnu", "query"])
    assert "did you mean 'run'?" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["aprove", "r", "s"])
    assert "did you mean 'approve'?" in capsys.readouterr().err


def test_config_prints_unset_values_as_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ORCH_LLM_BASE_URL", raising=False)
    monkeypatch.setenv("ORCH_LLM_MODEL", "m-1")
    out = io.StringIO()
    assert main(["config"], out=out) == 0
    lines = out.getvalue().splitlines()
    assert "# ORCH_LLM_BASE_URL is unset" in lines and "ORCH_LLM_MODEL=m-1" in lines
    assert not any(line.endswith("=null") for line in lines)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_log_lines_go_above_the_live_table_not_through_it() -> None:
    screen = Terminal()
    progress = Progress(screen)
    progress(RunEvent(run_id="r", seq=1, type="plan_ready", at=0.0, data={"steps": 2}))
    progress(RunEvent(run_id="r", seq=2, type="step_started", at=0.0,
                      data={"step_id": "a", "tool": "t", "capability": "c"}))
    progress(RunEvent(run_id="r", seq=3, type="step_started", at=0.0,
                      data={"step_id": "b", "tool": "t", "capability": "c"}))
    before = len(screen.getvalue())
    progress.log_stream().write("WARNING something happened\n")
    after = screen.getvalue()[before:]
    # up over the two rows, clear, the log line, then the table again below it
    assert after.startswith("\x1b[2A\x1b[J" + "WARNING something happened\n")
    assert after.count("running   t.c") == 2


def test_a_streamed_plan_is_announced_before_its_first_step() -> None:
    lines = io.StringIO()
    progress = Progress(lines)
    progress(RunEvent(run_id="r", seq=1, type="step_started", at=0.0,
                      data={"step_id": "a", "tool": "t", "capability": "c"}))
    progress(RunEvent(run_id="r", seq=2, type="plan_ready", at=0.0, data={"steps": 3}))
    assert lines.getvalue().splitlines() == [
        "planning: steps start as the plan streams in [run r]", "  a: running   t.c",
        "plan ready: 3 step(s), 1 started as it streamed in [run r]"]


def test_a_failed_attempt_says_where_its_parameters_came_from_not_who_stopped_it() -> None:
    """A new user read "attempt 1 cancelled (RUN_CANCELLED, by plan)" as the plan having
    cancelled it: the layer names where the attempt's parameters came from."""
    lines = io.StringIO()
    progress = Progress(lines, continuing=True)
    for seq, (outcome, code, layer) in enumerate([
            ("cancelled", "RUN_CANCELLED", "plan"),
            ("failed", "INPUT_ERROR", "semantic_retry"), ("failed", None, "new_layer")]):
        progress(RunEvent(run_id="r", seq=seq, type="attempt_finished", at=0.0, data={
            "step_id": "pay", "attempt": seq + 1, "outcome": outcome, "error_code": code,
            "layer": layer}))
    assert lines.getvalue().splitlines() == [
        "  pay: attempt 1 cancelled (RUN_CANCELLED; parameters as planned)",
        "  pay: attempt 2 failed (INPUT_ERROR; parameters re-resolved from the query and "
        "upstream outputs)",
        "  pay: attempt 3 failed (-; new_layer)"]


@pytest.mark.parametrize("argv", [["resume", "abc", "-q"], ["runs", "list", "-q"],
                                  ["approve", "abc", "pay", "-q"], ["tools", "-q"]])
def test_quiet_and_verbose_are_taken_after_any_command(argv: list[str]) -> None:
    """A new user typed `dagwright resume ID -q` as the README shows `run -q`: refused."""
    from orchestration.cli import build_parser

    assert build_parser().parse_args(argv).quiet is True
    assert build_parser().parse_args([*argv[:-1], "-vv"]).verbose == 2


def test_a_run_cancelled_while_planning_is_not_a_planning_failure() -> None:
    from orchestration import RunResult
    from orchestration.cli import EXIT_PLANNING, EXIT_RUN_FAILED, exit_code_of

    cancelled = RunResult(run_id="r", query="q", status="cancelled", error="cancelled: by a person")
    assert exit_code_of(cancelled) == EXIT_RUN_FAILED
    failed = RunResult(run_id="r", query="q", status="failed", error="planning failed: ...")
    assert exit_code_of(failed) == EXIT_PLANNING


def test_a_tenant_s_session_asked_for_without_the_tenant_names_it(
    tools: SideEffectTools, tmp_path: Path,
) -> None:
    """A new user ran `run --context tenant=acme --session s1` and then `sessions show s1`:
    'no session', though it was there. Sessions are per tenant; the answer says whose."""
    plan = {"steps": [{"id": "q", "tool": "stocks", "capability": "quote",
                       "params": {"symbol": "TSLA"}}]}
    env = environment(tools, tmp_path, approval=False, answers=[plan])
    done = dagwright(env, "run", "-q", "--context", "tenant=acme", "--session", "s1", "quote")
    assert done.returncode == 0, done.stderr

    shown = dagwright(env, "sessions", "show", "s1")
    assert shown.returncode == 2
    assert "no session 's1' without a tenant; sessions are per tenant, and tenant acme has one" \
        in shown.stderr
    assert "next: `dagwright sessions show s1 --tenant acme`" in shown.stderr
    assert dagwright(env, "sessions", "show", "s1", "--tenant", "acme").returncode == 0

    listed = dagwright(env, "runs", "list", "--session", "s1")
    assert listed.returncode == 0, listed.stderr
    assert "session 's1' has runs under tenant acme: add --tenant acme" in listed.stdout
    assert "no session 'other'" in dagwright(env, "sessions", "show", "other").stderr


def test_a_run_whose_process_stopped_is_listed_with_where_its_steps_are(
    tools: SideEffectTools, tmp_path: Path,
) -> None:
    """A new user killed a run mid-payment: `runs list` said 'no steps' (the counts are
    written when a run ends) while `runs show` listed the quote it had finished."""
    from tests.support.side_effects import pay_plan

    env = environment(tools, tmp_path, approval=False, answers=[pay_plan()])
    run_id = run_killed_while_paying(env, tools, "pay for one share")
    listed = dagwright(env, "runs", "list")
    line = listed.stdout.splitlines()[0]
    assert line.startswith(run_id) and " running " in line, listed.stdout
    assert line.endswith("steps so far: `dagwright runs show`") and "no steps" not in line
    assert "✔ quote [stocks.quote] succeeded" in dagwright(env, "runs", "show", run_id).stdout


def test_the_note_of_an_approval_is_shown_with_its_attempt(
    tools: SideEffectTools, tmp_path: Path,
) -> None:
    """A new user approved with --note and found the note in `runs show --json` only."""
    from tests.support.side_effects import pay_plan

    env = environment(tools, tmp_path, approval=True, answers=[pay_plan()])
    paused = dagwright(env, "run", "-q", "pay for one share")
    run_id = paused.stdout.splitlines()[0].split()[1]
    done = dagwright(env, "approve", run_id, "pay", "--note", "capped by finance")
    assert done.returncode == 0, done.stderr
    shown = dagwright(env, "runs", "show", run_id).stdout
    assert "#1 layer=approval outcome=succeeded" in shown
    assert "note: approved by a person: capped by finance" in shown


def test_every_argument_of_every_command_says_what_it_is() -> None:
    """A new user read `dagwright approve --help`: `run_id`, `--note NOTE` and `--json`
    with nothing beside them (and the same in plan, reject, resume, runs, sessions)."""
    import argparse

    from orchestration.cli import build_parser

    def bare(parser: argparse.ArgumentParser, path: str) -> list[str]:
        found = []
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    found += bare(sub, f"{path} {name}")
            elif not action.help and action.dest != "help":
                found.append(f"{path}: {action.dest}")
        return found

    assert bare(build_parser(), "dagwright") == []
    # a run id is said to take a prefix wherever it is asked for, as the README promises
    commands = next(a for a in build_parser()._actions
                    if isinstance(a, argparse._SubParsersAction)).choices
    for name in ("approve", "reject", "resume", "debug"):
        assert "the run id (or a unique prefix of it)" in commands[name].format_help(), name


def test_a_first_run_without_llm_settings_learns_openai_is_only_the_default(
    tools: SideEffectTools, tmp_path: Path,
) -> None:
    """A new user's first `dagwright run` read 'ORCH_LLM_PROVIDER=openai needs
    ORCH_LLM_MODEL' without having named openai anywhere."""
    env = environment(tools, tmp_path, approval=False, answers=[])
    for name in ("ORCH_LLM_PROVIDER", "ORCH_LLM_SCRIPT"):
        env.pop(name)
    unset = dagwright(env, "run", "hello")
    assert unset.returncode == 2
    assert ("ORCH_LLM_PROVIDER=openai needs ORCH_LLM_MODEL (openai is the default, as "
            "ORCH_LLM_PROVIDER is unset: point ORCH_LLM_BASE_URL and ORCH_LLM_MODEL at an "
            "OpenAI-compatible server") in unset.stderr
    chosen = dagwright({**env, "ORCH_LLM_PROVIDER": "openai"}, "run", "hello")
    assert chosen.returncode == 2 and "is the default" not in chosen.stderr
    assert "ORCH_LLM_PROVIDER=openai needs ORCH_LLM_MODEL" in chosen.stderr


def test_refused_credentials_say_what_to_correct_without_talk_of_workflows(
    tools: SideEffectTools, tmp_path: Path,
) -> None:
    env = environment(tools, tmp_path, approval=False, answers=[])
    (tmp_path / "creds.json").write_text(json.dumps({"nosuch": {"X-Key": "k-123456"}}))
    refused = dagwright(env, "run", "--credentials-file", str(tmp_path / "creds.json"), "x")
    assert refused.returncode == 2
    assert "credentials for 'nosuch': the catalog has no tool, source or capability" \
        in refused.stderr
    assert "next: correct what it names; nothing was recorded or sent" in refused.stderr
    assert "k-123456" not in refused.stderr + refused.stdout
