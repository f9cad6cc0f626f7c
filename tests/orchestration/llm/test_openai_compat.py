"""OpenAICompatibleClient against a real OpenAI-compatible HTTP server on loopback."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from orchestration.errors import LLMError, LLMErrorKind
from orchestration.llm.base import LLMClient, LLMRequest, TokenUsage
from orchestration.llm.openai_compat import OpenAICompatibleClient
from tests.llm_servers import FakeOpenAIServer

# ``openai_server`` is the shared fixture of tests/llm_servers.py, exposed by tests/conftest.py.

SECRET = "sk-test-0123456789abcdef-secret"
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"answer": {"type": "string"}},
    "required": ["answer"],
}


def ask(
    text: str = "What is 2+2?", *, schema: dict[str, Any] | None = None, **kw: Any
) -> LLMRequest:
    return LLMRequest(
        purpose="plan",
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": text}],
        response_schema=schema,
        **kw,
    )


@pytest.fixture
async def client(openai_server: FakeOpenAIServer) -> AsyncIterator[OpenAICompatibleClient]:
    c = OpenAICompatibleClient(
        base_url=openai_server.base_url, model="gpt-test", api_key=SECRET, timeout_s=5
    )
    yield c
    await c.aclose()


async def failure(client: OpenAICompatibleClient, request: LLMRequest | None = None) -> LLMError:
    with pytest.raises(LLMError) as info:
        await client.complete(request or ask())
    err = info.value
    assert err.provider == "openai"
    assert SECRET not in str(err) and SECRET not in (err.raw or "")
    return err


# --- answers -------------------------------------------------------------------------------


async def test_plain_answer_with_usage_and_request_shape(
    openai_server: FakeOpenAIServer, client: OpenAICompatibleClient
) -> None:
    openai_server.answer("4", prompt_tokens=21, completion_tokens=1, model="gpt-test-0613")

    response = await client.complete(ask(max_output_tokens=50, temperature=0.3))

    assert response.content == "4"
    assert response.finish_reason == "stop"
    assert response.usage == TokenUsage(input_tokens=21, output_tokens=1)
    assert response.model == "gpt-test-0613"
    [received] = openai_server.requests
    assert received.method == "POST" and received.path == "/v1/chat/completions"
    assert received.headers["authorization"] == f"Bearer {SECRET}"
    assert received.headers["content-type"] == "application/json"
    assert received.body == {
        "model": "gpt-test",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What is 2+2?"},
        ],
        "max_tokens": 50,
        "temperature": 0.3,
    }


async def test_client_satisfies_the_protocol(client: OpenAICompatibleClient) -> None:
    assert isinstance(client, LLMClient)
    assert OpenAICompatibleClient.provider == "openai"


async def test_unset_options_are_not_sent(
    openai_server: FakeOpenAIServer, client: OpenAICompatibleClient
) -> None:
    openai_server.answer("ok")
    await client.complete(ask(temperature=None))
    body = openai_server.requests[0].body
    assert "temperature" not in body and "max_tokens" not in body
    assert "response_format" not in body


async def test_no_api_key_no_auth_header_and_trailing_slash(
    openai_server: FakeOpenAIServer,
) -> None:
    openai_server.answer("ok")
    c = OpenAICompatibleClient(
        base_url=openai_server.base_url + "/", model="llama3",
        extra_headers={"X-Tenant": "acme"},
    )
    try:
        await c.complete(ask())
    finally:
        await c.aclose()
    [received] = openai_server.requests
    assert received.path == "/v1/chat/completions"
    assert "authorization" not in received.headers
    assert received.headers["x-tenant"] == "acme"


async def test_missing_usage_is_estimated(
    openai_server: FakeOpenAIServer, client: OpenAICompatibleClient
) -> None:
    openai_server.answer("a fairly long answer of some forty characters", usage=False)
    response = await client.complete(ask())
    assert response.usage.input_tokens > 0 and response.usage.output_tokens > 0


async def test_connections_are_kept_alive(
    openai_server: FakeOpenAIServer, client: OpenAICompatibleClient
) -> None:
    openai_server.answer("one").answer("two")
    assert (await client.complete(ask())).content == "one"
    assert (await client.complete(ask())).content == "two"
    first, second = openai_server.requests
    assert first.client_port == second.client_port


async def test_tool_call_arguments_used_when_content_is_null(
    openai_server: FakeOpenAIServer, client: OpenAICompatibleClient
) -> None:
    openai_server.answer_tool_call({"answer": "4"})
    response = await client.complete(ask(schema=SCHEMA))
    assert response.content == '{"answer": "4"}'
    assert response.finish_reason == "stop"


@pytest.mark.parametrize(
    ("sent", "normalised"),
    [
        ("stop", "stop"),
        ("length", "length"),
        ("content_filter", "content_filter"),
        ("tool_calls", "stop"),
        ("function_call", "stop"),
        (None, None),
    ],
)
async def test_finish_reason_is_normalised(
    openai_server: FakeOpenAIServer,
    client: OpenAICompatibleClient,
    sent: str | None,
    normalised: str | None,
) -> None:
    openai_server.answer("partial", finish_reason=sent)
    response = await client.complete(ask())
    assert response.finish_reason == normalised
    assert response.content == "partial"


async def test_content_filter_is_returned_not_raised(
    openai_server: FakeOpenAIServer, client: OpenAICompatibleClient
) -> None:
    openai_server.answer(None, finish_reason="content_filter")
    response = await client.complete(ask())
    assert response.content == ""
    assert response.finish_reason == "content_filter"


async def test_refusal_becomes_a_content_filter_finish(
    openai_server: FakeOpenAIServer, client: OpenAICompatibleClient
) -> None:
    openai_server.reply(
        {
            "model": "gpt-test",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": None, "refusal": "I can't."},
                    "finish_reason": "stop",
                }
            ],
        }
    )
    response = await client.complete(ask(schema=SCHEMA))
    assert (response.content, response.finish_reason) == ("I can't.", "content_filter")


# --- structured output ---------------------------------------------------------------------


async def test_json_schema_response_format_is_sent(
    openai_server: FakeOpenAIServer, client: OpenAICompatibleClient
) -> None:
    openai_server.answer('{"answer": "4"}')
    response = await client.complete(ask(schema=SCHEMA, schema_name="plan answer/v1"))
    assert response.content == '{"answer": "4"}'
    assert openai_server.requests[0].body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "plan_answer_v1", "schema": SCHEMA, "strict": False},
    }
    assert client.effective_structured_output == "json_schema"


@pytest.mark.parametrize(
    ("mode", "expected"),
    [("json_object", {"type": "json_object"}), ("none", None)],
)
async def test_fixed_structured_output_modes(
    openai_server: FakeOpenAIServer, mode: Any, expected: dict[str, Any] | None
) -> None:
    openai_server.answer('{"answer": "4"}')
    c = OpenAICompatibleClient(base_url=openai_server.base_url, model="m", structured_output=mode)
    try:
        await c.complete(ask(schema=SCHEMA))
    finally:
        await c.aclose()
    assert openai_server.requests[0].body.get("response_format") == expected


async def test_auto_downgrades_to_json_object_and_remembers() -> None:
    with FakeOpenAIServer(unsupported_response_formats={"json_schema"}) as srv:
        srv.answer('{"answer": "4"}').answer('{"answer": "5"}').answer("plain")
        c = OpenAICompatibleClient(base_url=srv.base_url, model="m")
        try:
            first = await c.complete(ask(schema=SCHEMA))
            assert first.content == '{"answer": "4"}'
            assert c.effective_structured_output == "json_object"
            await c.complete(ask(schema=SCHEMA))
            await c.complete(ask())  # no schema: no response_format at all
        finally:
            await c.aclose()
        formats = [r.body.get("response_format", {}).get("type") for r in srv.requests]
        # rejected json_schema, retried json_object; then straight to json_object
        assert formats == ["json_schema", "json_object", "json_object", None]


async def test_auto_downgrades_to_none_when_json_object_is_rejected_too() -> None:
    with FakeOpenAIServer(unsupported_response_formats={"json_schema", "json_object"}) as srv:
        srv.answer('{"answer": "4"}')
        c = OpenAICompatibleClient(base_url=srv.base_url, model="m")
        try:
            response = await c.complete(ask(schema=SCHEMA))
        finally:
            await c.aclose()
        assert response.content == '{"answer": "4"}'
        assert c.effective_structured_output == "none"
        formats = [r.body.get("response_format", {}).get("type") for r in srv.requests]
        assert formats == ["json_schema", "json_object", None]


async def test_explicit_json_schema_does_not_downgrade() -> None:
    with FakeOpenAIServer(unsupported_response_formats={"json_schema"}) as srv:
        c = OpenAICompatibleClient(
            base_url=srv.base_url, model="m", structured_output="json_schema"
        )
        try:
            err = await failure(c, ask(schema=SCHEMA))
        finally:
            await c.aclose()
        assert err.kind is LLMErrorKind.OTHER and err.status == 400
        assert "not supported" in str(err)
        assert len(srv.requests) == 1


async def test_unrelated_400_does_not_downgrade(
    openai_server: FakeOpenAIServer, client: OpenAICompatibleClient
) -> None:
    openai_server.error(400, "This model's maximum context length is 8192 tokens.")
    err = await failure(client, ask(schema=SCHEMA))
    assert err.kind is LLMErrorKind.OTHER
    assert "maximum context length" in str(err)
    assert client.effective_structured_output == "json_schema"
    assert len(openai_server.requests) == 1


# --- failures ------------------------------------------------------------------------------


async def test_connection_refused(closed_port_url: str) -> None:
    c = OpenAICompatibleClient(base_url=closed_port_url + "/v1", model="m", api_key=SECRET)
    try:
        err = await failure(c)
    finally:
        await c.aclose()
    assert err.kind is LLMErrorKind.CONNECTION and err.retryable


async def test_timeout(openai_server: FakeOpenAIServer) -> None:
    openai_server.hang(5)
    c = OpenAICompatibleClient(
        base_url=openai_server.base_url, model="m", api_key=SECRET, timeout_s=0.2
    )
    started = time.monotonic()
    try:
        err = await failure(c)
    finally:
        await c.aclose()
    assert err.kind is LLMErrorKind.TIMEOUT and err.retryable
    assert time.monotonic() - started < 2


async def test_slow_answer_within_timeout_is_fine(openai_server: FakeOpenAIServer) -> None:
    openai_server.answer("late", delay_s=0.1)
    c = OpenAICompatibleClient(base_url=openai_server.base_url, model="m", timeout_s=2)
    try:
        assert (await c.complete(ask())).content == "late"
    finally:
        await c.aclose()


async def test_dropped_connection(
    openai_server: FakeOpenAIServer, client: OpenAICompatibleClient
) -> None:
    openai_server.drop()
    err = await failure(client)
    assert err.kind is LLMErrorKind.CONNECTION


@pytest.mark.parametrize(
    ("script", "kind", "status"),
    [
        (lambda s: s.error(401, "bad key"), LLMErrorKind.AUTH, 401),
        (lambda s: s.error(403, "forbidden"), LLMErrorKind.AUTH, 403),
        (lambda s: s.error(500, "boom"), LLMErrorKind.SERVER, 500),
        (lambda s: s.error(503, "unavailable"), LLMErrorKind.SERVER, 503),
        (lambda s: s.error(404, "model 'x' not found"), LLMErrorKind.OTHER, 404),
        (lambda s: s.raw("<html>gateway</html>", status=502), LLMErrorKind.SERVER, 502),
    ],
)
async def test_http_errors_are_classified(
    openai_server: FakeOpenAIServer,
    client: OpenAICompatibleClient,
    script: Callable[[FakeOpenAIServer], Any],
    kind: LLMErrorKind,
    status: int,
) -> None:
    script(openai_server)
    err = await failure(client)
    assert (err.kind, err.status) == (kind, status)
    assert err.raw


async def test_provider_message_is_kept(
    openai_server: FakeOpenAIServer, client: OpenAICompatibleClient
) -> None:
    openai_server.error(404, "The model `gpt-nope` does not exist")
    err = await failure(client)
    assert "The model `gpt-nope` does not exist" in str(err)


async def test_rate_limit_with_retry_after(
    openai_server: FakeOpenAIServer, client: OpenAICompatibleClient
) -> None:
    openai_server.error(429, "Rate limit reached", headers={"Retry-After": "7"})
    err = await failure(client)
    assert err.kind is LLMErrorKind.RATE_LIMIT and err.status == 429
    assert err.retry_after_s == 7.0
    assert err.retryable


async def test_rate_limit_with_retry_after_ms(
    openai_server: FakeOpenAIServer, client: OpenAICompatibleClient
) -> None:
    openai_server.error(429, "Rate limit reached", headers={"retry-after-ms": "1500"})
    err = await failure(client)
    assert err.retry_after_s == pytest.approx(1.5)


async def test_api_key_echoed_by_server_is_redacted() -> None:
    with FakeOpenAIServer(api_key="sk-the-right-key-000") as srv:
        c = OpenAICompatibleClient(base_url=srv.base_url, model="m", api_key=SECRET)
        try:
            err = await failure(c)  # failure() asserts SECRET is absent
        finally:
            await c.aclose()
        assert err.kind is LLMErrorKind.AUTH
        assert "Incorrect API key provided" in str(err)
        assert srv.requests[0].headers["authorization"] == f"Bearer {SECRET}"
    assert SECRET not in repr(c)


async def test_non_json_success_is_malformed(
    openai_server: FakeOpenAIServer, client: OpenAICompatibleClient
) -> None:
    openai_server.raw("<html><body>Welcome to nginx!</body></html>")
    err = await failure(client)
    assert err.kind is LLMErrorKind.MALFORMED and err.status == 200
    assert err.raw is not None and "Welcome to nginx!" in err.raw


@pytest.mark.parametrize(
    "body",
    [
        {"id": "x", "object": "chat.completion"},
        {"choices": []},
        {"choices": [{"index": 0, "finish_reason": "stop"}]},
        {"choices": [{"message": {"role": "assistant", "content": None}, "finish_reason": "stop"}]},
        ["not", "an", "object"],
    ],
)
async def test_missing_fields_are_malformed(
    openai_server: FakeOpenAIServer, client: OpenAICompatibleClient, body: Any
) -> None:
    openai_server.reply(body)
    err = await failure(client)
    assert err.kind is LLMErrorKind.MALFORMED
    assert err.raw


async def test_long_raw_body_is_truncated(
    openai_server: FakeOpenAIServer, client: OpenAICompatibleClient
) -> None:
    openai_server.raw("x" * 50_000)
    err = await failure(client)
    assert err.raw is not None and len(err.raw) < 3000


# --- lifecycle -----------------------------------------------------------------------------


async def test_aclose_closes_only_an_owned_client(openai_server: FakeOpenAIServer) -> None:
    own = OpenAICompatibleClient(base_url=openai_server.base_url, model="m")
    pool = own._pool()
    await own.aclose()
    assert pool.is_closed

    async with httpx.AsyncClient() as shared:
        borrowed = OpenAICompatibleClient(
            base_url=openai_server.base_url, model="m", http_client=shared, timeout_s=3
        )
        openai_server.answer("ok")
        assert (await borrowed.complete(ask())).content == "ok"
        await borrowed.aclose()
        assert not shared.is_closed


def test_unknown_structured_output_mode_is_rejected() -> None:
    with pytest.raises(ValueError, match="structured_output"):
        OpenAICompatibleClient(base_url="http://x/v1", model="m", structured_output="tool")  # type: ignore[arg-type]


# --- errors that point at a setting --------------------------------------------------------


async def test_a_base_url_without_v1_gets_a_hint_naming_the_setting(
    openai_server: FakeOpenAIServer,
) -> None:
    c = OpenAICompatibleClient(base_url=openai_server.url, model="m", api_key=SECRET)
    try:
        err = await failure(c)
    finally:
        await c.aclose()
    assert err.status == 404 and "no route /chat/completions" in str(err)
    assert f"check ORCH_LLM_BASE_URL: nothing answers at {openai_server.url}/chat/completions" in str(err)
    assert "(yours has no /v1)" in str(err)


async def test_an_unknown_model_points_at_the_model_setting(
    openai_server: FakeOpenAIServer, client: OpenAICompatibleClient
) -> None:
    openai_server.error(404, "The model `gpt-nope` does not exist")
    err = await failure(client)
    assert "check ORCH_LLM_MODEL" in str(err) and "ORCH_LLM_BASE_URL" not in str(err)


async def test_a_401_names_the_api_key_setting() -> None:
    with FakeOpenAIServer(api_key="sk-the-right-key-000") as srv:
        c = OpenAICompatibleClient(base_url=srv.base_url, model="m", api_key=SECRET)
        try:
            err = await failure(c)
        finally:
            await c.aclose()
    assert err.kind is LLMErrorKind.AUTH
    assert "check the API key: ORCH_LLM_API_KEY" in str(err)


async def test_the_response_id_is_kept(
    openai_server: FakeOpenAIServer, client: OpenAICompatibleClient
) -> None:
    openai_server.answer("hi")
    response = await client.complete(ask())
    assert response.response_id is not None and response.response_id.startswith("chatcmpl-")
