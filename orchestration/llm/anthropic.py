"""An LLM client for the Anthropic Messages API.

The Messages API differs from Chat Completions in three ways that matter here: the
system prompt is a top-level field rather than a message, a request must alternate
user and assistant turns, and there is no ``response_format``. Structured output is
obtained by forcing the model to call a single tool whose ``input_schema`` is the
requested schema; the tool call's ``input`` is then the answer.

Like :mod:`orchestration.llm.openai_compat`, the client never retries: it classifies
every failure into an :class:`~orchestration.errors.LLMError` for the gateway.

Streaming (:meth:`AnthropicClient.stream`) reads the Messages API's server-sent events:
``message_start`` (id, model, input usage), ``content_block_start``/``_delta``/``_stop``
(``text_delta`` for text, ``input_json_delta`` for the forced tool's input),
``message_delta`` (stop reason, output usage), ``message_stop``, ``ping`` and ``error``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Mapping
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from orchestration.errors import LLMErrorKind
from orchestration.llm._http import (
    HTTPLLMClient,
    error_for_status,
    json_object_body,
    malformed,
    post_json,
    provider_error_message,
    setting_hint,
    token_count,
    tool_name,
)
from orchestration.llm._sse import EventStream, SSEEvent, open_event_stream
from orchestration.llm.base import LLMRequest, LLMResponse, LLMStreamEvent, TokenUsage
from orchestration.llm.scripted import estimate_tokens

__all__ = ["AnthropicClient", "AnthropicStructuredOutput", "split_messages"]

AnthropicStructuredOutput = Literal["auto", "tool", "none"]

_STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "content_filter",
}

# The property a non-object schema is wrapped in, since a tool's input must be an object.
_WRAPPED = "value"

# The ``error`` event of a stream has no HTTP status, only the error's type.
_STREAM_ERROR_KINDS = {
    "overloaded_error": LLMErrorKind.SERVER,
    "api_error": LLMErrorKind.SERVER,
    "rate_limit_error": LLMErrorKind.RATE_LIMIT,
    "timeout_error": LLMErrorKind.TIMEOUT,
    "authentication_error": LLMErrorKind.AUTH,
    "permission_error": LLMErrorKind.AUTH,
    "invalid_request_error": LLMErrorKind.OTHER,
    "request_too_large": LLMErrorKind.OTHER,
    "not_found_error": LLMErrorKind.OTHER,
    "billing_error": LLMErrorKind.OTHER,
}


class AnthropicClient(HTTPLLMClient):
    """Talks to ``{base_url}/v1/messages``.

    ``max_tokens`` is the answer limit used when a request sets none (the API requires
    one). ``structured_output``: ``auto`` and ``tool`` both enforce a request's
    ``response_schema`` with a forced tool call; ``none`` leaves the schema to the prompt.
    ``http_client`` lets the caller share a connection pool; the client then leaves
    closing it to the caller. ``timeout_s`` bounds one whole HTTP call, a streamed one
    from the request to its last byte.
    """

    provider = "anthropic"

    def __init__(
        self,
        *,
        model: str,
        api_key: str | None = None,
        base_url: str = "https://api.anthropic.com",
        timeout_s: float = 60.0,
        max_tokens: int = 4096,
        anthropic_version: str = "2023-06-01",
        structured_output: AnthropicStructuredOutput = "auto",
        http_client: httpx.AsyncClient | None = None,
        extra_headers: dict[str, str] | None = None,
    ) -> None:
        if structured_output not in ("auto", "tool", "none"):
            raise ValueError(f"unknown structured_output mode {structured_output!r}")
        super().__init__(base_url=base_url, model=model, api_key=api_key, timeout_s=timeout_s,
                         http_client=http_client, extra_headers=extra_headers)
        self.max_tokens = max_tokens
        self.anthropic_version = anthropic_version
        self.structured_output: AnthropicStructuredOutput = structured_output

    @property
    def url(self) -> str:
        return f"{self.base_url}/v1/messages"

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """Send one Messages request; raise :class:`LLMError` on any failure."""
        tool, schema, wrapped = self._tool_for(request)
        response = await post_json(
            self._pool(),
            self.url,
            payload=self._payload(request, tool, schema),
            headers=self._headers(),
            timeout_s=self.timeout_s,
            provider=self.provider,
            secret=self._api_key,
        )
        if not response.is_success:
            raise error_for_status(response, provider=self.provider, secret=self._api_key,
                                   hint=self._hint(response))
        return self._parse(response, request, tool=tool, wrapped=wrapped)

    async def stream(self, request: LLMRequest) -> AsyncIterator[LLMStreamEvent]:
        """Stream one Messages answer (see :class:`LLMStreamEvent`).

        Without a schema the deltas are the text. With one (forced tool call) they are
        the tool input's ``input_json_delta`` pieces, so the answer is the JSON text as
        the model writes it; text the model writes around the call is dropped, as
        :meth:`complete` drops it. Two cases arrive in one piece at the end instead: a
        schema that had to be wrapped in ``{"value": ...}`` (the wrapper is removed from
        the whole JSON) and an answer without a tool call (its text). An ``error`` event
        raises :class:`LLMError` classified by its type; a cut stream raises kind
        ``connection`` (or ``timeout``) with the text received so far in ``partial``.
        """
        tool, schema, wrapped = self._tool_for(request)
        async with open_event_stream(
            self._pool(),
            self.url,
            payload={**self._payload(request, tool, schema), "stream": True},
            headers=self._headers(accept="text/event-stream"),
            timeout_s=self.timeout_s,
            provider=self.provider,
            secret=self._api_key,
        ) as stream:
            response = stream.response
            if not response.is_success:
                await stream.read_body()
                raise error_for_status(response, provider=self.provider, secret=self._api_key,
                                       hint=self._hint(response))
            if not stream.is_event_stream:
                # A proxy that ignored "stream": true answered in one piece.
                whole = self._parse(await stream.read_body(), request, tool=tool,
                                    wrapped=wrapped)
                if whole.content:
                    yield LLMStreamEvent(delta=whole.content)
                yield LLMStreamEvent(response=whole)
                return
            reader = _StreamReader(tool=tool, wrapped=wrapped)
            stream.received = reader.received
            async with aclosing(self._stream_events(stream, reader, request)) as events:
                async for event in events:
                    yield event

    # --- request ---------------------------------------------------------------------

    def _tool_for(self, request: LLMRequest) -> tuple[str | None, dict[str, Any] | None, bool]:
        """The forced tool's name and input schema for a structured request, and whether
        the schema had to be wrapped; ``(None, None, False)`` when there is no tool."""
        if request.response_schema is None or self.structured_output == "none":
            return None, None, False
        schema, wrapped = _tool_input_schema(request.response_schema)
        return tool_name(request.schema_name), schema, wrapped

    def _hint(self, response: httpx.Response) -> str:
        """Which ORCH_* setting a 401/404 points at, for the error message."""
        return setting_hint(
            response.status_code, provider_error_message(response.text) or "",
            url=self.url, base_url=self.base_url,
            base_example="https://api.anthropic.com (without /v1: the client adds it)")

    def _headers(self, accept: str = "application/json") -> dict[str, str]:
        headers = {"Accept": accept, "anthropic-version": self.anthropic_version}
        if self._api_key:
            headers["x-api-key"] = self._api_key
        headers.update(self._extra_headers)
        return headers

    def _payload(
        self, request: LLMRequest, tool: str | None, schema: dict[str, Any] | None
    ) -> dict[str, Any]:
        system, messages = split_messages(request.messages)
        payload: dict[str, Any] = {
            "model": self.model,
            "max_tokens": request.max_output_tokens or self.max_tokens,
            "messages": messages,
        }
        if system:
            payload["system"] = system
        if request.temperature is not None:
            payload["temperature"] = request.temperature
        if tool is not None and schema is not None:
            payload["tools"] = [
                {
                    "name": tool,
                    "description": "Give your answer by calling this tool; its input is "
                    "the answer and must match the schema.",
                    "input_schema": schema,
                }
            ]
            payload["tool_choice"] = {"type": "tool", "name": tool}
        return payload

    # --- response --------------------------------------------------------------------

    def _parse(
        self, response: httpx.Response, request: LLMRequest, *, tool: str | None, wrapped: bool
    ) -> LLMResponse:
        data = json_object_body(response, provider=self.provider, secret=self._api_key)
        blocks = data.get("content")
        if not isinstance(blocks, list):
            raise malformed(response, "answer has no content blocks", self.provider, self._api_key)
        blocks = [b for b in blocks if isinstance(b, dict)]

        raw_stop = data.get("stop_reason")
        finish = _STOP_REASONS.get(raw_stop, raw_stop) if isinstance(raw_stop, str) else None
        content: str | None = None
        if tool is not None:
            content = _tool_answer(blocks, tool, wrapped)
        if content is None:
            # No tool call (a refusal, or cut off before it): whatever text there is lets
            # the caller see why; the schema check downstream rejects it as an answer.
            texts = [b.get("text") for b in blocks if b.get("type") == "text"]
            content = "".join(t for t in texts if isinstance(t, str))

        usage = data.get("usage")
        return self._response(request, content, finish,
                              usage if isinstance(usage, dict) else {},
                              data.get("model"), data.get("id"))

    def _response(
        self,
        request: LLMRequest,
        content: str,
        finish: str | None,
        usage: Mapping[str, Any],
        model: object,
        response_id: object,
    ) -> LLMResponse:
        return LLMResponse(
            content=content,
            finish_reason=finish,
            usage=TokenUsage(
                input_tokens=_input_tokens(usage, request),
                output_tokens=token_count(usage.get("output_tokens"), estimate_tokens(content)),
            ),
            model=model if isinstance(model, str) and model else self.model,
            response_id=response_id if isinstance(response_id, str) and response_id else None,
        )

    async def _stream_events(
        self, stream: EventStream, reader: _StreamReader, request: LLMRequest
    ) -> AsyncGenerator[LLMStreamEvent, None]:
        async with aclosing(stream.events()) as events:
            async for event in events:
                data = _event_data(stream, event)
                kind = data.get("type") or event.event
                if kind == "error":
                    raise stream.reported_error(data, event.data, _STREAM_ERROR_KINDS)
                if kind == "message_stop":
                    reader.stopped = True
                    break
                delta = reader.read(kind, data)
                if delta:
                    yield LLMStreamEvent(delta=delta)
        if not reader.stopped and reader.stop_reason is None:
            raise stream.ended_early("message_stop")
        tail = reader.finish()
        if tail:
            yield LLMStreamEvent(delta=tail)
        raw_stop = reader.stop_reason
        finish = _STOP_REASONS.get(raw_stop, raw_stop) if raw_stop else None
        yield LLMStreamEvent(response=self._response(
            request, reader.received(), finish, reader.usage, reader.model, reader.message_id
        ))


@dataclass
class _StreamReader:
    """What a Messages stream has said so far, and which of it is the answer.

    Without a tool the answer is every ``text_delta``, delivered as it comes. With a
    forced tool it is the ``input_json_delta`` of the first ``tool_use`` block named
    after the tool, delivered as it comes unless the schema was wrapped; everything else
    is kept aside for :meth:`finish`, which decides the rest of the answer at the end
    the way :meth:`AnthropicClient.complete` decides it from a whole message.
    """

    tool: str | None
    wrapped: bool
    emitted: list[str] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    tool_json: dict[int, list[str]] = field(default_factory=dict)
    tool_start_input: dict[int, Any] = field(default_factory=dict)
    tool_names: dict[int, str] = field(default_factory=dict)
    live_block: int | None = None  # the block whose JSON is delivered as it comes
    usage: dict[str, Any] = field(default_factory=dict)
    model: object = None
    message_id: object = None
    stop_reason: str | None = None
    stopped: bool = False

    def received(self) -> str:
        return "".join(self.emitted)

    def _emit(self, text: str) -> str:
        if text:
            self.emitted.append(text)
        return text

    def read(self, kind: object, data: Mapping[str, Any]) -> str:
        """Take in one event; return the answer text it adds (often none)."""
        if kind == "message_start":
            message = data.get("message")
            message = message if isinstance(message, dict) else {}
            self.model, self.message_id = message.get("model"), message.get("id")
            self._add_usage(message.get("usage"))
        elif kind == "content_block_start":
            self._start_block(data.get("index"), data.get("content_block"))
        elif kind == "content_block_delta":
            delta = data.get("delta")
            if isinstance(delta, dict):
                return self._delta(data.get("index"), delta)
        elif kind == "message_delta":
            delta = data.get("delta")
            reason = delta.get("stop_reason") if isinstance(delta, dict) else None
            if isinstance(reason, str):
                self.stop_reason = reason
            self._add_usage(data.get("usage"))
        # ping, content_block_stop and event types added later carry no answer text
        return ""

    def _add_usage(self, usage: object) -> None:
        # message_delta's counts are cumulative: later values replace earlier ones
        if isinstance(usage, dict):
            self.usage.update({k: v for k, v in usage.items() if v is not None})

    def _start_block(self, index: object, block: object) -> None:
        if not isinstance(index, int) or not isinstance(block, dict):
            return
        if block.get("type") != "tool_use":
            return
        name = block.get("name")
        self.tool_names[index] = name if isinstance(name, str) else ""
        self.tool_json[index] = []
        self.tool_start_input[index] = block.get("input")
        if self.live_block is None and name == self.tool and not self.wrapped:
            self.live_block = index

    def _delta(self, index: object, delta: Mapping[str, Any]) -> str:
        kind = delta.get("type")
        if kind == "text_delta" and isinstance(delta.get("text"), str):
            if self.tool is None:
                return self._emit(delta["text"])
            self.text.append(delta["text"])
        elif kind == "input_json_delta" and isinstance(index, int) and index in self.tool_json:
            piece = delta.get("partial_json")
            if isinstance(piece, str):
                self.tool_json[index].append(piece)
                if index == self.live_block:
                    return self._emit(piece)
        # thinking_delta, signature_delta, citations_delta: not part of the answer
        return ""

    def finish(self) -> str:
        """The answer text not delivered yet, decided now that the message is whole."""
        if self.tool is None:
            return ""
        if self.live_block is not None:
            if self.emitted:
                return ""
            # a tool call without input deltas: its input came whole in the block start
            return self._emit(json.dumps(self.tool_start_input.get(self.live_block) or {}))
        named = [i for i, name in self.tool_names.items() if name == self.tool]
        index = named[0] if named else min(self.tool_names, default=None)
        if index is None:
            return self._emit("".join(self.text))  # no tool call: the text says why
        text = "".join(self.tool_json[index])
        try:
            value = json.loads(text) if text else self.tool_start_input.get(index) or {}
        except ValueError:
            return self._emit(text)  # cut short (max_tokens): let the caller see it
        if self.wrapped and isinstance(value, dict) and _WRAPPED in value:
            value = value[_WRAPPED]
        return self._emit(json.dumps(value, ensure_ascii=False))


def _event_data(stream: EventStream, event: SSEEvent) -> dict[str, Any]:
    try:
        data = json.loads(event.data)
    except ValueError:
        raise stream.malformed(f"{event.event} event data is not JSON", event.data) from None
    if not isinstance(data, dict):
        raise stream.malformed(f"{event.event} event data is not a JSON object", event.data)
    return data


def split_messages(messages: Iterable[Mapping[str, str]]) -> tuple[str, list[dict[str, str]]]:
    """Chat messages as the Messages API wants them: ``(system, alternating turns)``.

    System messages are joined into the top-level system prompt; any role other than
    ``assistant`` counts as ``user``; consecutive turns of one role are merged, since
    the API requires user and assistant to alternate.
    """
    system: list[str] = []
    turns: list[dict[str, str]] = []
    for message in messages:
        role = message.get("role", "user")
        content = message.get("content", "")
        if role == "system":
            system.append(content)
            continue
        role = "assistant" if role == "assistant" else "user"
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"] += "\n\n" + content
        else:
            turns.append({"role": role, "content": content})
    return "\n\n".join(s for s in system if s), turns


def _tool_input_schema(schema: dict[str, Any] | None) -> tuple[dict[str, Any], bool]:
    """The tool ``input_schema`` for ``schema``, and whether it had to be wrapped.

    A tool's input must be a JSON object, so a schema for anything else (an array, a
    string) is wrapped as the single required property ``value`` and unwrapped again
    from the answer.
    """
    schema = dict(schema or {})
    if schema.get("type") == "object":
        return schema, False
    if "type" not in schema and "properties" in schema:
        return {"type": "object", **schema}, False
    return {"type": "object", "properties": {_WRAPPED: schema}, "required": [_WRAPPED]}, True


def _tool_answer(blocks: list[dict[str, Any]], tool: str, wrapped: bool) -> str | None:
    """The forced tool call's input as JSON text, or None when the model made no call."""
    calls = [b for b in blocks if b.get("type") == "tool_use"]
    call = next((b for b in calls if b.get("name") == tool), calls[0] if calls else None)
    if call is None or "input" not in call:
        return None
    value = call["input"]
    if wrapped and isinstance(value, dict) and _WRAPPED in value:
        value = value[_WRAPPED]
    return json.dumps(value, ensure_ascii=False)


def _input_tokens(usage: Mapping[str, Any], request: LLMRequest) -> int:
    """All prompt tokens: cache reads and writes are reported apart from ``input_tokens``."""
    if not isinstance(usage.get("input_tokens"), int):
        return estimate_tokens(request.prompt_text)
    return sum(
        token_count(usage.get(key), 0)
        for key in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    )

