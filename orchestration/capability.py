"""One callable operation of a tool, and how the engine reaches it.

A capability is called over HTTP (the URL always comes from the catalog, never from an
LLM), in-process through a Python callable, or through an :class:`Invoker` that a source
supplies (an MCP server's tool, an OpenAPI operation). This module is the contract those
sources and the transport build on; the :class:`~orchestration.catalog.Catalog` holds
capabilities and builds them from files.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from orchestration import _schema
from orchestration.context import ApprovalCondition
from orchestration.errors import CatalogError
from orchestration.redaction import DEFAULT_REDACTOR

if TYPE_CHECKING:
    from orchestration._transport import CallResult

__all__ = ["IDEMPOTENT_METHODS", "Capability", "Invoker", "check_schema", "schema_problems"]

IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})
_NAME = r"^[A-Za-z_][A-Za-z0-9_.-]*$"


@runtime_checkable
class Invoker(Protocol):
    """How a source (MCP server, OpenAPI spec) calls one of its capabilities.

    ``call`` makes one attempt and never raises except on cancellation: every failure is
    returned as a ``CallResult`` whose ``error`` is a classified ``StepError`` (category,
    code, retryable, request_sent, ...), exactly as the HTTP transport does.
    """

    async def call(
        self, params: dict[str, Any], *, timeout_s: float, headers: Mapping[str, str]
    ) -> CallResult: ...


class Capability(BaseModel):
    """One callable operation of a tool.

    ``idempotent`` defaults from the HTTP method (GET/PUT/DELETE yes, POST/PATCH no), is
    True for Python callables and False for invokers unless stated (their sources state
    it). A non-idempotent capability is never re-sent after an ambiguous failure unless it
    names an ``idempotency_key_header``. ``source`` says where the capability came from
    (``file:config/x.yaml``, ``mcp:weather``, ``openapi:spec.yaml``, ``python``).
    ``requires_approval`` marks destructive capabilities (an MCP ``destructiveHint``).
    """

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    tool: str = Field(pattern=_NAME)
    name: str = Field(pattern=_NAME)
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})
    output_schema: dict[str, Any] | None = None
    url: str | None = None
    method: str = "POST"
    headers: dict[str, str] = Field(default_factory=dict)
    timeout_s: float | None = Field(None, gt=0)
    idempotent: bool | None = None
    idempotency_key_header: str | None = None
    function: Callable[..., Any] | None = Field(default=None, exclude=True, repr=False)
    invoker: Invoker | None = Field(default=None, exclude=True, repr=False)
    source: str = ""
    requires_approval: bool | ApprovalCondition = False
    """True: every call waits for a person; an :class:`ApprovalCondition`: the calls it
    names, by the run's context and the call's parameters."""
    run_in_thread: bool = False
    examples: list[dict[str, Any]] = Field(default_factory=list)
    retry: dict[str, Any] = Field(
        default_factory=dict, description="Per-capability overrides of the retry policy."
    )
    layers: dict[str, Any] = Field(
        default_factory=dict,
        description="Per-capability overrides of layer settings, e.g. "
        "{'validation_feedback_enabled': false, 'max_validation_retries': 1}.",
    )
    max_calls_per_run: int | None = Field(
        None, ge=1,
        description="Budget: at most this many calls of this capability per run (every "
        "attempt sent counts); the next one is not sent and the run stops.",
    )
    circuit: dict[str, Any] = Field(
        default_factory=dict,
        description="Overrides of the tool's circuit breaker settings (ORCH_CIRCUIT_*), "
        "e.g. {'failure_threshold': 3, 'cool_down_s': 10}; false turns it off.",
    )
    answer_template: str | None = Field(
        None,
        description="A Jinja template (sandboxed) that turns this capability's output into "
        "answer text without an LLM (synthesis strategy template): it sees output, params, "
        "step and query.",
    )

    @field_validator("circuit", mode="before")
    @classmethod
    def _circuit_shorthand(cls, value: Any) -> Any:
        """``circuit: false`` (or ``true``) is short for ``{enabled: false}``."""
        if isinstance(value, bool):
            return {"enabled": value}
        return value

    @model_validator(mode="after")
    def _check(self) -> Capability:
        self.method = self.method.upper()
        if sum(x is not None for x in (self.url, self.function, self.invoker)) != 1:
            raise ValueError("needs exactly one of 'url' (HTTP tool), 'function' (Python tool) "
                             "or an invoker (MCP, OpenAPI)")
        if self.url is not None:
            parts = urlsplit(self.url)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                hint = (" (a Python tool is written as function: module:qualname)"
                        if parts.scheme == "python" else "")
                raise ValueError(f"url must be an http:// or https:// URL, got {self.url!r}{hint}")
        if self.idempotent is None:
            self.idempotent = self.function is not None or (
                self.url is not None and self.method in IDEMPOTENT_METHODS)
        if not self.source:
            self.source = "python" if self.function is not None else (
                "http" if self.url is not None else "invoker")
        return self

    def __repr_args__(self) -> Any:
        """What ``repr``/``str`` show: header values of credentials and secrets in the URL
        masked (a capability in a log line or a traceback must not print its key)."""
        for name, value in super().__repr_args__():
            if name == "headers" and isinstance(value, dict):
                value = DEFAULT_REDACTOR.redact_value(value)
            elif name == "url" and isinstance(value, str):
                value = DEFAULT_REDACTOR.redact(value)
            yield name, value


    @property
    def key(self) -> str:
        """``tool.capability``, the name used in logs, metrics and prompts."""
        return f"{self.tool}.{self.name}"

    @property
    def is_idempotent(self) -> bool:
        return bool(self.idempotent)


def schema_problems(schema: Any, where: str, what: str = "input_schema") -> list[str]:
    """Every way ``schema`` is not a valid JSON Schema, each naming ``where`` and its
    JSON path."""
    if not isinstance(schema, dict):
        return [f"{where}: {what} must be a JSON object, got {type(schema).__name__}"]
    return [f"{where}: invalid {what} at {path}: {message}"
            for path, message in _schema.check_schema_errors(schema)]


def check_schema(schema: Any, where: str) -> None:
    """Reject a schema that is not itself a valid JSON Schema, naming ``where`` and the
    JSON path of every problem (not only the first)."""
    problems = schema_problems(schema, where)
    if problems:
        raise CatalogError.of(problems, where)
