"""dagwright: plan a query into a DAG of tool calls with an LLM and run it reliably.

The public API lives here; see ``docs/api.md``. Modules whose names start with an
underscore are internal and may change without notice; every other module declares its
public names in ``__all__`` (tests/test_public_api.py pins them).
"""

from orchestration._version import __version__
from orchestration.catalog import Capability, Catalog
from orchestration.config import OrchestratorConfig
from orchestration.errors import (
    CatalogError,
    ConfigError,
    ConfigWarning,
    DagwrightError,
    LLMBudgetExceeded,
    LLMError,
    LLMErrorKind,
    PlanningError,
    PlanParseError,
    PlanValidationError,
    RetryExhausted,
    StepFailed,
    ToolFailed,
)
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
from orchestration.result import Attempt, BudgetExceeded, RunResult, RunUsage, StepResult
from orchestration.retry_policy import RetryPolicy
from orchestration.state import RunState

__all__ = [
    "Attempt",
    "BudgetExceeded",
    "Capability",
    "Catalog",
    "CatalogError",
    "ConfigError",
    "ConfigWarning",
    "DagwrightError",
    "ErrorCategory",
    "ErrorSource",
    "LLMBudgetExceeded",
    "LLMClient",
    "LLMError",
    "LLMErrorKind",
    "LLMRequest",
    "LLMResponse",
    "LayerSettings",
    "Orchestrator",
    "OrchestratorConfig",
    "Plan",
    "PlanParseError",
    "PlanValidationError",
    "PlanningError",
    "RetryExhausted",
    "RetryPolicy",
    "RunResult",
    "RunState",
    "RunUsage",
    "ScriptedLLM",
    "Step",
    "StepError",
    "StepFailed",
    "StepResult",
    "TokenUsage",
    "ToolError",
    "ToolFailed",
    "ToolResponse",
    "ValidatedPlan",
    "__version__",
    "http_status_for_category",
    "validate_plan",
]
