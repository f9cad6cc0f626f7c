"""AnthropicClient against a real Anthropic Messages HTTP server on loopback."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from orchestration.errors import LLMError, LLMErrorKind
from orchestration.llm.anthropic import AnthropicClient, split_messages
from orchestration.llm.base import LLMClient, LLMRequest, TokenUsage
from tests.llm_servers import FakeAnthropicServer

# ``anthropic_server`` is the shared fixture of tests/llm_servers.py, exposed by tests/conftest.py.

SECRET = "sk-ant-test-0123456789abcdef-secret"
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"steps": {"type": "array", "items": {"type": "string"}}},
    "required": ["steps"],
}


def ask(
    text: str = "Plan it.", *, schema: dict[str, Any] | None = None, **kw: Any
) -> LLMRequest:
    return LLMRequest(
        purpose="plan",
        messages=[{"role": "system", "content": "You plan."}, {"role": "user", "content": text}],
        response_schema=schema,
        **kw,
    )


@pytest.fixture
async def client(anthropic_server: FakeAnthropicServer) -> AsyncIterator[AnthropicClient]:
    c = AnthropicClient(
        model="claude-test", api_key=SECRET, base_url=anthropic_server.base_url, timeout_s=5
    )
    yield c
    await c.aclose()


async def failure(client: AnthropicClient, request: LLMRequest | None = None) -> LLMError:
    with pytest.raises(LLMError) as info:
        await client.complete(request or ask())
    err = info.value
    assert err.provider == "anthropic"
    assert SECRET not in str(err) and SECRET not in (err.raw or "")
    return err


# --- answers -------------------------------------------------------------------------------


async def test_plain_answer_with_usage_and_request_shape(
    anthropic_server: FakeAnthropicServer, client: AnthropicClient
) -> None:
    anthropic_server.answer("Done.", input_tokens=31, output_tokens=2)

    response = await client.complete(ask(temperature=0.2))

    assert response.content == "Done."
    assert response.finish_reason == "stop"
    assert response.usage == TokenUsage(input_tokens=31, output_tokens=2)
    assert response.model == "claude-test"
    [received] = anthropic_server.requests
    assert received.path == "/v1/messages"
    assert received.headers["x-api-key"] == SECRET
    assert received.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in received.headers
    assert received.body == {
        "model": "claude-test",
        "max_tokens": 4096,
        "system": "You plan.",
        "messages": [{"role": "user", "content": "Plan it."}],
        "temperature": 0.2,
    }


async def test_client_satisfies_the_protocol(client: AnthropicClient) -> None:
    assert isinstance(client, LLMClient)
    assert AnthropicClient.provider == "anthropic"


async def test_request_max_output_tokens_wins_and_none_temperature_is_omitted(
    anthropic_server: FakeAnthropicServer, client: AnthropicClient
) -> None:
    anthropic_server.answer("ok")
    await client.complete(ask(max_output_tokens=123, temperature=None))
    body = anthropic_server.requests[0].body
    assert body["max_tokens"] == 123
    assert "temperature" not in body and "tools" not in body


async def test_text_blocks_are_concatenated(
    anthropic_server: FakeAnthropicServer, client: AnthropicClient
) -> None:
    anthropic_server.answer_blocks(
        [{"type": "text", "text": "Hello, "}, {"type": "thinking", "thinking": "hmm"},
         {"type": "text", "text": "world."}]
    )
    assert (await client.complete(ask())).content == "Hello, world."


async def test_system_messages_go_top_level_and_turns_are_merged(
    anthropic_server: FakeAnthropicServer, client: AnthropicClient
) -> None:
    # The fake server rejects a "system" role and non-alternating turns with a 400, as
    # the real API did, so a wrong placement fails this test rather than passing silently.
    anthropic_server.answer("ok")
    request = LLMRequest(
        purpose="validation_feedback",
        messages=[
            {"role": "system", "content": "Rule one."},
            {"role": "user", "content": "Query."},
            {"role": "user", "content": "Catalog."},
            {"role": "assistant", "content": "{bad json"},
            {"role": "system", "content": "Rule two."},
            {"role": "user", "content": "That was not JSON."},
        ],
    )
    await client.complete(request)
    body = anthropic_server.requests[0].body
    assert body["system"] == "Rule one.\n\nRule two."
    assert body["messages"] == [
        {"role": "user", "content": "Query.\n\nCatalog."},
        {"role": "assistant", "content": "{bad json"},
        {"role": "user", "content": "That was not JSON."},
    ]


def test_split_messages_without_system() -> None:
    system, turns = split_messages([{"role": "user", "content": "hi"}])
    assert system == "" and turns == [{"role": "user", "content": "hi"}]


async def test_cache_tokens_count_as_input(
    anthropic_server: FakeAnthropicServer, client: AnthropicClient
) -> None:
    anthropic_server.reply(
        lambda r: {
            "type": "message", "role": "assistant", "model": "claude-test",
            "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
            "usage": {"input_tokens": 5, "cache_creation_input_tokens": 100,
                      "cache_read_input_tokens": 1000, "output_tokens": 1},
        }
    )
    response = await client.complete(ask())
    assert response.usage == TokenUsage(input_tokens=1105, output_tokens=1)


@pytest.mark.parametrize(
    ("sent", "normalised"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("tool_use", "stop"),
        ("max_tokens", "length"),
        ("refusal", "content_filter"),
        (None, None),
    ],
)
async def test_stop_reason_is_normalised(
    anthropic_server: FakeAnthropicServer,
    client: AnthropicClient,
    sent: str | None,
    normalised: str | None,
) -> None:
    anthropic_server.answer("text", stop_reason=sent)
    response = await client.complete(ask())
    assert response.finish_reason == normalised
    assert response.content == "text"  # a refusal is returned, not raised


# --- structured output through a forced tool ----------------------------------------------


async def test_forced_tool_use_request_and_answer(
    anthropic_server: FakeAnthropicServer, client: AnthropicClient
) -> None:
    anthropic_server.answer_tool_use({"steps": ["search", "summarise"]}, text="Here you go.")

    response = await client.complete(ask(schema=SCHEMA, schema_name="plan"))

    assert json.loads(response.content) == {"steps": ["search", "summarise"]}
    assert response.finish_reason == "stop"
    body = anthropic_server.requests[0].body
    [tool] = body["tools"]
    assert tool["name"] == "plan" and tool["input_schema"] == SCHEMA
    assert body["tool_choice"] == {"type": "tool", "name": "plan"}


async def test_tool_name_is_sanitised(
    anthropic_server: FakeAnthropicServer, client: AnthropicClient
) -> None:
    anthropic_server.answer_tool_use({"steps": []})
    await client.complete(ask(schema=SCHEMA, schema_name="plan answer.v2"))
    assert anthropic_server.requests[0].body["tool_choice"]["name"] == "plan_answer_v2"


async def test_non_object_schema_is_wrapped_and_unwrapped(
    anthropic_server: FakeAnthropicServer, client: AnthropicClient
) -> None:
    schema = {"type": "array", "items": {"type": "integer"}}
    anthropic_server.answer_tool_use({"value": [1, 2, 3]})
    response = await client.complete(ask(schema=schema))
    assert json.loads(response.content) == [1, 2, 3]
    input_schema = anthropic_server.requests[0].body["tools"][0]["input_schema"]
    assert input_schema == {
        "type": "object", "properties": {"value": schema}, "required": ["value"],
    }


async def test_no_tool_call_falls_back_to_text(
    anthropic_server: FakeAnthropicServer, client: AnthropicClient
) -> None:
    anthropic_server.answer("I won't help with that.", stop_reason="refusal")
    response = await client.complete(ask(schema=SCHEMA))
    assert response.content == "I won't help with that."
    assert response.finish_reason == "content_filter"


async def test_structured_output_none_sends_no_tools(anthropic_server: FakeAnthropicServer) -> None:
    anthropic_server.answer('{"steps": []}')
    c = AnthropicClient(model="m", base_url=anthropic_server.base_url, structured_output="none")
    try:
        response = await c.complete(ask(schema=SCHEMA))
    finally:
        await c.aclose()
    assert response.content == '{"steps": []}'
    body = anthropic_server.requests[0].body
    assert "tools" not in body and "tool_choice" not in body


# --- failures ------------------------------------------------------------------------------


async def test_connection_refused(closed_port_url: str) -> None:
    c = AnthropicClient(model="m", api_key=SECRET, base_url=closed_port_url)
    try:
        err = await failure(c)
    finally:
        await c.aclose()
    assert err.kind is LLMErrorKind.CONNECTION and err.retryable


async def test_timeout(anthropic_server: FakeAnthropicServer) -> None:
    anthropic_server.hang(5)
    c = AnthropicClient(
        model="m", api_key=SECRET, base_url=anthropic_server.base_url, timeout_s=0.2
    )
    started = time.monotonic()
    try:
        err = await failure(c)
    finally:
        await c.aclose()
    assert err.kind is LLMErrorKind.TIMEOUT
    assert time.monotonic() - started < 2


async def test_dropped_connection(
    anthropic_server: FakeAnthropicServer, client: AnthropicClient
) -> None:
    anthropic_server.drop()
    err = await failure(client)
    assert err.kind is LLMErrorKind.CONNECTION


@pytest.mark.parametrize(
    ("script", "kind", "status"),
    [
        (lambda s: s.error(401, "invalid x-api-key"), LLMErrorKind.AUTH, 401),
        (lambda s: s.error(403, "no access"), LLMErrorKind.AUTH, 403),
        (lambda s: s.error(500, "Internal server error"), LLMErrorKind.SERVER, 500),
        (lambda s: s.error(529, "Overloaded"), LLMErrorKind.SERVER, 529),
        (lambda s: s.error(413, "Request exceeds the maximum size"), LLMErrorKind.OTHER, 413),
    ],
)
async def test_http_errors_are_classified(
    anthropic_server: FakeAnthropicServer,
    client: AnthropicClient,
    script: Callable[[FakeAnthropicServer], Any],
    kind: LLMErrorKind,
    status: int,
) -> None:
    script(anthropic_server)
    err = await failure(client)
    assert (err.kind, err.status) == (kind, status)


async def test_overloaded_is_retryable_and_carries_the_message(
    anthropic_server: FakeAnthropicServer, client: AnthropicClient
) -> None:
    anthropic_server.error(529, "Overloaded")
    err = await failure(client)
    assert err.retryable and "Overloaded" in str(err)
    assert err.raw is not None and "overloaded_error" in err.raw


async def test_invalid_request_carries_the_provider_message(
    anthropic_server: FakeAnthropicServer, client: AnthropicClient
) -> None:
    anthropic_server.error(400, "messages.0.content: text content blocks must be non-empty")
    err = await failure(client)
    assert err.kind is LLMErrorKind.OTHER and not err.retryable
    assert "text content blocks must be non-empty" in str(err)


async def test_rate_limit_with_retry_after(
    anthropic_server: FakeAnthropicServer, client: AnthropicClient
) -> None:
    anthropic_server.error(429, "Number of request tokens has exceeded your rate limit",
                           headers={"retry-after": "12"})
    err = await failure(client)
    assert err.kind is LLMErrorKind.RATE_LIMIT
    assert err.retry_after_s == 12.0


async def test_api_key_echoed_by_server_is_redacted() -> None:
    with FakeAnthropicServer(api_key="sk-ant-the-right-one") as srv:
        c = AnthropicClient(model="m", api_key=SECRET, base_url=srv.base_url)
        try:
            err = await failure(c)  # failure() asserts SECRET is absent
        finally:
            await c.aclose()
        assert err.kind is LLMErrorKind.AUTH
        assert "invalid x-api-key" in str(err)
        assert srv.requests[0].headers["x-api-key"] == SECRET
    assert SECRET not in repr(c)


async def test_non_json_success_is_malformed(
    anthropic_server: FakeAnthropicServer, client: AnthropicClient
) -> None:
    anthropic_server.raw("upstream connect error or disconnect/reset before headers")
    err = await failure(client)
    assert err.kind is LLMErrorKind.MALFORMED
    assert err.raw is not None and "upstream connect error" in err.raw


@pytest.mark.parametrize(
    "body",
    [{"type": "message", "role": "assistant"}, {"content": "not a list"}, [1, 2]],
)
async def test_missing_content_is_malformed(
    anthropic_server: FakeAnthropicServer, client: AnthropicClient, body: Any
) -> None:
    anthropic_server.reply(body)
    err = await failure(client)
    assert err.kind is LLMErrorKind.MALFORMED


# --- lifecycle -----------------------------------------------------------------------------


async def test_aclose_closes_only_an_owned_client(anthropic_server: FakeAnthropicServer) -> None:
    own = AnthropicClient(model="m", base_url=anthropic_server.base_url)
    pool = own._pool()
    await own.aclose()
    assert pool.is_closed

    async with httpx.AsyncClient() as shared:
        borrowed = AnthropicClient(
            model="m", base_url=anthropic_server.base_url + "/", http_client=shared
        )
        anthropic_server.answer("ok")
        assert (await borrowed.complete(ask())).content == "ok"
        await borrowed.aclose()
        assert not shared.is_closed
    assert anthropic_server.requests[0].path == "/v1/messages"


async def test_a_base_url_with_v1_gets_a_hint_and_a_401_names_the_key(
    anthropic_server: FakeAnthropicServer,
) -> None:
    c = AnthropicClient(model="m", api_key=SECRET, base_url=anthropic_server.url + "/v1")
    try:
        err = await failure(c)
    finally:
        await c.aclose()
    assert err.status == 404
    assert "check ORCH_LLM_BASE_URL" in str(err) and "without /v1" in str(err)
    anthropic_server.error(401, "invalid x-api-key")
    c = AnthropicClient(model="m", api_key=SECRET, base_url=anthropic_server.base_url)
    try:
        err = await failure(c)
    finally:
        await c.aclose()
    assert "check the API key: ORCH_LLM_API_KEY" in str(err)


async def test_the_response_id_is_kept(
    anthropic_server: FakeAnthropicServer, client: AnthropicClient
) -> None:
    anthropic_server.answer("hi")
    response = await client.complete(ask())
    assert response.response_id is not None and response.response_id.startswith("msg_")
