"""An LLM client for any OpenAI-compatible Chat Completions endpoint.

One client covers OpenAI itself and the self-hosted servers that imitate it (vLLM,
Ollama, llama.cpp, LM Studio, ...). Those servers differ mostly in how much of
``response_format`` they understand, so the default ``structured_output="auto"`` asks
for the strongest form (``json_schema``) and steps down to ``json_object`` and then to
nothing when the server rejects it, remembering the step for later calls.

The client never retries a failed call itself: the :class:`~orchestration.llm._gateway`
does that with backoff and a budget. It only classifies every failure into an
:class:`~orchestration.errors.LLMError` so the gateway can decide.

The HTTP plumbing shared with :mod:`orchestration.llm.anthropic` lives in
:mod:`orchestration.llm._http`, the server-sent events of :meth:`stream` in
:mod:`orchestration.llm._sse`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import aclosing
from typing import Any, Literal

import httpx

from orchestration._json import decode
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
from orchestration.llm._sse import EventStream, open_event_stream
from orchestration.llm.base import LLMRequest, LLMResponse, LLMStreamEvent, TokenUsage
from orchestration.llm.scripted import estimate_tokens

__all__ = ["EffectiveStructuredOutput", "OpenAICompatibleClient", "StructuredOutputMode"]

StructuredOutputMode = Literal["auto", "json_schema", "json_object", "none"]
EffectiveStructuredOutput = Literal["json_schema", "json_object", "none"]

# Strongest first: a downgrade only ever moves right in this list.
_STRENGTH: tuple[EffectiveStructuredOutput, ...] = ("json_schema", "json_object", "none")

_FINISH_REASONS = {
    "stop": "stop",
    "length": "length",
    "content_filter": "content_filter",
    "tool_calls": "stop",
    "function_call": "stop",
}

# What a server that does not understand a response_format says about it.
_RESPONSE_FORMAT_WORDS = ("response_format", "json_schema", "json_object")

# An error chunk in the middle of a stream carries a type rather than a status.
_STREAM_ERROR_KINDS = {
    "server_error": LLMErrorKind.SERVER,
    "api_error": LLMErrorKind.SERVER,
    "overloaded_error": LLMErrorKind.SERVER,
    "rate_limit_exceeded": LLMErrorKind.RATE_LIMIT,
    "rate_limit_error": LLMErrorKind.RATE_LIMIT,
    "timeout": LLMErrorKind.TIMEOUT,
    "invalid_request_error": LLMErrorKind.OTHER,
}


class OpenAICompatibleClient(HTTPLLMClient):
    """Talks to ``{base_url}/chat/completions`` of an OpenAI-compatible server.

    ``base_url`` includes the API version prefix, e.g. ``https://api.openai.com/v1`` or
    ``http://127.0.0.1:11434/v1``. ``structured_output`` decides how a request's
    ``response_schema`` is enforced: ``json_schema`` (the server constrains the answer
    to the schema), ``json_object`` (any JSON object; the schema is only in the prompt),
    ``none`` (prompt only), or ``auto`` (``json_schema``, stepping down on rejection;
    :attr:`effective_structured_output` shows the mode currently in use).

    ``http_client`` lets the caller share a connection pool; the client then leaves
    closing it to the caller. ``timeout_s`` bounds one whole HTTP call, a streamed one
    from the request to its last byte.

    :meth:`stream` asks for ``"stream": true`` with ``stream_options.include_usage`` (the
    token counts arrive in a last chunk); a server that rejects ``stream_options`` is
    asked again without it, remembered like a ``response_format`` step-down, and its
    usage is then estimated.
    """

    provider = "openai"

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        structured_output: StructuredOutputMode = "auto",
        http_client: httpx.AsyncClient | None = None,
        extra_headers: dict[str, str] | None = None,
    ) -> None:
        if structured_output not in ("auto", *_STRENGTH):
            raise ValueError(f"unknown structured_output mode {structured_output!r}")
        super().__init__(base_url=base_url, model=model, api_key=api_key, timeout_s=timeout_s,
                         http_client=http_client, extra_headers=extra_headers)
        self.structured_output: StructuredOutputMode = structured_output
        self.effective_structured_output: EffectiveStructuredOutput = (
            "json_schema" if structured_output == "auto" else structured_output
        )
        self.stream_usage = True  # whether streams ask for stream_options.include_usage

    @property
    def url(self) -> str:
        return f"{self.base_url}/chat/completions"

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """Send one Chat Completions request; raise :class:`LLMError` on any failure."""
        mode = self._mode_for(request)
        while True:
            response = await post_json(
                self._pool(),
                self.url,
                payload=self._payload(request, mode),
                headers=self._headers(),
                timeout_s=self.timeout_s,
                provider=self.provider,
                secret=self._api_key,
            )
            if (
                self.structured_output == "auto"
                and mode != "none"
                and _rejects_response_format(response)
            ):
                mode = _STRENGTH[_STRENGTH.index(mode) + 1]
                self._downgrade(mode)
                continue
            if not response.is_success:
                raise error_for_status(response, provider=self.provider, secret=self._api_key,
                                       hint=self._hint(response))
            return self._parse(response, request)

    async def stream(self, request: LLMRequest) -> AsyncIterator[LLMStreamEvent]:
        """Stream one Chat Completions answer (see :class:`LLMStreamEvent`).

        The deltas are ``choices[0].delta.content`` — the JSON text itself under
        ``json_schema``/``json_object``. Failures raise :class:`LLMError` as
        :meth:`complete` does; a stream cut after it began raises kind ``connection`` (or
        ``timeout``) with the text received so far in ``partial``.
        """
        mode = self._mode_for(request)
        while True:
            async with open_event_stream(
                self._pool(),
                self.url,
                payload=self._stream_payload(request, mode),
                headers=self._headers(accept="text/event-stream"),
                timeout_s=self.timeout_s,
                provider=self.provider,
                secret=self._api_key,
            ) as stream:
                response = stream.response
                if not response.is_success:
                    await stream.read_body()
                    if (
                        self.structured_output == "auto"
                        and mode != "none"
                        and _rejects_response_format(response)
                    ):
                        mode = _STRENGTH[_STRENGTH.index(mode) + 1]
                        self._downgrade(mode)
                        continue
                    if self.stream_usage and _rejects_stream_options(response):
                        self.stream_usage = False
                        continue
                    raise error_for_status(response, provider=self.provider,
                                           secret=self._api_key, hint=self._hint(response))
                if not stream.is_event_stream:
                    # A server that ignored "stream": true answered in one piece.
                    whole = self._parse(await stream.read_body(), request)
                    if whole.content:
                        yield LLMStreamEvent(delta=whole.content)
                    yield LLMStreamEvent(response=whole)
                    return
                async with aclosing(self._stream_events(stream, request)) as events:
                    async for event in events:
                        yield event
                return
    def _hint(self, response: httpx.Response) -> str:
        example = "https://api.openai.com/v1 or http://127.0.0.1:11434/v1"
        if response.status_code == 404 and not self.base_url.endswith("/v1"):
            example += " (yours has no /v1)"
        return setting_hint(response.status_code, provider_error_message(response.text) or "",
                            url=self.url, base_url=self.base_url, base_example=example)

    # --- request ---------------------------------------------------------------------

    def _mode_for(self, request: LLMRequest) -> EffectiveStructuredOutput:
        if request.response_schema is None:
            return "none"
        if self.structured_output == "auto":
            return self.effective_structured_output
        return self.structured_output

    def _downgrade(self, mode: EffectiveStructuredOutput) -> None:
        # Concurrent requests may each discover the rejection; never step back up.
        if _STRENGTH.index(mode) > _STRENGTH.index(self.effective_structured_output):
            self.effective_structured_output = mode

    def _headers(self, accept: str = "application/json") -> dict[str, str]:
        headers = {"Accept": accept}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        headers.update(self._extra_headers)
        return headers

    def _payload(self, request: LLMRequest, mode: EffectiveStructuredOutput) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": [dict(m) for m in request.messages],
        }
        if request.max_output_tokens is not None:
            payload["max_tokens"] = request.max_output_tokens
        if request.temperature is not None:
            payload["temperature"] = request.temperature
        if request.response_schema is not None:
            if mode == "json_schema":
                payload["response_format"] = {
                    "type": "json_schema",
                    "json_schema": {
                        "name": tool_name(request.schema_name),
                        "schema": request.response_schema,
                        # Strict mode demands a restricted schema dialect (every property
                        # required, no additionalProperties); ours are ordinary schemas.
                        "strict": False,
                    },
                }
            elif mode == "json_object":
                payload["response_format"] = {"type": "json_object"}
        return payload

    def _stream_payload(
        self, request: LLMRequest, mode: EffectiveStructuredOutput
    ) -> dict[str, Any]:
        payload = self._payload(request, mode)
        payload["stream"] = True
        if self.stream_usage:
            payload["stream_options"] = {"include_usage": True}
        return payload

    # --- response --------------------------------------------------------------------

    def _parse(self, response: httpx.Response, request: LLMRequest) -> LLMResponse:
        data = json_object_body(response, provider=self.provider, secret=self._api_key)
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise malformed(response, "answer has no choices", self.provider, self._api_key)
        choice = choices[0]
        message = choice.get("message")
        if not isinstance(message, dict):
            raise malformed(response, "first choice has no message", self.provider, self._api_key)

        raw_finish = choice.get("finish_reason")
        finish = raw_finish if isinstance(raw_finish, str) else None
        finish = _FINISH_REASONS.get(finish, finish) if finish else None
        content = _message_text(message)
        if content is None:
            refusal = message.get("refusal")
            if isinstance(refusal, str) and refusal:
                # Structured-output refusals come as a separate field with no content.
                content, finish = refusal, "content_filter"
            elif finish in ("content_filter", "length"):
                # Filtered or cut off before any text: an empty answer, not a broken one.
                content = ""
            else:
                raise malformed(
                    response, "message has neither content nor tool_calls",
                    self.provider, self._api_key,
                )

        # Some servers omit usage; an estimate keeps budgets and metrics meaningful.
        usage = data.get("usage")
        usage = usage if isinstance(usage, dict) else {}
        model = data.get("model")
        return self._response(request, content, finish, usage, model, data.get("id"))

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
                input_tokens=token_count(
                    usage.get("prompt_tokens"), estimate_tokens(request.prompt_text)
                ),
                output_tokens=token_count(usage.get("completion_tokens"), estimate_tokens(content)),
            ),
            model=model if isinstance(model, str) and model else self.model,
            response_id=response_id if isinstance(response_id, str) and response_id else None,
        )

    async def _stream_events(
        self, stream: EventStream, request: LLMRequest
    ) -> AsyncGenerator[LLMStreamEvent, None]:
        """The events of a Chat Completions stream: ``data:`` chunks, then ``[DONE]``.

        The answer is ``choices[0].delta.content``. Servers that answer structured
        output with a tool call instead stream ``delta.tool_calls[0].function.arguments``;
        those are gathered and delivered as one delta at the end when no content came,
        as :meth:`complete` prefers content too. So does a structured-output refusal.
        """
        parts: list[str] = []
        stream.received = lambda: "".join(parts)
        arguments: list[str] = []
        refusal: list[str] = []
        raw_finish: str | None = None
        usage: dict[str, Any] = {}
        model: object = None
        response_id: object = None
        done = False
        async with aclosing(stream.events()) as events:
            async for event in events:
                if event.data.strip() == "[DONE]":
                    done = True
                    break
                chunk = _chunk(stream, event.data)
                if "error" in chunk:
                    raise stream.reported_error(chunk, event.data, _STREAM_ERROR_KINDS)
                model = chunk.get("model") or model
                response_id = chunk.get("id") or response_id
                if isinstance(chunk.get("usage"), dict):
                    usage = chunk["usage"]
                choices = chunk.get("choices")
                for choice in choices if isinstance(choices, list) else ():
                    if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                        continue
                    delta = choice.get("delta")
                    delta = delta if isinstance(delta, dict) else {}
                    text = _delta_text(delta.get("content"))
                    if text:
                        parts.append(text)
                        yield LLMStreamEvent(delta=text)
                    if isinstance(delta.get("refusal"), str):
                        refusal.append(delta["refusal"])
                    arguments.extend(_tool_arguments(delta.get("tool_calls")))
                    if isinstance(choice.get("finish_reason"), str):
                        raw_finish = choice["finish_reason"]
        if not done and raw_finish is None:
            raise stream.ended_early("its final chunk and [DONE]")

        finish = _FINISH_REASONS.get(raw_finish, raw_finish) if raw_finish else None
        if not parts:
            if arguments:
                parts.append("".join(arguments))
            elif refusal:
                parts.append("".join(refusal))
                finish = "content_filter"
            elif finish not in ("content_filter", "length"):
                raise stream.malformed("the stream ended without any content or tool call",
                                       "")
            if parts and parts[0]:
                yield LLMStreamEvent(delta=parts[0])
        content = "".join(parts)
        yield LLMStreamEvent(
            response=self._response(request, content, finish, usage, model, response_id)
        )


def _message_text(message: Mapping[str, Any]) -> str | None:
    """The answer text of a message: its content, else the first tool call's arguments."""
    content = message.get("content")
    if isinstance(content, list):
        # Some servers answer with content parts, like the ones a request may send.
        parts = [p.get("text") for p in content if isinstance(p, dict)]
        content = "".join(p for p in parts if isinstance(p, str))
    if isinstance(content, str) and content:
        return content
    calls = message.get("tool_calls")
    first = calls[0] if isinstance(calls, list) and calls else None
    call = first.get("function") if isinstance(first, dict) else None
    if call is None:
        call = message.get("function_call")  # the pre-tools form of the same thing
    arguments = call.get("arguments") if isinstance(call, dict) else None
    if isinstance(arguments, str):
        return arguments
    if isinstance(arguments, dict | list):
        return json.dumps(arguments)
    return content if isinstance(content, str) else None


