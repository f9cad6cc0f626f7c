"""Secrets never reach an answer, and redaction never changes a document's shape.

Through the public surfaces a user sees: ``dagwright serve`` (``/healthz``, ``/v1``
results and errors, the ``/ui`` run page) against a real uvicorn, the CLI's ``--json``
output, the LLM debug store, and dagwright's own fixed messages.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from orchestration import Catalog, Orchestrator, OrchestratorConfig, ScriptedLLM
from orchestration.cli import main as cli_main
from orchestration.redaction import DEFAULT_REDACTOR
from orchestration.store import open_store
from tests.openapi.recording_server import RecordingServer
from tests.orchestration.server.live import live_server

TOKEN = "tok_live_Zq81kd93Jd82ksPq"


def login(user: str) -> dict[str, Any]:
    """A tool whose reply carries a session token (a real API's login answer)."""
    return {"session": {"token": TOKEN, "user": user}, "expires_in": 3600}


def rotate_token(vault: str) -> dict[str, Any]:
    return {"rotated": True, "vault": vault, "version": 7}


def _orchestrator(store_url: str, **config: Any) -> Orchestrator:
    catalog = Catalog()
    catalog.add_function(login, tool="auth", capability="login")
    catalog.add_function(rotate_token, tool="vault", capability="rotate_token")
    plan = {"steps": [
        {"id": "login", "tool": "auth", "capability": "login", "params": {"user": "bob"}},
        {"id": "rotate", "tool": "vault", "capability": "rotate_token",
         "params": {"vault": "main"}}]}

    def answer(request: Any) -> Any:
        return plan if request.purpose == "plan" else "logged in and rotated"

    return Orchestrator(catalog=catalog, llm=ScriptedLLM(answer),
                        config=OrchestratorConfig(store_url=store_url, **config))


def test_a_tool_replys_token_reaches_neither_the_viewer_nor_the_api_nor_the_debug_store(
    tmp_path: Path,
) -> None:
    debug = tmp_path / "debug.jsonl"
    orch = _orchestrator(f"sqlite:///{tmp_path}/runs.db", llm_debug_enabled=True,
                         llm_debug_path=debug)
    result = orch.run("log bob in and rotate the main vault's token")
    assert result.status == "succeeded"
    assert result.steps["login"].output["session"]["token"] == TOKEN  # the caller's own copy
    assert TOKEN not in debug.read_text()
    with live_server(orch) as live:
        page = httpx.get(f"{live.url}/ui/runs/{result.run_id}", timeout=15)
        assert page.status_code == 200 and "session" in page.text
        assert TOKEN not in page.text
        api = httpx.get(f"{live.url}/v1/runs/{result.run_id}", timeout=15)
        assert TOKEN not in api.text
        body = api.json()  # still JSON, same keys, the number kept
        assert body["steps"]["login"]["output"]["session"]["token"] == "[REDACTED]"
        assert body["steps"]["login"]["output"]["expires_in"] == 3600
        assert body["steps"]["rotate"]["output"] == {"rotated": True, "vault": "main",
                                                     "version": 7}


def test_a_store_password_given_as_a_query_parameter_is_in_no_answer(tmp_path: Path) -> None:
    """libpq takes ``?password=``: the store's URL is shown masked in /healthz's 503, in
    /v1 errors and on the viewer's error page."""
    secret = "pg-Secret-9f8e7d"
    url = f"postgresql://dagwright@127.0.0.1:1/runs?password={secret}&sslmode=disable"
    assert secret not in open_store(url).url
    orch = _orchestrator(url)
    with live_server(orch) as live:
        health = httpx.get(f"{live.url}/healthz", timeout=30)
        assert health.status_code == 503 and "postgresql://" in health.text
        runs = httpx.get(f"{live.url}/v1/runs", timeout=30)
        ui = httpx.get(f"{live.url}/ui/", timeout=30, follow_redirects=True)
        for answer in (health, runs, ui):
            assert secret not in answer.text, answer.request.url


def test_runs_show_json_stays_json_when_a_capability_name_says_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = f"sqlite:///{tmp_path}/runs.db"
    result = _orchestrator(url).run("rotate")
    monkeypatch.setenv("ORCH_STORE_URL", url)
    out = io.StringIO()
    assert cli_main(["runs", "show", result.run_id, "--json"], out=out) == 0
    shown = json.loads(out.getvalue())  # valid JSON: keys and numbers kept
    assert shown["steps"]["rotate"]["capability"] == "rotate_token"
    assert shown["steps"]["rotate"]["output"]["version"] == 7
    assert TOKEN not in out.getvalue()


@pytest.mark.parametrize("message", [
    "ORCH_SERVE_TOKEN is set, so a bearer token is required",
    "use sqlite:///PATH, postgresql://USER:PASSWORD@HOST/DB or memory://",
    '{"vault.rotate_token": 3, "calls": 2}',
])
def test_dagwrights_own_fixed_messages_are_left_alone(message: str) -> None:
    assert DEFAULT_REDACTOR.redact(message) == message


@pytest.mark.parametrize(("text", "secret"), [
    ("postgresql://u@db.internal/runs?sslmode=require&password=pg-Secret-1", "pg-Secret-1"),
    ('{"output": "{\\"session\\": {\\"token\\": \\"abc123Secret\\"}}"}', "abc123Secret"),
    ("Authorization: Bearer s3cr3t-Token-42", "s3cr3t-Token-42"),
    ("https://api.example.com/v1?api_key=k-9876543210", "k-9876543210"),
])
def test_secrets_in_urls_and_json_in_json_are_masked(text: str, secret: str) -> None:
    redacted = DEFAULT_REDACTOR.redact(text)
    assert secret not in redacted and "[REDACTED]" in redacted


def test_the_401_of_serve_still_says_what_header_to_send(tmp_path: Path) -> None:
    """Redaction of every answer must not eat the server's own guidance."""
    orch = _orchestrator(f"sqlite:///{tmp_path}/runs.db")
    with live_server(orch, token="s3rve-Token-77abc") as live:
        refused = httpx.get(f"{live.url}/v1/runs", timeout=15)
    assert refused.status_code == 401
    message = refused.json()["error"]["message"]
    assert "[REDACTED]" not in message and "Bearer" in message and "Authorization" in message


# a payment API's answer: an `authorization` object, a cookie, a clipped body
PAYMENT_REPLY = {
    "authorization": {"id": "auth_1", "status": "approved", "amount": 250},
    "payment.authorization": True,
    "cookie": "sid=ck-Secret-31337; theme=dark",
    "headers": {"Authorization": "Token tk-Secret-4242", "Set-Cookie": "a=b; Path=/"},
    "body": "abcdefghijklmnop… [truncated 120 chars]",
    "lines": ["abcdefghijklmnop… [truncated 9 chars]"],
}


@pytest.mark.parametrize("indent", [None, 2])
def test_redacted_json_text_stays_the_same_document(indent: int | None) -> None:
    """Text redaction (logs, the CLI) of a JSON document keeps it JSON with the same keys:
    before, `"authorization": {...}` and `"cookie": "..."` lost their values' structure
    to `[REDACTED]` (and the rest of the line with them), and a clipped value lost its
    opening quote."""
    text = json.dumps(PAYMENT_REPLY, indent=indent, ensure_ascii=False)
    redacted = DEFAULT_REDACTOR.redact(text)
    document = json.loads(redacted)
    assert document.keys() == PAYMENT_REPLY.keys()
    assert document["authorization"]["amount"] == 250
    assert document["payment.authorization"] is True
    for secret in ("ck-Secret-31337", "tk-Secret-4242"):
        assert secret not in redacted


def _payment_orchestrator(store_url: str) -> Orchestrator:
    def pay(amount: int) -> dict[str, Any]:
        return {**PAYMENT_REPLY, "amount": amount}

    catalog = Catalog()
    catalog.add_function(pay, tool="bank", capability="pay")
    plan = {"steps": [{"id": "pay", "tool": "bank", "capability": "pay",
                       "params": {"amount": 250}}]}
    return Orchestrator(catalog=catalog, llm=ScriptedLLM(lambda request: plan),
                        config=OrchestratorConfig(store_url=store_url, synthesis_enabled=False))


def test_runs_show_json_keeps_a_payment_replys_structure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The CLI's JSON is redacted as values, like serve's answers: same document, secret
    strings masked. Before: `"authorization": [REDACTED]` followed by the object's
    members — not JSON."""
    url = f"sqlite:///{tmp_path}/runs.db"
    result = _payment_orchestrator(url).run("pay 250")
    monkeypatch.setenv("ORCH_STORE_URL", url)
    out = io.StringIO()
    assert cli_main(["runs", "show", result.run_id, "--json"], out=out) == 0
    shown = json.loads(out.getvalue())
    output = shown["steps"]["pay"]["output"]
    assert output.keys() == {*PAYMENT_REPLY, "amount"}
    assert output["payment.authorization"] is True and output["amount"] == 250
    assert output["cookie"] == "[REDACTED]"
    assert output["headers"]["Authorization"] == "[REDACTED]"
    for secret in ("ck-Secret-31337", "tk-Secret-4242"):
        assert secret not in out.getvalue()


def test_a_catalog_credential_a_tool_echoes_back_is_kept_nowhere(tmp_path: Path) -> None:
    """A tool that echoes the key the catalog sends it, under an innocent name: the value
    is masked before the run keeps the answer — not in the caller's result, the run
    store's files or the answer prompt sent to the LLM — and the rest of the answer is
    kept as it came."""
    secret = "kx_live_Wq72jd81Ks0pPlain"
    with RecordingServer(answer={"echo": secret, "balance": 12}) as bank:
        catalog = Catalog()
        catalog.add_http(tool="bank", capability="balance", url=bank.url + "/balance",
                         method="GET", headers={"X-Api-Key": secret})
        llm = ScriptedLLM(lambda request: {"steps": [
            {"id": "b", "tool": "bank", "capability": "balance", "params": {}}]}
            if request.purpose == "plan" else "the balance is 12")
        orch = Orchestrator(catalog, llm, OrchestratorConfig(
            store_url=f"sqlite:///{tmp_path / 'runs.db'}"))
        try:
            result = orch.run("what is my balance?")
        finally:
            orch.close()
        assert bank.requests[0].headers["x-api-key"] == secret  # it really was sent
    assert result.status == "succeeded"
    output = result.steps["b"].output
    assert output["balance"] == 12 and output["echo"] != secret
    assert secret not in json.dumps(result.to_dict())
    assert secret not in llm.requests_for("synthesis")[0].prompt_text
    for stored in tmp_path.iterdir():  # the database and its journal files
        assert secret.encode() not in stored.read_bytes(), stored.name
