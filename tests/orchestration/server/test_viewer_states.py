"""The run viewer says the right thing in every state a run passes through — planning,
failed before a plan, running, paused, cancelled, succeeded, failed — in Debian's
headless Chromium.

Each state is checked for its wording, its live time and bars, and a legend entry for
every colour drawn; no request of the page fails (the favicon included). With
``DAGWRIGHT_WRITE_SCREENSHOT=1`` each state is saved as ``docs/img/viewer-<state>.png``
(the pictures in docs/serve.md).
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from orchestration import Catalog, Orchestrator, OrchestratorConfig, ScriptedLLM
from tests import ROOT
from tests.orchestration.server.live import live_server
from tests.support.side_effects import SideEffectTools, pay_plan

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = pytest.mark.browser
SHOTS = ROOT / "docs" / "img"
QUERY = "pay the broker for one TSLA share and file the receipt"
# run ids are invoice-1NN: they read as ids in the pictures ("run running" read as a state)


def orchestrator(tools: SideEffectTools, answer: Any, *, latency_s: float = 0.0,
                 approval: bool = False) -> Orchestrator:
    spec = tools.catalog()
    for tool in spec["tools"]:
        for cap in tool["capabilities"]:
            if cap["name"] == "pay":
                cap["requires_approval"] = approval
        if tool["name"] == "stocks":  # a route the tool server does not have: 404 NOT_FOUND
            tool["capabilities"].append({"name": "history", "path": "/history", "method": "GET",
                                         "input_schema": {"type": "object"}})
    return Orchestrator(
        catalog=Catalog.from_dict(spec, source="test tools"),
        llm=ScriptedLLM(answer, latency_s=latency_s), registry=CollectorRegistry(),
        config=OrchestratorConfig(store_url="memory://", synthesis_enabled=False,
                                  stream_plan=False, planner_max_retries=0,
                                  validation_feedback_enabled=False,
                                  semantic_retry_enabled=False))


def watch(page: Page) -> list[str]:
    """Every request of the page that failed (a 404 favicon included)."""
    failed: list[str] = []
    page.on("response", lambda r: failed.append(f"{r.status} {r.url}") if r.status >= 400 else None)
    # a request a navigation aborts (the event stream, on reload) is not a failure
    page.on("requestfailed", lambda r: None if "ERR_ABORTED" in (r.failure or "")
            else failed.append(f"failed {r.url}: {r.failure}"))
    page.on("pageerror", lambda exc: failed.append(f"page error {exc}"))
    return failed


def shot(page: Page, state: str) -> None:
    if os.environ.get("DAGWRIGHT_WRITE_SCREENSHOT") == "1":
        page.mouse.move(0, 0)
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / f"viewer-{state}.png"), full_page=True)


def elapsed(page: Page) -> float:
    return float(page.locator("#elapsed").inner_text())


def legend_covers_what_is_drawn(page: Page) -> None:
    drawn = {c.split("seg-")[1] for c in page.locator("svg.bar rect.seg").evaluate_all(
        "rects => rects.map(r => r.getAttribute('class'))") for c in c.split() if c.startswith("seg-")}
    keyed = set(page.locator(".segment-legend .seg-key").evaluate_all(
        "keys => keys.map(k => k.dataset.kind)"))
    assert drawn <= keyed, drawn - keyed
    # and every key has a colour (not the default black of an unstyled SVG rect)
    colours = page.locator(".segment-legend .seg-key").evaluate_all(
        "keys => keys.map(k => getComputedStyle(k).backgroundColor)")
    assert all(c not in ("rgba(0, 0, 0, 0)", "rgb(0, 0, 0)") for c in colours), colours
    fills = page.locator("svg.bar rect.seg").evaluate_all(
        "rects => rects.map(r => getComputedStyle(r).fill)")
    assert "rgb(0, 0, 0)" not in fills


def test_planning_then_cancelled_before_a_plan(browser_page: Page, tools: SideEffectTools) -> None:
    from playwright.sync_api import expect

    page = browser_page
    failed = watch(page)
    with live_server(orchestrator(tools, lambda r: pay_plan(), latency_s=20)) as server:
        started = httpx.post(f"{server.url}/v1/runs", json={"query": QUERY, "run_id": "invoice-101"},
                             timeout=10)
        assert started.status_code == 202
        page.goto(f"{server.url}/ui/runs/invoice-101")
        expect(page.locator("#run-status")).to_have_text("running")
        expect(page.locator("#plan-note")).to_have_text("No plan yet: the planner is at work.")
        expect(page.locator("#steps-note")).to_have_text("Steps start once the plan is ready.")
        expect(page.locator(".facts")).to_contain_text("running for")
        first = elapsed(page)
        page.wait_for_timeout(600)
        assert elapsed(page) > first + 0.3  # the time goes on between events
        shot(page, "planning")

        with page.expect_response(lambda r: r.url.endswith("/cancel"), timeout=10_000) as answer:
            page.get_by_role("button", name="Cancel run").click()
        assert answer.value.status == 200
        expect(page.locator("#run-status")).to_have_text("cancelled", timeout=10_000)
        page.reload()
        expect(page.locator("#plan-note")).to_have_text(
            "No plan: the run was cancelled before its plan was ready.")
        expect(page.locator("#steps-note")).to_have_text("No step ran.")
        expect(page.locator(".facts")).to_contain_text("wall time")
        shot(page, "cancelled-planning")
    assert failed == [], failed


def test_failed_before_a_plan_says_so_and_shows_the_whole_error(
    browser_page: Page, tools: SideEffectTools,
) -> None:
    from playwright.sync_api import expect

    page = browser_page
    failed = watch(page)
    rambling = "I cannot plan this. " + "Here is why, at length. " * 40
    with live_server(orchestrator(tools, lambda r: rambling)) as server:
        done = httpx.post(f"{server.url}/v1/runs", timeout=30,
                          json={"query": QUERY, "run_id": "invoice-102", "wait": True})
        assert done.json()["status"] == "failed" and done.json()["plan"] is None
        page.goto(f"{server.url}/ui/runs/invoice-102")
        expect(page.locator("#plan-note")).to_have_text(
            "No plan: planning failed (the error above says why).")
        expect(page.locator("#steps-note")).to_have_text("No step ran.")
        error = done.json()["error"]
        if len(error) > 600:  # a long error opens in full
            page.locator("details.run-error summary").click()
            expect(page.locator("details.run-error pre")).to_have_text(error)
        else:
            expect(page.locator(".summary .error-text")).to_have_text(error)
        assert "planner is at work" not in page.content()
        shot(page, "failed-planning")
        # the icon every page asks for is there
        assert page.request.get(f"{server.url}/favicon.ico").headers["content-type"].startswith(
            "image/svg+xml")
    assert failed == [], failed


def test_running_paused_and_cancelled_runs(browser_page: Page, tools: SideEffectTools) -> None:
    from playwright.sync_api import expect

    page = browser_page
    page.set_viewport_size({"width": 1180, "height": 900})
    failed = watch(page)
    with live_server(orchestrator(tools, ["unused"], approval=False)) as server:
        tools.hold.set()  # the payment's answer is held: the step stays running
        httpx.post(f"{server.url}/v1/runs", timeout=10,
                   json={"query": QUERY, "plan": pay_plan(), "run_id": "invoice-103"})
        assert tools.arrived.wait(10)
        page.goto(f"{server.url}/ui/runs/invoice-103")
        expect(page.locator('g.node[data-step="pay"]')).to_have_attribute("data-status", "running")
        bar = page.locator("#step-pay svg.bar rect.seg-running")
        expect(bar).to_have_count(1)
        expect(page.locator("#step-pay")).to_contain_text("so far")
        first = elapsed(page)
        page.wait_for_timeout(2600)  # one redraw: the running bar has grown with the time
        assert elapsed(page) > first + 2
        expect(page.locator("#step-pay")).to_contain_text("so far")
        legend_covers_what_is_drawn(page)
        assert "⫽" not in page.content()
        shot(page, "running")

        with page.expect_response(lambda r: r.url.endswith("/cancel"), timeout=10_000) as answer:
            page.get_by_role("button", name="Cancel run").click()
        assert answer.value.status == 200
        expect(page.locator("#run-status")).to_have_text("cancelled", timeout=10_000)
        tools.release.set()
        page.reload()
        # the payment was in flight: its attempt is drawn cut off, in a legend colour
        expect(page.locator("#step-pay svg.bar rect.seg-cancelled")).to_have_count(1)
        expect(page.locator(".segment-legend")).to_contain_text("cut off in flight")
        legend_covers_what_is_drawn(page)
        shot(page, "cancelled")

    tools.hold.clear()
    with live_server(orchestrator(tools, ["unused"], approval=True)) as server:
        httpx.post(f"{server.url}/v1/runs", timeout=30,
                   json={"query": QUERY, "plan": pay_plan(), "run_id": "invoice-104", "wait": True})
        page.goto(f"{server.url}/ui/runs/invoice-104")
        expect(page.locator("#run-status")).to_have_text("awaiting_approval")
        facts = page.locator(".facts")
        expect(facts).to_contain_text(re.compile(r"worked [\d.]+ s · waiting for a person since "
                                                 r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"))
        expect(page.locator("#step-pay")).to_contain_text("waiting for a person")
        legend_covers_what_is_drawn(page)
        shot(page, "paused")
    assert failed == [], failed


def test_succeeded_and_failed_runs(browser_page: Page, tools: SideEffectTools) -> None:
    from playwright.sync_api import expect

    page = browser_page
    page.set_viewport_size({"width": 1180, "height": 900})
    failed = watch(page)
    with live_server(orchestrator(tools, ["unused"])) as server:
        done = httpx.post(f"{server.url}/v1/runs", timeout=30,
                          json={"query": QUERY, "plan": pay_plan(), "run_id": "invoice-105", "wait": True})
        assert done.json()["status"] == "succeeded"
        page.goto(f"{server.url}/ui/runs/invoice-105")
        expect(page.locator("#run-status")).to_have_text("succeeded")
        expect(page.locator(".facts")).to_contain_text(re.compile(r"3 succeeded\s+LLM calls: 0\s+wall time [\d.]+ s"))
        expect(page.locator("svg.dag g.node.status-succeeded")).to_have_count(3)
        expect(page.locator("svg.bar rect.seg-succeeded")).to_have_count(3)
        assert not page.locator("button.cancel-run").count()  # nothing to cancel
        legend_covers_what_is_drawn(page)
        shot(page, "succeeded")

        plan = {"steps": [
            {"id": "history", "tool": "stocks", "capability": "history", "params": {}},
            {"id": "pay", "tool": "bank", "capability": "pay",
             "params": {"amount": "{{history.price}}", "to": "broker"}}]}
        broke = httpx.post(f"{server.url}/v1/runs", timeout=30,
                           json={"query": "pay at yesterday's price", "plan": plan,
                                 "run_id": "invoice-106", "wait": True})
        assert broke.json()["status"] == "failed"
        page.goto(f"{server.url}/ui/runs/invoice-106")
        expect(page.locator("#run-status")).to_have_text("failed")
        expect(page.locator(".summary .error-text")).to_contain_text("NOT_FOUND/NO_ROUTE")
        expect(page.locator('g.node[data-step="history"]')).to_have_attribute("data-status", "failed")
        expect(page.locator('g.node[data-step="pay"]')).to_have_attribute("data-status", "skipped")
        expect(page.locator("#step-history svg.bar rect.seg-failed")).to_have_count(1)
        expect(page.locator("#step-pay")).to_contain_text("upstream step 'history' failed")
        legend_covers_what_is_drawn(page)
        shot(page, "failed")
    assert tools.executed["/pay"] == 1  # the succeeded run's; the failed one's was skipped
    assert failed == [], failed