def _chunk(stream: EventStream, data: str) -> dict[str, Any]:
    """One ``data:`` payload as a JSON object, or a MALFORMED :class:`LLMError`."""
    try:
        chunk = json.loads(data)
    except ValueError:
        raise stream.malformed("data is not JSON", data) from None
    if not isinstance(chunk, dict):
        raise stream.malformed("data is not a JSON object", data)
    return chunk


def _delta_text(content: object) -> str:
    """A delta's text: a string, or (some servers) a list of text parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [p.get("text") for p in content if isinstance(p, dict)]
        return "".join(t for t in texts if isinstance(t, str))
    return ""


def _tool_arguments(calls: object) -> list[str]:
    """The argument pieces of the first tool call in a delta's ``tool_calls``."""
    pieces = []
    for call in calls if isinstance(calls, list) else ():
        if isinstance(call, dict) and call.get("index", 0) == 0:
            function = call.get("function")
            arguments = function.get("arguments") if isinstance(function, dict) else None
            if isinstance(arguments, str):
                pieces.append(arguments)
    return pieces


def _rejects_stream_options(response: httpx.Response) -> bool:
    """Whether a 400/422 says the server does not know ``stream_options``."""
    if response.status_code not in (400, 422):
        return False
    return "stream_options" in (provider_error_message(response.text) or response.text)


def _rejects_response_format(response: httpx.Response) -> bool:
    """Whether a 400/422 says the server does not support the ``response_format`` sent."""
    if response.status_code not in (400, 422):
        return False
    try:
        body = decode(response.content)
    except ValueError:
        body = None
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and error.get("param") == "response_format":
            return True
    # Match on the error message only: a server that echoes the request would otherwise
    # make every 400 look like a response_format rejection.
    text = (provider_error_message(response.text) or response.text).lower()
    return any(word in text for word in _RESPONSE_FORMAT_WORDS)
