"""An LLM client for the Anthropic Messages API.

The Messages API differs from Chat Completions in three ways that matter here: the
system prompt is a top-level field rather than a message, a request must alternate
user and assistant turns, and there is no ``response_format``. Structured output is
obtained by forcing the model to call a single tool whose ``input_schema`` is the
requested schema; the tool call's ``input`` is then the answer.

Like :mod:`orchestration.llm.openai_compat`, the client never retries: it classifies
every failure into an :class:`~orchestration.errors.LLMError` for the gateway.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Literal

import httpx

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
from orchestration.llm.base import LLMRequest, LLMResponse, TokenUsage
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


class AnthropicClient(HTTPLLMClient):
    """Talks to ``{base_url}/v1/messages``.

    ``max_tokens`` is the answer limit used when a request sets none (the API requires
    one). ``structured_output``: ``auto`` and ``tool`` both enforce a request's
    ``response_schema`` with a forced tool call; ``none`` leaves the schema to the prompt.
    ``http_client`` lets the caller share a connection pool; the client then leaves
    closing it to the caller. ``timeout_s`` bounds one whole HTTP call.
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
        tool: str | None = None
        schema: dict[str, Any] | None = None
        wrapped = False
        if request.response_schema is not None and self.structured_output != "none":
            tool = tool_name(request.schema_name)
            schema, wrapped = _tool_input_schema(request.response_schema)
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
            hint = setting_hint(
                response.status_code, provider_error_message(response.text) or "",
                url=self.url, base_url=self.base_url,
                base_example="https://api.anthropic.com (without /v1: the client adds it)")
            raise error_for_status(response, provider=self.provider, secret=self._api_key,
                                   hint=hint)
        return self._parse(response, request, tool=tool, wrapped=wrapped)

    # --- request ---------------------------------------------------------------------

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json", "anthropic-version": self.anthropic_version}
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
        usage = usage if isinstance(usage, dict) else {}
        model = data.get("model")
        response_id = data.get("id")
        return LLMResponse(
            content=content,
            finish_reason=finish,
            response_id=response_id if isinstance(response_id, str) else None,
            usage=TokenUsage(
                input_tokens=_input_tokens(usage, request),
                output_tokens=token_count(usage.get("output_tokens"), estimate_tokens(content)),
            ),
            model=model if isinstance(model, str) and model else self.model,
        )


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

