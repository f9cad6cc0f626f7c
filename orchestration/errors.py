"""The exceptions of dagwright: what the engine raises, and the one signal tools raise.

Each names what was wrong and where, and carries the material needed to act on it
(the attempts of a planning failure, the issues of an invalid plan, ...), so that
nothing is lost when it crosses an API boundary::

    Exception
    ├── DagwrightError                 raised by dagwright; catch this for "anything we raise"
    │   ├── ConfigError                a setting is missing, wrong or contradictory
    │   ├── InvalidInput               an argument of a call cannot be used: a query that
    │   │                              is not valid Unicode, a malformed run id (ValueError)
    │   ├── CatalogError               a catalog is malformed, or a tool/capability unknown
    │   ├── WorkflowError              a saved workflow cannot be found, read, or does not
    │   │                              fit the catalog (``problems`` lists every one)
    │   ├── StoreError                 the run store cannot be opened, read or written
    │   │   └── RunLeased              another process is executing that run right now
    │   │       └── LeaseLost          ... and took it over from this one, which stopped
    │   │                              before sending anything more
    │   ├── CredentialsRequired        a resumed run needs the per-run credentials it was
    │   │                              started with (``names``); resume it with them
    │   ├── RunNotFound                no run with that id in the store
    │   ├── ApprovalError              a decision for a step that is not pending, a run that
    │   │                              is not waiting, or edited parameters that are invalid
    │   ├── PlanValidationError        a plan has problems (``issues`` lists every one)
    │   ├── MalformedAnswer            an LLM answer holds no usable JSON (also a ValueError)
    │   │   └── PlanParseError         ... for a plan
    │   ├── PlanningError              the planner gave up (``attempts`` keeps every answer)
    │   ├── StepFailed                 ``raise_for_status()`` of a failed step
    │   │   └── RetryExhausted         ... that was retried
    │   └── LLMError                   an LLM call failed (``kind`` says why)
    │       └── LLMBudgetExceeded      the run used its LLM call budget
    ├── ToolFailed                     raised BY YOUR TOOLS, never by the engine: a Python
    │                                  tool's structured error (like an HTTP tool's envelope)
    └── Warning
        └── ConfigWarning              a setting looks wrong but is not fatal (an unknown
                                       ``ORCH_*`` variable), shown once

``ToolFailed`` stands apart on purpose: it is a signal a user's tool sends to the engine,
which turns it into a step error; ``except DagwrightError`` around a run must not catch
it, and it never escapes a run.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from orchestration.protocol import ErrorCategory, StepError

if TYPE_CHECKING:
    from orchestration.result import Attempt

__all__ = [
    "ApprovalError",
    "BackendUnavailable",
    "CatalogError",
    "ConfigError",
    "ConfigWarning",
    "CredentialsRequired",
    "DagwrightError",
    "InvalidInput",
    "LLMBudgetExceeded",
    "LLMError",
    "LLMErrorKind",
    "LeaseLost",
    "MalformedAnswer",
    "PlanIssue",
    "PlanParseError",
    "PlanValidationError",
    "PlanningAttempt",
    "PlanningError",
    "RetryExhausted",
    "RunLeased",
    "RunNotFound",
    "StepFailed",
    "StoreError",
    "ToolFailed",
    "WorkflowError",
]


class DagwrightError(Exception):
    """Base class of every error dagwright raises on purpose."""


class ConfigError(DagwrightError, ValueError):
    """The configuration is incomplete or contradictory: names the ``ORCH_*`` variable (or
    argument), the bad value and what is allowed."""


class ConfigWarning(UserWarning):
    """A configuration smell that is not fatal, e.g. an ``ORCH_*`` variable no setting
    reads (a misspelling); issued once per process and name."""


class CatalogError(DagwrightError):
    """The tool catalog is malformed, or a tool/capability is unknown.

    ``problems`` lists every problem found (a catalog is checked whole, so a file with
    several mistakes is fixed in one go); each names the file, tool, capability and,
    for a schema, the JSON path.
    """

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        self.problems = list(problems) if problems else [message]
        super().__init__(message)

    @classmethod
    def of(cls, problems: list[str], source: str = "catalog") -> CatalogError:
        """One error for ``problems``: the problem itself when alone, else a numbered list."""
        if len(problems) == 1:
            return cls(problems[0], problems)
        listed = "\n".join(f"  {n}. {p}" for n, p in enumerate(problems, 1))
        return cls(f"{source}: {len(problems)} problems in the catalog:\n{listed}", problems)


class WorkflowError(DagwrightError):
    """A saved workflow cannot be found or read, is malformed, or no longer fits the
    catalog (a capability gone, parameters that no longer fit its schema).

    ``problems`` lists every problem found — a workflow is checked whole — each naming
    the step and parameter; ``path`` is the workflow's file, when it has one.
    """

    def __init__(self, message: str, problems: list[str] | None = None, *,
                 path: str | None = None) -> None:
        self.problems = list(problems) if problems else [message]
        self.path = path
        super().__init__(message)


class StoreError(DagwrightError):
    """The run store failed: unreachable, full, corrupt, foreign, or a write was lost.

    ``result`` holds the run's result when the run itself got that far, so a failing
    store never loses the work that was done.
    """

    def __init__(self, message: str, *, result: Any = None) -> None:
        super().__init__(message)
        self.result = result


class RunLeased(StoreError):
    """Another live process holds the run (its lease has not expired)."""


class LeaseLost(RunLeased):
    """This process lost the run it was executing: its lease expired by the store's clock
    (a long pause, a frozen VM, a store it could not reach) and another process took the
    run over. Raised before anything more was sent; the run is the new holder's."""


