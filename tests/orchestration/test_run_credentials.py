"""Per-run credentials: an end user's bearer token reaches a loopback OpenAPI tool for
that run only, in place of the catalog's, and is never recorded — the run store (SQLite
file bytes, PostgreSQL tables), logs, spans, events, the debug store, the viewer's pages
and every answer of ``dagwright serve`` are scanned for it: 0 hits. A run that needs the
credentials again (resumed after an approval) says so when they are missing."""

from __future__ import annotations

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
from tests.orchestration.server.live import live_server
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
