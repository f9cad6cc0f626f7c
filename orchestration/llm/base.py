"""The one interface every LLM client implements, and the request/response shapes.

Clients are async and stateless per request. Every request names its ``purpose`` (why the
engine is asking: plan, validation_feedback, semantic_retry, synthesis, replan, ...) so
that telemetry, the debug store and scripted test LLMs can tell requests apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = ["LLMClient", "LLMRequest", "LLMResponse", "TokenUsage"]


@dataclass(frozen=True)
class TokenUsage:
    """Tokens one LLM call consumed, as the provider reported them (or an estimate)."""

    input_tokens: int = 0
    output_tokens: int = 0


@dataclass
class LLMRequest:
    """What the engine asks an LLM.

    ``response_schema`` asks for structured output (a JSON Schema the answer must match);
    a provider that can enforce it does, the others get the schema in the prompt only.
    """

    purpose: str
    messages: list[dict[str, str]]
    response_schema: dict[str, Any] | None = None
    schema_name: str = "response"
    max_output_tokens: int | None = None
    temperature: float | None = 0.0
    run_id: str | None = None
    step_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def prompt_text(self) -> str:
        """All message contents joined, for assertions and size estimates."""
        return "\n\n".join(m.get("content", "") for m in self.messages)


@dataclass
class LLMResponse:
    """An LLM's answer. ``finish_reason`` is normalised: stop, length, content_filter, tool.

    ``model`` is the model that answered and ``response_id`` the provider's id of the
    completion (both as the provider reported them; they go on the ``chat`` span).
    """

    content: str
    finish_reason: str | None = "stop"
    usage: TokenUsage = field(default_factory=TokenUsage)
    model: str | None = None
    response_id: str | None = None


@runtime_checkable
class LLMClient(Protocol):
    """Anything that can answer an :class:`LLMRequest`.

    Implementations raise :class:`orchestration.errors.LLMError` with a classified ``kind``
    for every failure (connection, timeout, 429, 5xx, malformed body, content filter).
    """

    async def complete(self, request: LLMRequest) -> LLMResponse: ...

    async def aclose(self) -> None: ...
