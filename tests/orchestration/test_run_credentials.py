"""Per-run credentials: an end user's bearer token reaches a loopback OpenAPI tool for
that run only, in place of the catalog's, and is never recorded — the run store (SQLite
file bytes, PostgreSQL tables), logs, spans, events, the debug store, the viewer's pages
and every answer of ``dagwright serve`` are scanned for it: 0 hits. A run that needs the
credentials again (resumed after an approval) says so when they are missing."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from orchestration import (
    Catalog,
    CredentialsRequired,
    InvalidInput,
    Orchestrator,
    OrchestratorConfig,
    ScriptedLLM,
)
from orchestration.errors import ConfigError
from tests.orchestration.server.live import live_server, wait_for
from tests.support.profile_api import ProfileAPI, profile_api

pytest.importorskip("openapi_spec_validator", reason="the 'openapi' extra is not installed")

ALICE = "tok-alice-" + uuid.uuid4().hex  # the end user's OAuth token
SERVICE = "tok-service-" + uuid.uuid4().hex  # the catalog's own (a service account)
PLAN = {"steps": [
    {"id": "me", "tool": "profiles", "capability": "getProfile", "params": {}},
    {"id": "orders", "tool": "profiles", "capability": "listOrders", "params": {},
     "depends_on": ["me"]},
    {"id": "echo", "tool": "profiles", "capability": "whoami", "params": {}},
]}


@pytest.fixture
def api() -> Iterator[ProfileAPI]:
    with profile_api({ALICE: "alice", SERVICE: "service"}) as server:
        yield server


def catalog_of(api: ProfileAPI, **overrides: Any) -> Catalog:
    return Catalog.from_openapi(f"{api.url}/openapi.json",
                                credentials={"user_token": SERVICE}, **overrides)


def orchestrator(catalog: Catalog, store: str = "memory://", **config: Any) -> Orchestrator:
    return Orchestrator(catalog=catalog, llm=ScriptedLLM(["unused"]),
                        registry=CollectorRegistry(),
                        config=OrchestratorConfig(store_url=store, synthesis_enabled=False,
                                                  **config))


def test_the_run_s_token_replaces_the_catalog_s_for_that_run_only(api: ProfileAPI) -> None:
    orch = orchestrator(catalog_of(api))
    try:
        mine = orch.run("my orders", plan=PLAN, context={"tenant": "shop", "user": "alice"},
                        credentials={"profiles": {"Authorization": f"Bearer {ALICE}"}})
        assert mine.status == "succeeded", mine.error
        assert mine.steps["me"].output == {"user": "alice", "city": "Lisbon", "tier": "gold"}
        assert api.authorizations == [f"Bearer {ALICE}"] * 3
        # the tool echoed the token back: the engine masked it before keeping the answer
        assert ALICE not in json.dumps(mine.to_dict())
        assert mine.steps["echo"].output == {"you_sent": "[REDACTED]"}
        # a run without credentials uses the catalog's own (a service account)
        theirs = orch.run("who am I", plan={"steps": [PLAN["steps"][2]]})
        assert theirs.status == "succeeded", theirs.error
        assert api.authorizations[3:] == [f"Bearer {SERVICE}"]
    finally:
        orch.close()


def test_bad_credentials_are_refused_before_anything_is_recorded(api: ProfileAPI) -> None:
    orch = orchestrator(catalog_of(api))
    try:
        with pytest.raises(InvalidInput, match="'nosuch': the catalog has no tool"):
            orch.run("x", plan=PLAN, credentials={"nosuch": {"Authorization": "Bearer x"}})
        with pytest.raises(InvalidInput, match="not an HTTP header name"):
            orch.run("x", plan=PLAN, credentials={"profiles": {"Bad Header": "x"}})
        with pytest.raises(InvalidInput, match=r"header 'Authorization' must be .* \(the value "
                                               r"is not shown\)") as refused:
            orch.run("x", plan=PLAN, credentials={"profiles": {"Authorization": "a\r\nb"}})
        assert "a\r\nb" not in str(refused.value)
        assert orch.list_runs() == []
        assert api.authorizations == []
    finally:
        orch.close()


def test_a_resumed_run_asks_for_the_credentials_again(api: ProfileAPI, tmp_path: Path) -> None:
    catalog = catalog_of(api, overrides={"refund": {"requires_approval": True}})
    plan = {"steps": [
        {"id": "orders", "tool": "profiles", "capability": "listOrders", "params": {}},
        {"id": "refund", "tool": "profiles", "capability": "refund",
         "params": {"body": {"order_id": "{{orders.orders[0].id}}", "amount": 120}}},
    ]}
    store = f"sqlite:///{tmp_path}/runs.db"
    orch = orchestrator(catalog, store)
    given = {"profiles": {"Authorization": f"Bearer {ALICE}"}}
    try:
        paused = orch.run("refund my tent", plan=plan, credentials=given)
        assert paused.status == "awaiting_approval"
    finally:
        orch.close()
    from orchestration import Approval
    later = orchestrator(catalog_of(api, overrides={"refund": {"requires_approval": True}}),
                         store)  # another process: the credentials are gone with the first
    try:
        with pytest.raises(CredentialsRequired, match=r"credentials for 'profiles'.*resume\(") \
                as needed:
            later.resume(paused.run_id, approvals={"refund": Approval(approved=True)})
        assert needed.value.names == ["profiles"]
        assert api.refunds == []  # nothing was sent, and nothing was decided
        assert later.get_run(paused.run_id).status == "awaiting_approval"  # type: ignore[union-attr]
        done = later.resume(paused.run_id, approvals={"refund": Approval(approved=True)},
                            credentials=given)
        assert done.status == "succeeded", done.error
        assert api.refunds == [{"user": "alice", "order_id": "o-1", "amount": 120}]
        assert api.authorizations[-1] == f"Bearer {ALICE}"
    finally:
        later.close()
    assert ALICE.encode() not in (tmp_path / "runs.db").read_bytes()


def test_credentials_are_refused_on_temporal(api: ProfileAPI) -> None:
    orch = orchestrator(catalog_of(api), backend="temporal")
    try:
        with pytest.raises(ConfigError, match="refused on the Temporal backend"):
            orch.run("x", plan=PLAN, credentials={"profiles": {"Authorization": "Bearer t"}})
    finally:
        orch.close()


def _logs() -> tuple[logging.Handler, list[str]]:
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(self.format(record) + json.dumps(record.__dict__, default=str))

    return Keep(level=logging.DEBUG), lines


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/runs.db"
    server = request.getfixturevalue("postgres_server")
    return str(server.create_database(f"creds_{uuid.uuid4().hex[:10]}"))


def _store_text(store_url: str, tmp_path: Path) -> bytes:
    """Everything the run store holds: the SQLite files' bytes, or every row of every
    dagwright table of the PostgreSQL database as text."""
    if store_url.startswith("sqlite"):
        files = [p for p in tmp_path.iterdir() if p.name.startswith("runs.db")]
        assert files
        return b"".join(p.read_bytes() for p in files)
    import psycopg

    out: list[str] = []
    with psycopg.connect(store_url) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_name LIKE "
            "'dagwright_%'").fetchall()]
        assert "dagwright_runs" in tables and "dagwright_events" in tables
        for table in tables:
            out.append(repr(conn.execute(f"SELECT * FROM {table}").fetchall()))
    return "\n".join(out).encode()


@pytest.mark.slow
def test_a_per_run_token_is_in_no_sink(api: ProfileAPI, store_url: str, tmp_path: Path) -> None:
    """The scan: the token reached the tool, and appears in nothing that was recorded or
    answered — with a tool that echoes it back, and a request the server refuses."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    handler, lines = _logs()
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    debug = tmp_path / "llm-debug.jsonl"
    script = [json.dumps(PLAN), "You are alice in Lisbon with two orders."]
    orch = Orchestrator(
        catalog=catalog_of(api), llm=ScriptedLLM(script), registry=CollectorRegistry(),
        tracer_provider=provider,
        config=OrchestratorConfig(store_url=store_url, llm_debug_enabled=True,
                                  llm_debug_path=debug, stream_plan=False))
    answers: list[str] = []
    given = {"profiles": {"Authorization": f"Bearer {ALICE}"}}
    try:
        with live_server(orch) as server, httpx.Client(base_url=server.url, timeout=30) as http:
            def keep(response: httpx.Response) -> httpx.Response:
                answers.append(f"{response.status_code} {dict(response.headers)} {response.text}")
                return response

            done = keep(http.post("/v1/runs", json={
                "query": "where do I live and what did I order?", "wait": True,
                "context": {"tenant": "shop", "user": "alice"}, "credentials": given})).json()
            assert done["status"] == "succeeded", done
            run_id = done["run_id"]
            refused = keep(http.post("/v1/runs", json={
                "query": "x", "credentials": {"profiles": {"Authorization": ALICE + "\r\n"}}}))
            assert refused.status_code == 422
            unknown = keep(http.post("/v1/runs", json={
                "query": "x", "credentials": {"nosuch": {"Authorization": ALICE}}}))
            assert unknown.status_code == 422
            for path in ("/v1/runs", f"/v1/runs/{run_id}", f"/v1/runs/{run_id}/events",
                         "/ui/", f"/ui/runs/{run_id}", "/metrics", "/healthz"):
                keep(http.get(path))
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
        orch.close()
    # the token reached the tool, for every call of the run
    assert api.authorizations[:3] == [f"Bearer {ALICE}"] * 3
    spans = [span.to_json() for span in exporter.get_finished_spans()]
    assert any('"dagwright.context.user": "alice"' in s for s in spans)
    sinks = {
        "run store": _store_text(store_url, tmp_path),
        "logs": "\n".join(lines).encode(),
        "spans": "\n".join(spans).encode(),
        "debug store": debug.read_bytes(),
        "serve answers (API, events, viewer, metrics)": "\n".join(answers).encode(),
    }
    assert all(sinks.values()), [name for name, text in sinks.items() if not text]
    hits = {name: text.count(ALICE.encode()) for name, text in sinks.items()}
    assert hits == dict.fromkeys(sinks, 0)