class InvalidInput(DagwrightError, ValueError):
    """An argument of a call (the query, a run id) cannot be used; nothing was recorded."""


class CredentialsRequired(DagwrightError):
    """A run was started with per-run credentials for ``names``, still has calls for
    those tools, and this resume was not given them (they are never stored): resume it
    with ``resume(run_id, credentials={name: {header: value}})``. Nothing was sent."""

    def __init__(self, run_id: str, names: list[str]) -> None:
        self.run_id = run_id
        self.names = list(names)
        shown = ", ".join(repr(n) for n in self.names)
        super().__init__(
            f"run {run_id!r} was started with per-run credentials for {shown}, which are "
            "never stored, and still has calls for them: resume it with "
            f"resume({run_id!r}, credentials={{{self.names[0]!r}: {{...}}}}) "
            "(over HTTP: a \"credentials\" field in POST /v1/runs/<id>/resume, or in the "
            "approval that continues it; on the CLI: --credentials-file FILE). Nothing was "
            "sent.")


class RunNotFound(DagwrightError, LookupError):
    """No run with this id is in the store."""


class BackendUnavailable(DagwrightError):
    """The run backend (the Temporal server) could not be reached or did not answer.

    ``may_be_running`` says whether the run may still be going on (its workers go on
    without this caller); the message says how to look (``dagwright runs show``, and
    ``dagwright resume`` to wait for it again)."""

    def __init__(self, message: str, *, run_id: str | None = None,
                 may_be_running: bool = True, reason: str = "") -> None:
        super().__init__(message)
        self.run_id = run_id
        self.may_be_running = may_be_running
        self.reason = reason or message
        """What the server (or the connection) said, in one line."""


class ApprovalError(DagwrightError, ValueError):
    """A decision that cannot be applied; the run is left exactly as it was."""


@dataclass(frozen=True, slots=True)
class PlanIssue:
    """One problem found in a plan: which step (None: the plan as a whole), what is wrong."""

    step_id: str | None
    message: str

    def __str__(self) -> str:
        return f"step {self.step_id!r}: {self.message}" if self.step_id else self.message


class PlanValidationError(DagwrightError):
    """A plan failed structural or DAG validation; ``issues`` lists every problem found."""

    def __init__(self, issues: list[PlanIssue]) -> None:
        self.issues = issues
        super().__init__("invalid plan: " + "; ".join(str(i) for i in issues))


class MalformedAnswer(DagwrightError, ValueError):
    """An LLM answer holds no readable JSON (or not the JSON shape that was asked for)."""


class PlanParseError(MalformedAnswer):
    """The planner's output could not be read as a plan (not JSON, wrong shape)."""


@dataclass(slots=True)
class PlanningAttempt:
    """One try of the planner: what the LLM said and why it was rejected.

    ``number``, ``kind`` (``accepted``, ``malformed``, ``length``, ``validation`` or the
    :class:`LLMErrorKind` of a failed call) and ``purpose`` (``plan`` or ``replan``) say
    which call it was and how it ended.
    """

    raw_output: str | None
    error: str
    finish_reason: str | None = None
    number: int = 0
    kind: str = ""
    purpose: str = "plan"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class PlanningError(DagwrightError):
    """The planner gave up; ``attempts`` holds every rejected output and its reason."""

    def __init__(self, message: str, attempts: list[PlanningAttempt]) -> None:
        self.attempts = attempts
        detail = "; ".join(f"attempt {n}: {a.error}" for n, a in enumerate(attempts, 1))
        super().__init__(f"{message} ({detail})" if detail else message)


class ToolFailed(Exception):
    """Raised by an in-process (Python) tool to report a structured tool error.

    It is treated exactly like an HTTP tool's ``ToolError`` envelope with the same fields.
    A user signal, not an engine error: it does not derive from :class:`DagwrightError`.
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
    """An LLM call failed. ``kind`` classifies it; ``retry_after_s`` comes from a 429.

    ``partial`` is set when a streamed answer failed after it had started: the text
    received before the failure (possibly empty), so a caller can show what arrived.
    It is ``None`` for a call that failed before any answer began.
    """

    def __init__(
        self,
        kind: LLMErrorKind,
        message: str,
        *,
        status: int | None = None,
        retry_after_s: float | None = None,
        provider: str | None = None,
        raw: str | None = None,
        partial: str | None = None,
    ) -> None:
        self.kind = kind
        self.status = status
        self.retry_after_s = retry_after_s
        self.provider = provider
        self.raw = raw
        self.partial = partial
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
    """A budget of the run is spent; no further LLM call is made.

    ``budget`` says which (``llm_calls``: ``max_llm_calls_per_run``; ``tokens``, ``cost``,
    or ``capability_calls`` when a capability's cap stopped the whole run), ``setting``
    the variable or catalog entry to raise, ``limit`` its value.
    """

    def __init__(
        self, limit: float, *, budget: str = "llm_calls",
        setting: str = "ORCH_MAX_LLM_CALLS_PER_RUN", reason: str | None = None,
    ) -> None:
        message = reason or f"run reached its limit of {limit:g} LLM calls ({setting})"
        super().__init__(LLMErrorKind.BUDGET, message)
        self.limit = limit
        self.budget = budget
        self.setting = setting
