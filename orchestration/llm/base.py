"""The one interface every LLM client implements, and the request/response shapes.

Clients are async and stateless per request. Every request names its ``purpose`` (why the
engine is asking: plan, validation_feedback, semantic_retry, synthesis, replan, ...) so
that telemetry, the debug store and scripted test LLMs can tell requests apart.

Streaming is optional. A client that can stream also has ``stream(request)`` (see
:class:`StreamingLLMClient`); :func:`supports_streaming` tells them apart, and
:func:`stream_from` streams from any client, falling back to ``complete()`` delivered as a
single delta for a client that cannot stream. Callers therefore need only one code path.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeGuard, runtime_checkable

__all__ = [
    "LLMClient",
    "LLMRequest",
    "LLMResponse",
    "LLMStreamEvent",
    "StreamingLLMClient",
    "TokenUsage",
    "stream_from",
    "supports_streaming",
]


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


@dataclass(frozen=True, slots=True)
class LLMStreamEvent:
    """One event of a streamed answer: a piece of text, or the end with the whole answer.

    A stream is zero or more deltas (``delta`` non-empty, ``response`` None) followed by
    exactly one final event (``delta`` empty, ``response`` set) whose
    ``response.content`` is the concatenation of every delta, in order. When structured
    output was requested the deltas are pieces of the JSON text. A stream that fails
    raises :class:`~orchestration.errors.LLMError` instead of its final event; once
    text has been received the error's ``partial`` holds it.

    ``last`` marks a delta after which no more text comes (the final event is next), when
    whoever hands the stream over knows it: the LLM gateway sets it when the whole
    rest of the answer had already arrived, so a reader that acts on pieces as they come
    (the streamed plan) can leave them to the final answer instead.
    """

    delta: str = ""
    response: LLMResponse | None = None
    last: bool = False

    @property
    def final(self) -> bool:
        """Whether this is the last event, the one carrying the whole response."""
        return self.response is not None


@runtime_checkable
class LLMClient(Protocol):
    """Anything that can answer an :class:`LLMRequest`.

    Implementations raise :class:`orchestration.errors.LLMError` with a classified ``kind``
    for every failure (connection, timeout, 429, 5xx, malformed body, content filter).
    """

    async def complete(self, request: LLMRequest) -> LLMResponse: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class StreamingLLMClient(LLMClient, Protocol):
    """An :class:`LLMClient` that can also stream its answer as it is written.

    ``stream`` yields :class:`LLMStreamEvent` values and follows the same error contract
    as ``complete``. Iterate it inside ``contextlib.aclosing`` (or to its end): leaving
    early without closing it keeps the provider's connection open until garbage
    collection.
    """

    def stream(self, request: LLMRequest) -> AsyncIterator[LLMStreamEvent]: ...


def supports_streaming(client: object) -> TypeGuard[StreamingLLMClient]:
    """Whether ``client`` streams natively (has a callable ``stream``)."""
    return callable(getattr(client, "complete", None)) and callable(getattr(client, "stream", None))


async def stream_from(client: LLMClient, request: LLMRequest) -> AsyncIterator[LLMStreamEvent]:
    """Stream ``request`` from any client.

    A streaming client streams; any other client is asked ``complete()`` and its whole
    answer arrives as one delta followed by the final event, so the caller sees the
    same shape either way (only later).
    """
    if supports_streaming(client):
        events = client.stream(request)
        try:
            async for event in events:
                yield event
        finally:
            await close_iterator(events)
        return
    response = await client.complete(request)
    if response.content:
        yield LLMStreamEvent(delta=response.content)
    yield LLMStreamEvent(response=response)


async def close_iterator(iterator: AsyncIterator[Any]) -> None:
    """Close an async iterator that can be closed (an async generator), at once.

    Leaving a stream early without this keeps the provider's connection open until the
    garbage collector gets to the generator.
    """
    aclose = getattr(iterator, "aclose", None)
    if aclose is not None:
        await aclose()
