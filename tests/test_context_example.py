"""The web-service example of docs/context.md runs as written: two users of two tenants
ask through it, each with their own token reaching the loopback shop API; a follow-up
uses the first run's output; a big refund waits for a person and is approved with the
approver's own token; each user's history holds their runs only."""

from __future__ import annotations

import asyncio
import json
import re
import sys
import types
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import ROOT
from tests.support.profile_api import profile_api

pytest.importorskip("openapi_spec_validator", reason="the 'openapi' extra is not installed")
pytest.importorskip("starlette", reason="the 'serve' extra is not installed")

ALICE, BOB = "tok-alice-example-0123", "tok-bob-example-0123"
ORDERS = {"steps": [{"id": "orders", "tool": "shop", "capability": "listOrders", "params": {}}]}
REFUND = {"steps": [{"id": "refund", "tool": "shop", "capability": "refund", "params": {
    "body": {"order_id": "{{run:1.orders.orders[0].id}}",
             "amount": "{{run:1.orders.orders[0].amount}}"}}}]}


def example_source() -> str:
    text = (ROOT / "docs" / "context.md").read_text(encoding="utf-8")
    [code] = [block for block in re.findall(r"```python\n(.*?)```", text, re.S)
              if block.startswith("# app.py")]
    return code


def answer(request: Any) -> str:
    if request.purpose != "plan":
        return "Done."
    asked = request.messages[-1]["content"]
    return json.dumps(REFUND if "refund" in asked else ORDERS)


def test_the_web_service_example_serves_two_users_apart(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    with profile_api({ALICE: "alice", BOB: "bob"}) as api:
        monkeypatch.setenv("SHOP_OPENAPI_URL", f"{api.url}/openapi.json")
        monkeypatch.setenv("ORCH_STORE_URL", f"sqlite:///{tmp_path}/runs.db")
        monkeypatch.setenv("ORCH_LLM_PROVIDER", "scripted")
        (tmp_path / "script.json").write_text('["unused"]')
        monkeypatch.setenv("ORCH_LLM_SCRIPT", str(tmp_path / "script.json"))
        module = types.ModuleType("context_example")
        exec(compile(example_source(), "docs/context.md", "exec"), module.__dict__)
        from orchestration import ScriptedLLM

        module.orch.llm = ScriptedLLM(answer)  # the LLM: scripted, as everywhere in tests
        sys.modules.pop("context_example", None)

        async def scenario() -> None:
            transport = httpx.ASGITransport(app=module.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://app") as http:
                def as_(user: str, org: str, token: str, role: str = "member") -> dict[str, str]:
                    return {"X-User": user, "X-Org": org, "X-Role": role,
                            "X-User-Token": f"Bearer {token}"}

                bob = as_("bob", "globex", BOB)
                first = (await http.post("/ask", headers=bob, json={
                    "question": "what did I order?", "conversation": "c1"})).json()
                assert first["status"] == "succeeded", first
                refund = (await http.post("/ask", headers=bob, json={
                    "question": "refund that order", "conversation": "c1"})).json()
                assert refund["status"] == "awaiting_approval"  # 900 > 100, bob no admin
                assert refund["waiting_for"] == ["refund"]
                assert api.refunds == []
                other = as_("alice", "acme", ALICE, "admin")
                assert (await http.post(f"/runs/{refund['run_id']}/approve",
                                        headers=other)).status_code == 404  # not her tenant
                approver = as_("carol", "globex", BOB)
                done = (await http.post(f"/runs/{refund['run_id']}/approve",
                                        headers=approver)).json()
                assert done["status"] == "succeeded", done
                assert api.refunds == [{"user": "bob", "order_id": "o-9", "amount": 900}]
                mine = (await http.post("/ask", headers=other, json={
                    "question": "what did I order?", "conversation": "c1"})).json()
                assert mine["status"] == "succeeded"
                listed = (await http.get("/runs", headers=bob)).json()
                assert {r["run_id"] for r in listed} == {first["run_id"], refund["run_id"]}
                assert {r["context"]["user"] for r in listed} == {"bob"}
            await module.orch.aclose()

        asyncio.run(scenario())
        assert set(api.authorizations) == {f"Bearer {BOB}", f"Bearer {ALICE}"}