def test_an_mcp_server_over_http_gets_the_run_s_header_on_a_session_of_its_own() -> None:
    """The catalog lists the server's tools with the service's token; a run's own token
    replaces it on a session opened for that run's credentials — a wrong one is refused
    by the server (so the service's token was not used), the user's is accepted."""
    from tests.support.sources import mcp_http_server
    from tests.support.sources import orchestrator as scripted

    service, user = "svc-" + uuid.uuid4().hex, "usr-" + uuid.uuid4().hex
    with mcp_http_server(token=f"{service},{user}") as url:
        catalog = Catalog()
        catalog.add_mcp_server("calc", url=url, headers={"Authorization": f"Bearer {service}"})
        step = {"id": "s1", "tool": "calc", "capability": "add", "params": {"a": 2, "b": 3}}
        try:
            orch = scripted(catalog, ["unused"])
            wrong = orch.run("add", plan={"steps": [step]},
                             credentials={"mcp:calc": {"Authorization": "Bearer nope"}})
            assert wrong.status == "failed"
            assert wrong.steps["s1"].error is not None
            assert wrong.steps["s1"].error.category == "AUTH_ERROR"
            assert "nope" not in json.dumps(wrong.to_dict())
            right = orch.run("add", plan={"steps": [step]},
                             credentials={"calc": {"Authorization": f"Bearer {user}"}})
            assert right.status == "succeeded", right.error
            assert right.steps["s1"].output == {"total": 5}
            with pytest.raises(InvalidInput, match="cannot carry per-run headers"):
                stdio = Catalog()
                from tests.support.sources import STDIO_COMMAND
                stdio.add_mcp_server("local", command=STDIO_COMMAND, tools=["add"])
                try:
                    scripted(stdio, ["unused"]).run(
                        "add", plan={"steps": [{**step, "tool": "local"}]},
                        credentials={"local": {"Authorization": "Bearer x"}})
                finally:
                    stdio.close()
        finally:
            catalog.close()


