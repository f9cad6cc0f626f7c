"""Who may use the server: the token (header or the viewer's cookie), same-origin
writes, the Host header of a loopback server, and the refusal to listen beyond loopback
without a token."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from orchestration.cli import main
from tests.orchestration.server.live import LiveServer, live_server, make_orchestrator
from tests.support.side_effects import SideEffectTools

TOKEN = "s3cret-token-for-tests-0123456789"
QUOTE = {"query": "quote", "wait": True, "plan": {"steps": [
    {"id": "q", "tool": "stocks", "capability": "quote", "params": {"symbol": "X"}}]}}


@pytest.fixture
def guarded(tools: SideEffectTools) -> Iterator[LiveServer]:
    with live_server(make_orchestrator(tools.catalog(), serve_token=TOKEN)) as live:
        yield live


def test_with_a_token_every_v1_and_ui_request_needs_it(guarded: LiveServer, tools: SideEffectTools) -> None:
    with httpx.Client(base_url=guarded.url, timeout=10) as http:
        for method, path in [("GET", "/v1/runs"), ("GET", "/v1/runs/x"), ("GET", "/v1/runs/x/events"),
                             ("POST", "/v1/runs"), ("POST", "/v1/runs/x/cancel"), ("GET", "/ui/"),
                             ("GET", "/ui/runs/x")]:
            refused = http.request(method, path, json={} if method == "POST" else None)
            assert refused.status_code == 401, (method, path)
            assert refused.headers["www-authenticate"].startswith("Bearer")
            assert refused.json()["error"]["code"] == "unauthorized"
        wrong = http.get("/v1/runs", headers={"Authorization": f"Bearer {TOKEN}x"})
        assert wrong.status_code == 401
        basic = http.get("/v1/runs", headers={"Authorization": f"Basic {TOKEN}"})
        assert basic.status_code == 401
        assert tools.requests == []
        # health and metrics stay open for probes and Prometheus
        assert http.get("/healthz").status_code == 200 and http.get("/metrics").status_code == 200

    with httpx.Client(base_url=guarded.url, timeout=10,
                      headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        assert http.post("/v1/runs", json=QUOTE).json()["status"] == "succeeded"
        assert http.get("/ui/").status_code == 200


def test_a_browser_signs_in_once_and_gets_a_cookie_not_the_token(guarded: LiveServer) -> None:
    with httpx.Client(base_url=guarded.url, timeout=10) as browser:
        page = browser.get("/ui/runs/x", params={"a": "1"}, headers={"Accept": "text/html"})
        assert page.status_code == 303 and page.headers["location"] == "/login?next=/ui/runs/x%3Fa%3D1"
        assert browser.get("/ui/", headers={"Accept": "text/html"}).headers["location"] == \
            "/login?next=/ui/"
        form = browser.get("/login", params={"next": "/ui/"})
        assert form.status_code == 200 and 'type="password"' in form.text
        failed = browser.post("/login", data={"token": "guess", "next": "/ui/"})
        assert failed.status_code == 401 and "not the server's token" in failed.text
        assert "dagwright_session" not in browser.cookies

        signed = browser.post("/login", data={"token": TOKEN, "next": "https://evil.example/"})
        assert signed.status_code == 303 and signed.headers["location"] == "/ui/"  # no open redirect
        cookie = signed.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and TOKEN not in cookie
        assert browser.get("/ui/").status_code == 200
        assert browser.get("/v1/runs").status_code == 200  # the viewer's own API calls
        browser.cookies.clear()
        browser.cookies.set("dagwright_session", "forged")
        assert browser.get("/v1/runs").status_code == 401


def test_a_page_of_another_origin_cannot_start_runs(tools: SideEffectTools) -> None:
    with live_server(make_orchestrator(tools.catalog())) as server, \
            httpx.Client(base_url=server.url, timeout=10) as http:
        foreign = http.post("/v1/runs", json=QUOTE, headers={"Origin": "https://evil.example"})
        assert foreign.status_code == 403 and foreign.json()["error"]["code"] == "forbidden_origin"
        own = http.post("/v1/runs", json=QUOTE, headers={"Origin": server.url})
        assert own.status_code == 200
        # "null" (a sandboxed or file: page, a no-referrer form) is refused unless the
        # browser itself says the request comes from this server's own page
        for fetch_site in (None, "cross-site", "same-site", "none"):
            headers = {"Origin": "null", **({"Sec-Fetch-Site": fetch_site} if fetch_site else {})}
            refused = http.post("/v1/runs", json=QUOTE, headers=headers)
            assert refused.status_code == 403, fetch_site
            assert refused.json()["error"]["code"] == "forbidden_origin"
        vouched = http.post("/v1/runs", json=QUOTE,
                            headers={"Origin": "null", "Sec-Fetch-Site": "same-origin"})
        assert vouched.status_code == 200
    assert tools.executed["/quote"] == 2


def test_a_loopback_server_without_a_token_refuses_foreign_host_names(tools: SideEffectTools) -> None:
    """What ``dagwright serve`` sets on loopback without a token: a DNS-rebound name is refused."""
    from orchestration.server._security import LOOPBACK_HOSTS

    with live_server(make_orchestrator(tools.catalog()), allowed_hosts=LOOPBACK_HOSTS) as server, \
            httpx.Client(base_url=server.url, timeout=10) as http:
        assert http.get("/v1/runs").status_code == 200
        for host in ("attacker.example", "attacker.example:8080", "127.0.0.1.attacker.example"):
            refused = http.get("/v1/runs", headers={"Host": host})
            assert refused.status_code == 400
            assert refused.json()["error"]["code"] == "invalid_host"  # the one error shape
            assert host in refused.json()["error"]["message"]
        for host in ("localhost:1234", "127.0.0.1", "[::1]:80"):
            assert http.get("/v1/runs", headers={"Host": host}).status_code == 200, host


def test_serve_refuses_to_listen_beyond_loopback_without_a_token(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv("ORCH_SERVE_TOKEN", raising=False)
    assert main(["serve", "--host", "0.0.0.0", "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "refusing to listen on 0.0.0.0 without a token" in err and "--insecure" in err

    monkeypatch.setenv("ORCH_SERVE_TOKEN", "short")
    assert main(["serve", "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "ORCH_SERVE_TOKEN has 5 characters; use at least 16" in err and "short" not in err.replace(
        "ORCH_SERVE_TOKEN has 5 characters", "")


def test_create_app_refuses_a_short_token(tools: SideEffectTools) -> None:
    from orchestration import ConfigError
    from orchestration.server import create_app

    with pytest.raises(ConfigError, match="at least 16"):
        create_app(make_orchestrator(tools.catalog()), token="abc")


def test_serve_refuses_workers_it_cannot_run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """--workers 0 is refused (it once ran one process silently), and so are several
    workers on memory://, where each process would keep its runs to itself (a run started
    through one worker was a 404 through the other)."""
    monkeypatch.delenv("ORCH_SERVE_TOKEN", raising=False)
    monkeypatch.delenv("ORCH_CATALOG", raising=False)  # (were one refusal gone: no server)
    assert main(["serve", "--port", "0", "--workers", "0"]) == 2
    assert "--workers 0: give at least 1" in capsys.readouterr().err
    monkeypatch.setenv("ORCH_STORE_URL", "memory://")
    assert main(["serve", "--port", "0", "--workers", "2"]) == 2
    err = capsys.readouterr().err
    assert "--workers 2 needs a run store its processes share" in err and "sqlite:///" in err
    monkeypatch.setenv("ORCH_SERVE_WORKERS", "2")
    assert main(["serve", "--port", "0"]) == 2
    assert "needs a run store its processes share" in capsys.readouterr().err
