"""The viewer's pages as HTML (no browser): what they show of a running or paused run,
what they load, and the headers that keep them from loading anything else."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.orchestration.server.live import LiveServer, live_server, make_orchestrator, wait_for
from tests.orchestration.test_approvals import QUERY, approval_catalog, plan
from tests.support.side_effects import SideEffectTools


@pytest.fixture
def server(tools: SideEffectTools) -> Iterator[LiveServer]:
    with live_server(make_orchestrator(approval_catalog(tools))) as live:
        yield live


def node_status(html: str, step: str) -> str | None:
    found = re.search(rf'<g class="node status-[a-z_]+" data-step="{step}" data-status="([a-z_]+)"', html)
    return found.group(1) if found else None


def test_a_step_in_flight_is_drawn_running_and_the_rest_pending(tools: SideEffectTools) -> None:
    tools.hold.set()
    with live_server(make_orchestrator(tools.catalog())) as server, \
            httpx.Client(base_url=server.url, timeout=10) as http:
        http.post("/v1/runs", json={"query": QUERY, "plan": plan(), "run_id": "busy"})
        assert tools.arrived.wait(10)
        def running_page() -> str | None:
            html = http.get("/ui/runs/busy").text
            return html if node_status(html, "pay") == "running" else None

        page = wait_for(running_page)
        assert node_status(page, "quote") == "succeeded"
        assert node_status(page, "receipt") == "pending"
        assert 'data-final="false"' in page and "Cancel run" in page
        tools.release.set()
        wait_for(lambda: node_status(http.get("/ui/runs/busy").text, "receipt") == "succeeded")


def test_a_long_wait_for_approval_is_cut_out_of_the_time_axis(
    server: LiveServer, tools: SideEffectTools,
) -> None:
    with httpx.Client(base_url=server.url, timeout=10) as http:
        http.post("/v1/runs", json={"query": QUERY, "plan": plan(), "run_id": "slow-person", "wait": True})
        page = http.get("/ui/runs/slow-person").text
        assert 'class="approval" data-step="pay"' in page and "Approve" in page
        assert "&#34;amount&#34;: 250.0" in page  # the exact parameters, escaped
        time.sleep(1.2)  # longer than everything the run did
        http.post("/v1/runs/slow-person/approvals/pay", json={"approved": True, "note": "fine"})
        wait_for(lambda: http.get("/v1/runs/slow-person").json()["status"] == "succeeded")
        page = http.get("/ui/runs/slow-person").text
    assert re.search(r"cut out: 1\.\d\d s in which no step ran \(the slanted marks\)", page)
    # the steps span the person's wait: the run's own time is what it worked, not a wall time
    assert re.search(r"worked <span id=\"elapsed\">0\.\d\d</span> s", page), page
    # the approved attempt says who and why once
    assert "produced by: approved by a person · note: fine" in page
    assert "approved by a person: fine" not in page
    receipt_bar = re.search(r'id="step-receipt".*?<rect class="span status-succeeded" x="([\d.]+)"', page, re.S)
    assert receipt_bar is not None and float(receipt_bar.group(1)) < 240  # still on the bar


def test_a_run_whose_first_step_waited_for_a_person_says_what_it_worked(
    server: LiveServer,
) -> None:
    """Nothing ran before the wait, so the steps span only the call: the run's events
    still span the wait, and its time is what it worked, not a wall time."""
    first = {"steps": [s for s in plan()["steps"] if s["id"] == "pay"]}
    first["steps"][0]["params"] = {"amount": 250, "to": "broker"}
    with httpx.Client(base_url=server.url, timeout=10) as http:
        paused = http.post("/v1/runs", json={"query": QUERY, "plan": first,
                                             "run_id": "waited-first", "wait": True})
        assert paused.json()["status"] == "awaiting_approval", paused.text
        time.sleep(0.5)
        http.post("/v1/runs/waited-first/approvals/pay", json={"approved": True})
        wait_for(lambda: http.get("/v1/runs/waited-first").json()["status"] == "succeeded")
        page = http.get("/ui/runs/waited-first").text
    assert re.search(r"worked <span id=\"elapsed\">0\.\d\d</span> s", page), page
    assert "wall time" not in page


def test_pages_load_only_their_own_assets_under_a_strict_policy(server: LiveServer) -> None:
    with httpx.Client(base_url=server.url, timeout=10) as http:
        http.post("/v1/runs", json={"query": QUERY, "plan": plan(), "run_id": "look", "wait": True})
        for path in ("/ui/", "/ui/runs/look"):
            response = http.get(path)
            assert response.status_code == 200
            policy = response.headers["content-security-policy"]
            assert "default-src 'none'" in policy and "script-src 'self'" in policy
            assert response.headers["x-content-type-options"] == "nosniff"
            links = re.findall(r'(?:src|href)="([^"]+)"', response.text)
            assert links and all(link.startswith("/") for link in links), links
            assert "<script>" not in response.text and " style=" not in response.text
        script = http.get("/static/viewer.js")
        assert script.status_code == 200 and "javascript" in script.headers["content-type"]
        assert "EventSource" in script.text
        assert http.get("/static/viewer.css").headers["content-type"].startswith("text/css")
        listing = http.get("/ui/", params={"status": "awaiting_approval"}).text
        assert "look" in listing and "awaiting_approval" in listing
        assert "look" not in http.get("/ui/", params={"status": "failed"}).text
        missing = http.get("/ui/runs/nope")
        assert missing.status_code == 404 and "no run &#39;nope&#39;" in missing.text
        assert http.get("/", follow_redirects=False).headers["location"] == "/ui/"
