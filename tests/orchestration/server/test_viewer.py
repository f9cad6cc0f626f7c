"""The run viewer in a real headless Chromium (Debian's, driven by Playwright).

The server runs in a thread of its own (sync Playwright owns this thread's event loop).
A finished run shows its plan as a DAG coloured by status and a timeline of its steps and
attempts; a paused run is approved from the page and the page follows it to its end
through the event stream. With ``DAGWRIGHT_WRITE_SCREENSHOT=1`` the second test writes
``docs/img/serve-run.png``, the picture in docs/serve.md.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from tests import ROOT
from tests.llm_servers import free_port_url
from tests.orchestration.server.live import LiveServer, live_server, make_orchestrator
from tests.support.side_effects import SideEffectTools

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = pytest.mark.browser

QUERY = "buy one TSLA share, file the receipt, and summarise today's TSLA news"
PLAN = {"steps": [
    {"id": "quote", "tool": "stocks", "capability": "quote", "params": {"symbol": "TSLA"}},
    {"id": "fx", "tool": "stocks", "capability": "quote", "params": {"symbol": "EURUSD"}},
    {"id": "news", "tool": "news", "capability": "headlines", "params": {"topic": "TSLA"}},
    {"id": "pay", "tool": "bank", "capability": "pay",
     "params": {"amount": "{{quote.price}}", "to": "broker"}, "depends_on": ["fx"]},
    {"id": "summary", "tool": "news", "capability": "summarize", "params": {"items": "{{news.items}}"}},
    {"id": "receipt", "tool": "bank", "capability": "receipt", "params": {"paid": "{{pay.paid}}"}},
]}
COLUMNS = {"quote": 0, "fx": 0, "news": 0, "pay": 1, "summary": 1, "receipt": 2}
SCREENSHOT = ROOT / "docs" / "img" / "serve-run.png"


def catalog(tools: SideEffectTools, *, approve_payments: bool) -> dict[str, Any]:
    """The side-effect tools, plus a news service that is down (nothing listens)."""
    spec = tools.catalog()
    for tool in spec["tools"]:
        for cap in tool["capabilities"]:
            if cap["name"] == "pay":
                cap["requires_approval"] = approve_payments
    spec["tools"].append({"name": "news", "base_url": free_port_url(), "capabilities": [
        {"name": "headlines", "path": "/headlines", "method": "GET",
         "input_schema": {"type": "object", "properties": {"topic": {"type": "string"}}}},
        {"name": "summarize", "path": "/summarize", "idempotent": True,
         "input_schema": {"type": "object"}}]})
    return spec


def start(server: LiveServer, run_id: str) -> dict[str, Any]:
    response = httpx.post(f"{server.url}/v1/runs", timeout=30,
                          json={"query": QUERY, "plan": PLAN, "run_id": run_id, "wait": True})
    assert response.status_code == 200, response.text
    return dict(response.json())


def node_states(page: Page) -> dict[str, str]:
    return {n.get_attribute("data-step") or "": n.get_attribute("data-status") or ""
            for n in page.locator("svg.dag g.node").all()}


def guard_origin(page: Page, server: LiveServer) -> list[str]:
    """Every request the page makes, to check nothing is loaded from elsewhere."""
    seen: list[str] = []
    page.on("request", lambda request: seen.append(request.url))
    return seen


def test_a_finished_run_shows_its_plan_as_a_dag_and_its_timeline(
    browser_page: Page, tools: SideEffectTools,
) -> None:
    from playwright.sync_api import expect

    page = browser_page
    orchestrator = make_orchestrator(catalog(tools, approve_payments=False), retry_base_delay_s=0.05)
    with live_server(orchestrator) as server:
        assert start(server, "viewer-done")["status"] == "partial"
        requests = guard_origin(page, server)
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(f"{server.url}/ui/runs/viewer-done")

        expect(page.locator("#run-status")).to_have_text("partial")
        expect(page.locator("svg.dag g.node")).to_have_count(6)
        assert node_states(page) == {"quote": "succeeded", "fx": "succeeded", "news": "failed",
                                     "pay": "succeeded", "summary": "skipped", "receipt": "succeeded"}
        # the columns are the plan's layers: every edge points right
        xs = {n.get_attribute("data-step"): float(re.findall(r"translate\(([\d.]+)",
                                                            n.get_attribute("transform") or "")[0])
              for n in page.locator("svg.dag g.node").all()}
        assert sorted(set(xs.values())) == sorted(set(xs.values()))[:3]
        assert all(sorted(set(xs.values())).index(xs[s]) == col for s, col in COLUMNS.items())
        expect(page.locator("svg.dag path.edge")).to_have_count(4)

        # the timeline: one row per step; news tried three times, waiting between tries
        expect(page.locator("tr.step-row")).to_have_count(6)
        news = page.locator("#step-news")
        expect(news.locator("details.attempt")).to_have_count(3)
        assert news.locator(".layer").all_inner_texts() == ["plan", "resilience", "resilience"]
        expect(news.locator("details.attempt").nth(1)).to_contain_text("waited 50 ms")
        expect(news.locator("svg.bar rect.seg-delay")).to_have_count(2)
        # an attempt's parameters and error show on click
        second = news.locator("details.attempt").nth(1)
        expect(second.locator("pre").first).not_to_be_visible()
        second.locator("summary").click()
        expect(second.locator("pre").first).to_contain_text('"topic": "TSLA"')
        expect(second.locator("pre.error-pre")).to_contain_text("CONNECTION_REFUSED")
        expect(second.locator(".attempt-body > p.muted")).to_have_text(
            "produced by: resilience retry 1/2 after CONNECTION_ERROR/CONNECTION_REFUSED")
        expect(page.locator("#step-summary")).to_contain_text("upstream step 'news'")
        # a node leads to its row
        page.locator('svg.dag g.node[data-step="pay"]').click()
        expect(page.locator("#step-pay details.attempt").first).to_have_attribute("open", "")
        expect(page.locator("#step-pay pre").first).to_contain_text('"amount": 250.0')
        assert not page.locator("button.approve").count()  # nothing waits

        page.goto(f"{server.url}/ui/")
        expect(page.locator("table.runs")).to_contain_text("viewer-done")
        page.locator("table.runs a", has_text="viewer-done").click()
        expect(page.locator("#run-status")).to_have_text("partial")
    assert errors == []
    assert requests and all(url.startswith(server.url) for url in requests)


def test_approving_a_paused_run_in_the_page_finishes_it_live(
    browser_page: Page, tools: SideEffectTools,
) -> None:
    from playwright.sync_api import expect

    page = browser_page
    page.set_viewport_size({"width": 1180, "height": 900})
    orchestrator = make_orchestrator(catalog(tools, approve_payments=True), retry_base_delay_s=0.05)
    with live_server(orchestrator) as server:
        assert start(server, "viewer-approve")["status"] == "awaiting_approval"
        page.goto(f"{server.url}/ui/runs/viewer-approve")
        expect(page.locator("#run-status")).to_have_text("awaiting_approval")
        expect(page.locator('g.node[data-step="pay"]')).to_have_attribute("data-status", "awaiting_approval")
        expect(page.locator('g.node[data-step="receipt"]')).to_have_attribute("data-status", "pending")
        card = page.locator('.approval[data-step="pay"]')
        expect(card.locator("textarea.params")).to_have_value(re.compile(r'"amount": 250\.0'))
        expect(page.locator("#live-state")).to_have_text("live")  # following the event stream
        assert "/pay" not in tools.executed

        card.locator("input.note").fill("within budget")
        card.get_by_role("button", name="Approve").click()

        # the page follows the run to its end without a reload
        expect(page.locator("#run-status")).to_have_text("partial", timeout=15_000)
        expect(page.locator('g.node[data-step="pay"]')).to_have_attribute("data-status", "succeeded")
        expect(page.locator('g.node[data-step="receipt"]')).to_have_attribute("data-status", "succeeded")
        expect(page.locator("#step-pay .layer-approval")).to_have_text("approval")
        expect(page.locator("#pending .approval")).to_have_count(0)
        assert tools.executed["/pay"] == 1 and tools.executed["/receipt"] == 1
        if os.environ.get("DAGWRIGHT_WRITE_SCREENSHOT") == "1":
            page.locator("#step-news details.attempt").nth(1).locator("summary").click()
            page.mouse.move(0, 0)
            SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SCREENSHOT), full_page=True)


TOKEN = "viewer-token-for-the-browser-test-0123"


def test_with_a_token_a_browser_signs_in_opens_a_run_and_approves_a_step(
    browser_page: Page, tools: SideEffectTools,
) -> None:
    """The sign-in form works in Chromium: its POST carries this server's Origin (the
    pages' Referrer-Policy no longer makes it ``null``); a page opened without a session
    leads to the sign-in page and back; the session then approves through the API."""
    from playwright.sync_api import expect

    page = browser_page
    orchestrator = make_orchestrator(catalog(tools, approve_payments=True),
                                     retry_base_delay_s=0.05, serve_token=TOKEN)
    with live_server(orchestrator) as server:
        response = httpx.post(f"{server.url}/v1/runs", timeout=30,
                              headers={"Authorization": f"Bearer {TOKEN}"},
                              json={"query": QUERY, "plan": PLAN, "run_id": "signed-in",
                                    "wait": True})
        assert response.json()["status"] == "awaiting_approval"
        posted: list[dict[str, str]] = []
        page.on("request", lambda r: posted.append(r.headers) if r.method == "POST" else None)

        page.goto(f"{server.url}/ui/runs/signed-in")
        expect(page).to_have_url(re.compile(r"/login\?next=/ui/runs/signed-in$"))
        page.get_by_label("Token").fill("not-the-token")
        page.get_by_role("button", name="Sign in").click()
        expect(page.locator("[role=alert]")).to_contain_text("not the server's token")
        page.get_by_label("Token").fill(TOKEN)
        page.get_by_role("button", name="Sign in").click()

        expect(page).to_have_url(f"{server.url}/ui/runs/signed-in")
        expect(page.locator("#run-status")).to_have_text("awaiting_approval")
        # the two form posts carried this server's origin, not "null"
        assert [h.get("origin") for h in posted] == [server.url, server.url]
        page.locator('.approval[data-step="pay"]').get_by_role("button", name="Approve").click()
        expect(page.locator("#run-status")).to_have_text("partial", timeout=15_000)
        assert tools.executed["/pay"] == 1
        # the runs list opens with the same session
        page.goto(f"{server.url}/ui/")
        expect(page.locator("table.runs")).to_contain_text("signed-in")
