"""dagwright: plan a query into a DAG of tool calls with an LLM and run it reliably.

The public API lives here; see ``docs/api.md``. Modules whose names start with an
underscore are internal and may change without notice; every other module declares its
public names in ``__all__`` (tests/test_public_api.py pins them).
"""

from orchestration._version import __version__
from orchestration.catalog import Capability, Catalog
from orchestration.config import OrchestratorConfig
from orchestration.context import RunContext
from orchestration.errors import (
    ApprovalError,
    BackendUnavailable,
    CatalogError,
    ConfigError,
    ConfigWarning,
    CredentialsRequired,
    DagwrightError,
    InvalidInput,
    LeaseLost,
    LLMBudgetExceeded,
    LLMError,
    LLMErrorKind,
    PlanningError,
    PlanParseError,
    PlanValidationError,
    RetryExhausted,
    RunLeased,
    RunNotFound,
    StepFailed,
    StoreError,
    ToolFailed,
    WorkflowError,
)
from orchestration.events import RunEvent
from orchestration.handle import RunHandle
from orchestration.layer_settings import LayerSettings
from orchestration.llm.base import LLMClient, LLMRequest, LLMResponse, TokenUsage
from orchestration.llm.scripted import ScriptedLLM
from orchestration.orchestrator import Orchestrator
from orchestration.plan import Plan, Step, ValidatedPlan, validate_plan
from orchestration.protocol import (
    ErrorCategory,
    ErrorSource,
    StepError,
    ToolError,
    ToolResponse,
    http_status_for_category,
)
from orchestration.result import (
    PLAN_APPROVAL,
    Approval,
    Attempt,
    BudgetExceeded,
    PendingApproval,
    RunLimits,
    RunResult,
    RunUsage,
    StepResult,
)
from orchestration.retry_policy import RetryPolicy
from orchestration.sessions import Session
from orchestration.state import RunState
from orchestration.workflows import Workflow

__all__ = [
    "PLAN_APPROVAL",
    "Approval",
    "ApprovalError",
    "Attempt",
    "BackendUnavailable",
    "BudgetExceeded",
    "Capability",
    "Catalog",
    "CatalogError",
    "ConfigError",
    "ConfigWarning",
    "CredentialsRequired",
    "DagwrightError",
    "ErrorCategory",
    "ErrorSource",
    "InvalidInput",
    "LLMBudgetExceeded",
    "LLMClient",
    "LLMError",
    "LLMErrorKind",
    "LLMRequest",
    "LLMResponse",
    "LayerSettings",
    "LeaseLost",
    "Orchestrator",
    "OrchestratorConfig",
    "PendingApproval",
    "Plan",
    "PlanParseError",
    "PlanValidationError",
    "PlanningError",
    "RetryExhausted",
    "RetryPolicy",
    "RunContext",
    "RunEvent",
    "RunHandle",
    "RunLeased",
    "RunLimits",
    "RunNotFound",
    "RunResult",
    "RunState",
    "RunUsage",
    "ScriptedLLM",
    "Session",
    "Step",
    "StepError",
    "StepFailed",
    "StepResult",
    "StoreError",
    "TokenUsage",
    "ToolError",
    "ToolFailed",
    "ToolResponse",
    "ValidatedPlan",
    "Workflow",
    "WorkflowError",
    "__version__",
    "http_status_for_category",
    "validate_plan"
]