async def test_parking_a_stopped_run_logs_no_store_error(
        api: ProfileAPI, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A run that stopped with its process and needs its per-run credentials is parked
    (what ``dagwright serve`` does for a dead server's run): marked, not taken over, and
    nothing else — no ERROR "this process no longer holds the run" after it (the marking's
    own write used to be flushed again once its lease was let go)."""
    store = f"sqlite:///{tmp_path}/runs.db"
    first = orchestrator(catalog_of(api), store)
    try:
        handle = await first.astart("my orders", plan=PLAN, run_id="parked-1",
                                    credentials={"profiles": {"Authorization": f"Bearer {ALICE}"}})
        await handle.interrupt()  # its process stopped: it stays running, resumable
    finally:
        await first.aclose()
    later = orchestrator(catalog_of(api), store)
    caplog.set_level(logging.INFO, logger="dagwright")
    try:
        assert await later.apark_for_credentials("parked-1") == ["profiles"]
        await asyncio.sleep(0.3)  # (past the recorder's flush delay)
        run = await later.aget_run("parked-1")
    finally:
        await later.aclose()
    assert run is not None and run.status == "running"
    parked = [w for w in run.warnings if w.startswith("waiting for per-run credentials")]
    assert len(parked) == 1 and "'profiles'" in parked[0], run.warnings
    # shown whole wherever answers are redacted (the API, the viewer, `runs show`): its
    # wording used to read as a secret's key and value, and a word of it was masked
    assert later.redactor.redact_value(parked) == parked
    assert "dagwright resume parked-1 --credentials-file" in parked[0]
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == []


def test_credentials_required_over_http_names_the_tools(api: ProfileAPI, tmp_path: Path) -> None:
    """docs/serve.md: a run started with per-run credentials continued without them is a
    409 whose details.credentials_for names the tools — names, so not masked as secrets."""
    catalog = catalog_of(api, overrides={"refund": {"requires_approval": True}})
    plan = {"steps": [{"id": "refund", "tool": "profiles", "capability": "refund",
                       "params": {"body": {"order_id": "o-1", "amount": 120}}}]}
    given = {"profiles": {"Authorization": f"Bearer {ALICE}"}}
    orch = orchestrator(catalog, f"sqlite:///{tmp_path}/runs.db")
    with live_server(orch) as server, httpx.Client(base_url=server.url, timeout=30) as http:
        paused = http.post("/v1/runs", json={"query": "refund my tent", "plan": plan,
                                             "wait": True, "credentials": given}).json()
        assert paused["status"] == "awaiting_approval", paused
        refused = http.post(f"/v1/runs/{paused['run_id']}/approvals/refund",
                            json={"approved": True})
        assert refused.status_code == 409, refused.text
        error = refused.json()["error"]
        assert error["code"] == "credentials_required"
        assert error["details"]["credentials_for"] == ["profiles"]
    assert api.refunds == []


def test_a_run_id_of_a_stopped_run_asked_again_without_its_credentials_is_credentials_required(
        api: ProfileAPI, tmp_path: Path) -> None:
    """POST /v1/runs naming a run that stopped with its process continues it; without the
    per-run credentials it needs that is the 409 credentials_required a resume answers
    (naming the tools), not a 409 run_id_conflict saying the id is another query's."""
    store = f"sqlite:///{tmp_path}/runs.db"
    given = {"profiles": {"Authorization": f"Bearer {ALICE}"}}

    async def start_and_stop() -> None:
        first = orchestrator(catalog_of(api), store)
        try:
            handle = await first.astart("my orders", plan=PLAN, run_id="stopped-1",
                                        credentials=given)
            await handle.interrupt()  # its process stopped: it stays running, resumable
        finally:
            await first.aclose()

    asyncio.run(start_and_stop())
    with live_server(orchestrator(catalog_of(api), store)) as server, \
            httpx.Client(base_url=server.url, timeout=30) as http:
        again = http.post("/v1/runs", json={"query": "my orders", "plan": PLAN,
                                            "run_id": "stopped-1", "wait": True})
        assert again.status_code == 409, again.text
        error = again.json()["error"]
        assert error["code"] == "credentials_required", error
        assert error["details"]["credentials_for"] == ["profiles"]
        carrying = http.post("/v1/runs", json={"query": "my orders", "plan": PLAN,
                                               "run_id": "stopped-1", "wait": True,
                                               "credentials": given})
        assert carrying.status_code == 200, carrying.text
        assert carrying.json()["status"] == "succeeded"


def test_a_decision_without_the_run_s_credentials_is_refused_as_such_on_a_full_server(
        api: ProfileAPI, tmp_path: Path) -> None:
    """A full server (no slot for the run) answered a decision that lacks the run's
    per-run credentials with 429 'try again in a few seconds' — a request that could
    never be carried out as sent. It is the 409 credentials_required a free server
    answers; a decision that brings them is the 429 to send again (never queued)."""
    import asyncio as aio

    async def wait() -> str:
        await aio.sleep(30)
        return "done"

    catalog = catalog_of(api, overrides={"refund": {"requires_approval": True}})
    catalog.add_function(wait, tool="clock", capability="wait",
                         input_schema={"type": "object", "properties": {}})
    plan = {"steps": [{"id": "refund", "tool": "profiles", "capability": "refund",
                       "params": {"body": {"order_id": "o-1", "amount": 120}}}]}
    given = {"profiles": {"Authorization": f"Bearer {ALICE}"}}
    orch = orchestrator(catalog, f"sqlite:///{tmp_path}/runs.db")
    with live_server(orch, max_runs=1) as server, \
            httpx.Client(base_url=server.url, timeout=30) as http:
        paused = http.post("/v1/runs", json={"query": "refund my tent", "plan": plan,
                                             "wait": True, "credentials": given}).json()
        assert paused["status"] == "awaiting_approval", paused
        busy = http.post("/v1/runs", json={"query": "wait", "run_id": "busy", "plan": {
            "steps": [{"id": "w", "tool": "clock", "capability": "wait", "params": {}}]}})
        assert busy.status_code == 202, busy.text  # the one slot is taken
        decide = f"/v1/runs/{paused['run_id']}/approvals/refund"
        without = http.post(decide, json={"approved": True})
        assert without.status_code == 409, without.text
        assert without.json()["error"]["code"] == "credentials_required"
        carrying = http.post(decide, json={"approved": True, "credentials": given})
        assert carrying.status_code == 429, carrying.text
        http.post("/v1/runs/busy/cancel")
        done = http.post(decide, json={"approved": True, "credentials": given})
        assert done.status_code == 202, done.text
        wait_for(lambda: http.get(f"/v1/runs/{paused['run_id']}").json()["status"]
                 == "succeeded")
    assert len(api.refunds) == 1
