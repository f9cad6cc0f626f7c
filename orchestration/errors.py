"""The exceptions dagwright raises. All derive from :class:`DagwrightError`.

Each names what was wrong and where, and carries the material needed to act on it
(the attempts of a planning failure, the issues of an invalid plan, ...), so that
nothing is lost when it crosses an API boundary.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Any

from orchestration.protocol import ErrorCategory, StepError

if TYPE_CHECKING:
    from orchestration.result import Attempt


class DagwrightError(Exception):
    """Base class of every error dagwright raises on purpose."""


class ConfigError(DagwrightError):
    """The configuration is incomplete or contradictory (names the setting)."""


class CatalogError(DagwrightError):
    """The tool catalog is malformed, or a tool/capability is unknown."""


class PlanIssue:
    """One problem found in a plan: which step, which field, what is wrong."""

    __slots__ = ("message", "step_id")

    def __init__(self, step_id: str | None, message: str) -> None:
        self.step_id = step_id
        self.message = message

    def __str__(self) -> str:
        return f"step {self.step_id!r}: {self.message}" if self.step_id else self.message

    def __repr__(self) -> str:
        return f"PlanIssue({self.step_id!r}, {self.message!r})"


class PlanValidationError(DagwrightError):
    """A plan failed structural or DAG validation; ``issues`` lists every problem found."""

    def __init__(self, issues: list[PlanIssue]) -> None:
        self.issues = issues
        super().__init__("invalid plan: " + "; ".join(str(i) for i in issues))


class MalformedAnswer(DagwrightError, ValueError):
    """An LLM answer holds no readable JSON (or not the JSON shape that was asked for)."""


class PlanParseError(MalformedAnswer):
    """The planner's output could not be read as a plan (not JSON, wrong shape)."""


class PlanningAttempt:
    """One try of the planner: what the LLM said and why it was rejected."""

    __slots__ = ("error", "finish_reason", "raw_output")

    def __init__(self, raw_output: str | None, error: str, finish_reason: str | None = None) -> None:
        self.raw_output = raw_output
        self.error = error
        self.finish_reason = finish_reason

    def to_dict(self) -> dict[str, Any]:
        return {
            "raw_output": self.raw_output,
            "error": self.error,
            "finish_reason": self.finish_reason,
        }


class PlanningError(DagwrightError):
    """The planner gave up; ``attempts`` holds every rejected output and its reason."""

    def __init__(self, message: str, attempts: list[PlanningAttempt]) -> None:
        self.attempts = attempts
        detail = "; ".join(f"attempt {n}: {a.error}" for n, a in enumerate(attempts, 1))
        super().__init__(f"{message} ({detail})" if detail else message)


class ToolFailed(DagwrightError):
    """Raised by an in-process (Python) tool to report a structured tool error.

    It is treated exactly like an HTTP tool's ``ToolError`` envelope with the same fields.
    """

    def __init__(
        self,
        code: str,
        message: str,
        category: ErrorCategory | str = ErrorCategory.INPUT_ERROR,
        retryable: bool = False,
        details: dict[str, str] | None = None,
    ) -> None:
        self.code = code
        self.message = message
        self.category = ErrorCategory(category)
        self.retryable = retryable
        self.details = dict(details or {})
        super().__init__(f"{self.category.value}/{code}: {message}")


class StepFailed(DagwrightError):
    """A step ended failed; carries the final :class:`StepError` and every attempt."""

    def __init__(self, error: StepError, attempts: list[Attempt] | None = None) -> None:
        self.error = error
        self.attempts = list(attempts or [])
        super().__init__(error.describe())


class RetryExhausted(StepFailed):
    """A step used up every retry the layers allow; ``attempts`` shows what each tried."""


class LLMErrorKind(StrEnum):
    """Why an LLM call failed; decides whether and how it is retried."""

    MALFORMED = "malformed"
    LENGTH = "length"
    CONTENT_FILTER = "content_filter"
    RATE_LIMIT = "rate_limit"
    TIMEOUT = "timeout"
    CONNECTION = "connection"
    SERVER = "server"
    AUTH = "auth"
    BUDGET = "budget"
    OTHER = "other"


class LLMError(DagwrightError):
    """An LLM call failed. ``kind`` classifies it; ``retry_after_s`` comes from a 429."""

    def __init__(
        self,
        kind: LLMErrorKind,
        message: str,
        *,
        status: int | None = None,
        retry_after_s: float | None = None,
        provider: str | None = None,
        raw: str | None = None,
    ) -> None:
        self.kind = kind
        self.status = status
        self.retry_after_s = retry_after_s
        self.provider = provider
        self.raw = raw
        prefix = f"{provider}: " if provider else ""
        suffix = f" (HTTP {status})" if status is not None else ""
        super().__init__(f"{prefix}LLM {kind.value} error{suffix}: {message}")

    @property
    def retryable(self) -> bool:
        """Transport-level failures worth retrying with the same request."""
        return self.kind in (
            LLMErrorKind.RATE_LIMIT,
            LLMErrorKind.TIMEOUT,
            LLMErrorKind.CONNECTION,
            LLMErrorKind.SERVER,
        )


class LLMBudgetExceeded(LLMError):
    """The run used up ``max_llm_calls_per_run``; no further LLM call is made."""

    def __init__(self, limit: int) -> None:
        super().__init__(LLMErrorKind.BUDGET, f"run reached its limit of {limit} LLM calls")
        self.limit = limit
