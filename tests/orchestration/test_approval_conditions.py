"""A capability's ``requires_approval`` as a condition over the run's context and the
call's parameters: payments over 100 wait for a person, except in runs for an admin."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from orchestration import Catalog, CatalogError, Orchestrator, OrchestratorConfig, ScriptedLLM
from orchestration.context import ApprovalCondition
from tests.orchestration.test_approvals import QUERY, plan
from tests.support.side_effects import SideEffectTools

CONDITION = {"when": {"params.amount": {"gt": 100}}, "unless": {"context.role": "admin"}}


def catalog(tools: SideEffectTools, condition: Any) -> Catalog:
    spec = tools.catalog()
    for tool in spec["tools"]:
        for cap in tool["capabilities"]:
            if cap["name"] == "pay":
                cap["requires_approval"] = condition
    return Catalog.from_dict(spec, source="test tools")


def test_a_payment_waits_for_a_person_unless_the_run_is_for_an_admin(
    tools: SideEffectTools,
) -> None:
    orch = Orchestrator(catalog=catalog(tools, CONDITION), llm=ScriptedLLM(["unused"]),
                        registry=CollectorRegistry(),
                        config=OrchestratorConfig(store_url="memory://",
                                                  synthesis_enabled=False))
    try:
        waiting = orch.run(QUERY, plan=plan(), context={"user": "u1", "role": "clerk"})
        assert waiting.status == "awaiting_approval"
        [pending] = waiting.pending_approvals
        assert pending.step_id == "pay" and "when params.amount" in pending.reason
        assert tools.executed["/pay"] == 0
        admin = orch.run(QUERY, plan=plan(), context={"user": "u2", "role": "admin"})
        assert admin.status == "succeeded", admin.error
        assert tools.executed["/pay"] == 1
        nobody = orch.run(QUERY, plan=plan())  # no context: the condition asks a person
        assert nobody.status == "awaiting_approval"
    finally:
        orch.close()


def test_conditions_are_checked_when_the_catalog_loads(tools: SideEffectTools) -> None:
    with pytest.raises(CatalogError, match="unknown operator"):
        catalog(tools, {"when": {"params.amount": {"greater": 100}}})
    with pytest.raises(CatalogError, match=r"must be context\.<key> or params\.<path>"):
        catalog(tools, {"when": {"amount": 100}})
    with pytest.raises(CatalogError, match="needs 'when' or 'unless'"):
        catalog(tools, {})
    loaded = catalog(tools, CONDITION).get("bank", "pay")
    assert isinstance(loaded.requires_approval, ApprovalCondition)
    assert Catalog.from_dict(catalog(tools, CONDITION).to_dict(skip_unnamed_functions=True)
                             ).get("bank", "pay").requires_approval == loaded.requires_approval


def test_what_a_condition_decides() -> None:
    rule = ApprovalCondition.model_validate(CONDITION)
    assert rule.requires({"role": "clerk"}, {"amount": 150})
    assert not rule.requires({"role": "admin"}, {"amount": 150})
    assert not rule.requires({"role": "clerk"}, {"amount": 50})
    assert rule.requires({"role": "clerk"}, {"amount": "lots"})  # cannot compare: ask
    tenants = ApprovalCondition.model_validate({"when": {"context.tenant": ["acme", "globex"]}})
    assert tenants.requires({"tenant": "acme"}, {}) and not tenants.requires({"tenant": "x"}, {})
    missing = ApprovalCondition.model_validate({"when": {"context.region": {"exists": False}}})
    assert missing.requires({}, {}) and not missing.requires({"region": "eu"}, {})
