"""dagwright: plan a query into a DAG of tool calls with an LLM and run it reliably.

The public API lives here; see ``docs/api.md``.
"""

from orchestration.catalog import Capability, Catalog
from orchestration.config import OrchestratorConfig
from orchestration.errors import (
    CatalogError,
    ConfigError,
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
from orchestration.llm.base import LLMClient, LLMRequest, LLMResponse, TokenUsage
from orchestration.llm.scripted import ScriptedLLM
from orchestration.orchestrator import Orchestrator
from orchestration.plan import Plan, Step, ValidatedPlan, validate_plan
from orchestration.protocol import (
    ErrorCategory,
    StepError,
    ToolError,
    ToolResponse,
    http_status_for_category,
)
from orchestration.result import Attempt, RunResult, RunUsage, StepResult

__version__ = "0.1.0"


__all__ = [
    "Attempt", "Capability", "Catalog", "CatalogError", "ConfigError", "DagwrightError",
    "ErrorCategory", "LLMBudgetExceeded", "LLMClient", "LLMError", "LLMErrorKind",
    "LLMRequest", "LLMResponse", "Orchestrator", "OrchestratorConfig", "Plan",
    "PlanParseError", "PlanValidationError", "PlanningError", "RetryExhausted", "RunResult",
    "RunUsage", "ScriptedLLM", "Step", "StepError", "StepFailed", "StepResult", "TokenUsage",
    "ToolError", "ToolFailed", "ToolResponse", "ValidatedPlan", "__version__",
    "http_status_for_category", "validate_plan",
]
