"""The public API, pinned: a change to it must be a deliberate change to this file.

What a user may import is what the three packages export plus the ``__all__`` of every
module without a leading underscore; everything under a ``_module`` is internal. This
test fails when a public name appears or disappears, when a public module is added or
removed, or when a public module forgets ``__all__``.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

import pytest

import executors
import orchestration
import planners

PACKAGE_API = {
    "orchestration": [
        "__version__", "Approval", "ApprovalError", "Attempt", "BudgetExceeded", "Capability",
        "Catalog", "CatalogError", "ConfigError", "ConfigWarning", "DagwrightError",
        "ErrorCategory", "ErrorSource", "http_status_for_category", "LayerSettings",
        "LLMBudgetExceeded", "LLMClient", "LLMError", "LLMErrorKind", "LLMRequest",
        "LLMResponse", "Orchestrator", "OrchestratorConfig", "PendingApproval", "Plan",
        "PLAN_APPROVAL", "PlanningError", "PlanParseError", "PlanValidationError",
        "InvalidInput", "BackendUnavailable", "LeaseLost", "RetryExhausted", "RetryPolicy", "RunEvent", "RunHandle", "RunLeased", "RunNotFound",
        "RunResult", "RunState", "RunUsage", "ScriptedLLM", "Step", "StepError", "StepFailed",
        "StepResult", "StoreError", "TokenUsage", "ToolError", "ToolFailed", "ToolResponse",
        "validate_plan", "ValidatedPlan", "RunContext", "RunLimits", "Session",
        "CredentialsRequired", "Workflow", "WorkflowError"
    ],
    "executors": [
        "REMOVED", "Coercer", "CoercionChange", "CoercionResult", "Decision", "GiveUp", "RecoveryHandler",
        "StepState", "coerce"
    ],
    "planners": [
        "DefaultFeedbackFormatter", "FeedbackFormatter", "PLAN_RESPONSE_SCHEMA", "PlanFeedback",
        "Planner", "PlannerTemplates", "RepairPlan", "RepairSituation", "SignatureRenderer",
        "parse_plan"
    ],
}

PUBLIC_MODULES = [
    "executors.coercion", "executors.faults", "executors.layers", "executors.layers.resilience",
    "executors.layers.semantic_retry", "executors.layers.validation_feedback",
    "executors.recovery", "orchestration.capability", "orchestration.catalog",
    "orchestration.circuit", "orchestration.cli", "orchestration.clock", "orchestration.config",
    "orchestration.context", "orchestration.credentials",
    "orchestration.debug_store", "orchestration.errors", "orchestration.eval", "orchestration.events",
    "orchestration.handle",
    "orchestration.layer_settings", "orchestration.llm", "orchestration.llm.anthropic",
    "orchestration.llm.base", "orchestration.llm.embeddings", "orchestration.llm.openai_compat",
    "orchestration.llm.scripted",
    "orchestration.logging_setup", "orchestration.orchestrator", "orchestration.plan",
    "orchestration.protocol", "orchestration.redaction", "orchestration.result",
    "orchestration.retry_policy", "orchestration.server", "orchestration.services",
    "orchestration.sessions", "orchestration.sources",
    "orchestration.sources.decorated", "orchestration.sources.discovery",
    "orchestration.sources.mcp", "orchestration.sources.openapi", "orchestration.state",
    "orchestration.store", "orchestration.telemetry", "orchestration.telemetry.exporters",
    "orchestration.telemetry.metrics", "orchestration.telemetry.serving",
    "orchestration.temporal", "orchestration.workflows", "orchestration.workflows.model",
    "planners.feedback",
    "planners.parsing", "planners.planner", "planners.prompt", "planners.replan",
    "planners.signatures"
]


def _public_modules() -> list[str]:
    found = []
    for package in (orchestration, planners, executors):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            parts = info.name.split(".")
            if any(p.startswith("_") for p in parts) or "demo" in parts or "templates" in parts:
                continue
            found.append(info.name)
    return sorted(found)


@pytest.mark.parametrize("package", [orchestration, executors, planners], ids=lambda p: p.__name__)
def test_package_exports_are_pinned(package: ModuleType) -> None:
    assert sorted(package.__all__) == sorted(PACKAGE_API[package.__name__])
    for name in package.__all__:
        assert hasattr(package, name), f"{package.__name__}.__all__ names {name!r}, which is missing"


def test_the_set_of_public_modules_is_pinned() -> None:
    assert _public_modules() == PUBLIC_MODULES


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_every_public_module_declares_what_it_exports(name: str) -> None:
    module = importlib.import_module(name)
    exported = getattr(module, "__all__", None)
    assert exported is not None, f"{name} has no __all__"
    missing = [n for n in exported if not hasattr(module, n)]
    assert missing == []
    leaked = [n for n in exported if n.startswith("_") and n != "__version__"]
    assert leaked == []


def test_the_package_api_comes_only_from_public_modules() -> None:
    for package in (orchestration, executors, planners):
        for name in package.__all__:
            origin = getattr(getattr(package, name), "__module__", None)
            if origin is None or name == "__version__":
                continue
            assert not any(p.startswith("_") for p in origin.split(".")), (
                f"{package.__name__}.{name} is defined in internal module {origin}")
