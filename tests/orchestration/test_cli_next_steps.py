"""The ``next:`` line under a run that did not succeed says what to do about *its* cause.

A new user's first hour: a run killed mid-payment and resumed, a call a person rejected,
a tool that was not running — each was told to "set ORCH_LLM_DEBUG_ENABLED=true and run
again", which for the payment would send it a second time. Real processes, the CLI as
typed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from orchestration.cli import EXIT_AWAITING_APPROVAL, EXIT_RUN_FAILED
from tests.support.cli import dagwright, run_killed_while_paying, scripted_env
from tests.support.side_effects import SideEffectTools, pay_plan

RUN_AGAIN = "ORCH_LLM_DEBUG_ENABLED=true and run again"


def environment(tmp_path: Path, catalog: dict[str, Any], plan: dict[str, Any]) -> dict[str, str]:
    return scripted_env(tmp_path, catalog, [plan])


def next_line(stdout: str) -> str:
    lines = [line for line in stdout.splitlines() if line.startswith("  next: ")]
    assert len(lines) == 1, stdout
    return lines[0]


def test_a_payment_that_may_have_happened_is_not_to_be_run_again(
    tools: SideEffectTools, tmp_path: Path,
) -> None:
    env = environment(tmp_path, tools.catalog(), pay_plan())
    run_id = run_killed_while_paying(env, tools, "pay")

    resumed = dagwright(env, "resume", run_id)
    assert resumed.returncode == EXIT_RUN_FAILED, resumed.stderr
    advice = next_line(resumed.stdout)
    assert "the call of 'pay' (bank.pay) may have happened: check with the tool" in advice
    assert f"`dagwright runs show {run_id} --json`" in advice
    assert RUN_AGAIN not in advice
    assert tools.executed["/pay"] == 1


def test_a_rejected_call_is_a_decision_not_a_failure_to_debug(
    tools: SideEffectTools, tmp_path: Path,
) -> None:
    catalog = tools.catalog()
    catalog["tools"][1]["capabilities"][0]["requires_approval"] = True
    env = environment(tmp_path, catalog, pay_plan())
    paused = dagwright(env, "run", "-q", "pay")
    assert paused.returncode == EXIT_AWAITING_APPROVAL, paused.stderr
    run_id = paused.stdout.splitlines()[0].split()[1]

    rejected = dagwright(env, "reject", run_id, "pay", "--note", "wrong broker")
    assert rejected.returncode == EXIT_RUN_FAILED, rejected.stderr
    advice = next_line(rejected.stdout)
    assert "'pay' (bank.pay) was rejected by a person (nothing was sent)" in advice
    assert RUN_AGAIN not in advice
    assert "/pay" not in tools.executed


def test_a_tool_that_is_not_running_is_named_with_where_to_look(
    tools: SideEffectTools, tmp_path: Path, closed_port_url: str,
) -> None:
    catalog = tools.catalog()
    catalog["tools"][0]["base_url"] = closed_port_url  # stocks is down
    env = environment(tmp_path, catalog, pay_plan())
    done = dagwright(env, "run", "-q", "pay")
    assert done.returncode == EXIT_RUN_FAILED, done.stderr
    advice = next_line(done.stdout)
    assert "the tool of 'quote' (stocks.quote) did not answer: check that it is running" in advice
    assert RUN_AGAIN not in advice


def test_a_run_started_with_per_run_credentials_is_approved_with_them_from_the_cli(
    tools: SideEffectTools, tmp_path: Path,
) -> None:
    """`run --credentials-file F` paused for a person: the credentials are never stored,
    so the decision must bring them again. `dagwright approve` once had no way to (its
    refusal sent the user to `resume`, which cannot decide): it takes --credentials-file,
    and every hint names it."""
    catalog = tools.catalog()
    catalog["tools"][1]["capabilities"][0]["requires_approval"] = True
    env = environment(tmp_path, catalog, pay_plan())
    creds = tmp_path / "creds.json"
    creds.write_text(json.dumps({"bank": {"Authorization": "Bearer alice-0123456789"}}))
    paused = dagwright(env, "run", "-q", "pay", "--credentials-file", str(creds))
    assert paused.returncode == EXIT_AWAITING_APPROVAL, paused.stderr
    run_id = paused.stdout.splitlines()[0].split()[1]
    advice = next_line(paused.stdout)
    assert f"`dagwright approve {run_id} pay --credentials-file {creds}`" in advice

    refused = dagwright(env, "approve", run_id, "pay")
    assert refused.returncode == 2, refused.stderr
    assert "`dagwright approve RUN_ID STEP_ID --credentials-file FILE`" in refused.stderr
    assert "/pay" not in tools.executed

    approved = dagwright(env, "approve", run_id, "pay", "--credentials-file", str(creds))
    assert approved.returncode == 0, approved.stdout + approved.stderr
    assert tools.executed["/pay"] == 1
    assert ("/pay", "Bearer alice-0123456789") in tools.authorizations
    assert "alice-0123456789" not in approved.stdout + approved.stderr
