"""Tenants on one ``dagwright serve``: tokens mapped to tenants (``ORCH_SERVE_TOKENS``),
each seeing and acting on its own runs only — through the API (list, read, events,
approvals, cancel, resume, sessions) and in the viewer, in a real headless Chromium —
with a 404 for another tenant's run (ids tell nothing), and per-tenant limits: run
slots (429) and the runs' budgets."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from orchestration.errors import ConfigError
from orchestration.server._tenants import read_tenants
from tests.orchestration.server.live import LiveServer, live_server, make_orchestrator, wait_for
from tests.orchestration.test_approvals import QUERY, approval_catalog, plan
from tests.support.side_effects import SideEffectTools

if TYPE_CHECKING:
    from playwright.sync_api import Page

ACME = "acme-token-0123456789abcdef"
GLOBEX = "globex-token-0123456789abcdef"


def sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


TOKENS = {sha(ACME): {"tenant": "acme", "max_runs": 1, "max_llm_calls_per_run": 3},
          sha(GLOBEX): "globex"}


def as_(server: LiveServer, token: str) -> httpx.Client:
    return httpx.Client(base_url=server.url, timeout=20,
                        headers={"Authorization": f"Bearer {token}"})


@pytest.fixture
def server(tools: SideEffectTools, tmp_path: Path) -> Iterator[LiveServer]:
    """Bank payments wait for a person; two tenants, by token."""
    (tmp_path / "tokens.json").write_text(json.dumps(TOKENS))
    orchestrator = make_orchestrator(approval_catalog(tools), f"sqlite:///{tmp_path}/runs.db")
    with live_server(orchestrator, tenants=str(tmp_path / "tokens.json")) as live:
        yield live


def test_a_tenant_sees_and_acts_on_its_own_runs_only(server: LiveServer,
                                                     tools: SideEffectTools) -> None:
    with as_(server, ACME) as acme, as_(server, GLOBEX) as globex:
        mine = acme.post("/v1/runs", json={"query": QUERY, "plan": plan(), "wait": True,
                                           "context": {"user": "ann"}, "session_id": "s1"})
        assert mine.status_code == 200, mine.text
        run = mine.json()
        assert run["status"] == "awaiting_approval"
        assert run["context"] == {"user": "ann", "tenant": "acme"}  # the token set the tenant
        theirs = globex.post("/v1/runs", json={"query": QUERY, "plan": plan(), "wait": True,
                                               "session_id": "s1"}).json()
        # each lists its own
        assert [r["run_id"] for r in acme.get("/v1/runs").json()["runs"]] == [run["run_id"]]
        assert [r["run_id"] for r in globex.get("/v1/runs").json()["runs"]] == [theirs["run_id"]]
        assert acme.get("/v1/runs", params={"user": "ann"}).json()["runs"][0]["context"][
            "user"] == "ann"
        refused = globex.get("/v1/runs", params={"tenant": "acme"})
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden_tenant"
        # another tenant's run is exactly a run that does not exist
        ghost = globex.get("/v1/runs/no-such-run").json()["error"]
        for method, path, body in [
                ("GET", f"/v1/runs/{run['run_id']}", None),
                ("GET", f"/v1/runs/{run['run_id']}/events", None),
                ("POST", f"/v1/runs/{run['run_id']}/approvals/pay", {"approved": True}),
                ("POST", f"/v1/runs/{run['run_id']}/cancel", None),
                ("POST", f"/v1/runs/{run['run_id']}/resume", {})]:
            answer = globex.request(method, path, json=body)
            assert answer.status_code == 404, (path, answer.text)
            got = answer.json()["error"]
            assert got["code"] == ghost["code"] == "run_not_found"
            assert got["message"].replace(run["run_id"], "X") == \
                ghost["message"].replace("no-such-run", "X")
        assert tools.executed["/pay"] == 0  # globex's approval did not reach acme's run
        # the same session id is two sessions, one per tenant
        assert [r["run_id"] for r in acme.get("/v1/sessions/s1").json()["runs"]] == [run["run_id"]]
        assert [r["run_id"] for r in globex.get("/v1/sessions/s1").json()["runs"]] == \
            [theirs["run_id"]]
        # a session of no run of the tenant: a 404 that names the id it was asked for
        # (it used to come as "[REDACTED]", the key session_id read as a secret's)
        unknown = acme.get("/v1/sessions/s2")
        assert unknown.status_code == 404
        assert unknown.json()["error"]["code"] == "session_not_found"
        assert unknown.json()["error"]["details"] == {"session": "s2"}
        # a context naming another tenant is refused; no token at all is a 401
        spoof = globex.post("/v1/runs", json={"query": QUERY, "plan": plan(),
                                              "context": {"tenant": "acme"}})
        assert spoof.status_code == 403
        assert httpx.get(f"{server.url}/v1/runs").status_code == 401
        # acme approves its own
        approved = acme.post(f"/v1/runs/{run['run_id']}/approvals/pay", json={"approved": True})
        assert approved.status_code in (200, 202)
        wait_for(lambda: acme.get(f"/v1/runs/{run['run_id']}").json()["status"] == "succeeded")
        assert tools.executed["/pay"] == 1


def test_a_tenant_is_held_to_its_own_run_slots_and_budgets(server: LiveServer,
                                                           tools: SideEffectTools,
                                                           tmp_path: Path) -> None:
    keyed = {"steps": [{"id": "pay", "tool": "bank", "capability": "pay_keyed",
                        "params": {"amount": 10, "to": "broker"}}]}
    tools.hold.set()  # the first run's payment stays in flight
    try:
        with as_(server, ACME) as acme, as_(server, GLOBEX) as globex:
            first = acme.post("/v1/runs", json={"query": QUERY, "plan": keyed})
            assert first.status_code == 202
            second = acme.post("/v1/runs", json={"query": QUERY, "plan": keyed})
            assert second.status_code == 429, second.text
            error = second.json()["error"]
            assert error["code"] == "too_many_runs" and error["details"]["tenant"] == "acme"
            assert "tenant 'acme' already has 1 run executing" in error["message"]
            assert second.headers["Retry-After"]
            # another tenant is not held by acme's limit
            assert globex.post("/v1/runs", json={"query": QUERY, "plan": plan()}
                               ).status_code == 202
    finally:
        tools.hold.clear()
        tools.release.set()
    run_id = first.json()["run_id"]
    with as_(server, ACME) as acme:
        wait_for(lambda: acme.get(f"/v1/runs/{run_id}").json()["status"] != "running")
        # the slot is free again
        assert acme.post("/v1/runs", json={"query": QUERY, "plan": plan()}).status_code == 202
    # acme's runs carry its budgets (stored with the run, so a resume keeps them)
    import asyncio

    from orchestration.store import SqliteStore

    async def limits_of(run: str) -> Any:
        store = SqliteStore(f"sqlite:///{tmp_path}/runs.db", tmp_path / "runs.db")
        await store.open()
        try:
            stored = await store.load(run)
            assert stored is not None
            return stored.state.limits
        finally:
            await store.close()

    limits = asyncio.run(limits_of(run_id))
    assert limits is not None and limits.max_llm_calls_per_run == 3


def test_tokens_setting_is_checked_whole() -> None:
    with pytest.raises(ConfigError, match="not the hex SHA-256 of a token"):
        read_tenants('{"abc": "acme"}')
    with pytest.raises(ConfigError, match="unknown key"):
        read_tenants(json.dumps({sha(ACME): {"tenant": "acme", "max_run": 2}}))
    with pytest.raises(ConfigError, match="cannot read the tokens file"):
        read_tenants("/nonexistent/tokens.json")
    tenants = read_tenants(json.dumps(TOKENS))
    assert tenants[sha(ACME)].limits is not None
    assert tenants[sha(ACME)].limits.max_llm_calls_per_run == 3
    assert tenants[sha(GLOBEX)].name == "globex"


@pytest.mark.browser
def test_two_tenants_cannot_see_each_other_s_runs_in_the_viewer(
    browser_page: Page, server: LiveServer,
) -> None:
    from playwright.sync_api import expect

    runs: dict[str, str] = {}
    for token, who in ((ACME, "acme"), (GLOBEX, "globex")):
        with as_(server, token) as http:
            runs[who] = http.post("/v1/runs", json={"query": f"{QUERY} for {who}", "plan": plan(),
                                                    "wait": True, "context": {"user": f"{who}-u"}}
                                  ).json()["run_id"]
    page = browser_page
    page.goto(f"{server.url}/ui/")
    expect(page).to_have_url(re.compile(r"/login\?next=/ui/$"))
    page.get_by_label("Token").fill(GLOBEX)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(f"{server.url}/ui/")
    expect(page.locator(".tenant")).to_have_text("globex")
    table = page.locator("table.runs")
    expect(table).to_contain_text(runs["globex"])
    expect(table).to_contain_text("globex-u")
    expect(table).not_to_contain_text(runs["acme"])
    # acme's run page is "not found" for globex, as a run that does not exist
    answer = page.goto(f"{server.url}/ui/runs/{runs['acme']}")
    assert answer is not None and answer.status == 404
    expect(page.locator("body")).to_contain_text("run not found")
    expect(page.locator("body")).not_to_contain_text("acme")
    # its own run page shows who the run is for
    page.goto(f"{server.url}/ui/runs/{runs['globex']}")
    expect(page.locator(".context-item[data-key=tenant]")).to_have_text("tenant: globex")
    expect(page.locator(".context-item[data-key=user]")).to_have_text("user: globex-u")
    # acme, signed in on another browser context, sees its run and not globex's
    context = page.context.browser.new_context()  # type: ignore[union-attr]
    try:
        other = context.new_page()
        other.goto(f"{server.url}/login?next=/ui/")
        other.get_by_label("Token").fill(ACME)
        other.get_by_role("button", name="Sign in").click()
        expect(other.locator("table.runs")).to_contain_text(runs["acme"])
        expect(other.locator("table.runs")).not_to_contain_text(runs["globex"])
    finally:
        context.close()


def test_one_token_and_tenants_at_once_are_refused_before_listening() -> None:
    from orchestration import OrchestratorConfig
    from orchestration.server._serve import serve

    config = OrchestratorConfig(serve_token=ACME, serve_tokens=json.dumps(TOKENS),
                                store_url="memory://")
    with pytest.raises(ConfigError, match="not both"):
        serve(config=config, port=0)
    # tenants are enough to listen beyond loopback (every request needs a token)
    from orchestration.server._security import check_exposure

    check_exposure("0.0.0.0", "tenants", insecure=False)
