"""Streamed answers, against real loopback servers that stream server-sent events.

The clients (OpenAI-compatible, Anthropic), the gateway's rule for retries (only before
the first delta), and streamed answer synthesis through the orchestrator. Every server
listens on 127.0.0.1 and writes its events as HTTP chunks, paced in real time.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from orchestration import (
    Catalog,
    Orchestrator,
    OrchestratorConfig,
    RunEvent,
    RunResult,
    RunState,
    RunUsage,
    ScriptedLLM,
)
from orchestration._budget import RunBudget
from orchestration.clock import ManualClock
from orchestration.debug_store import iter_records
from orchestration.errors import LLMBudgetExceeded, LLMError, LLMErrorKind
from orchestration.llm._gateway import LLMGateway
from orchestration.llm.anthropic import AnthropicClient
from orchestration.llm.base import (
    LLMClient,
    LLMRequest,
    LLMResponse,
    LLMStreamEvent,
    TokenUsage,
    stream_from,
    supports_streaming,
)
from orchestration.llm.openai_compat import OpenAICompatibleClient
from orchestration.redaction import Redactor
from orchestration.retry_policy import RetryPolicy
from orchestration.telemetry import Telemetry
from orchestration.telemetry._observer import Observer
from tests.llm_servers import FakeAnthropicServer, FakeOpenAIServer

SECRET = "sk-stream-0123456789abcdef-secret"
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"answer": {"type": "string"}},
    "required": ["answer"],
}
WORDS = ["The ", "answer ", "is ", "forty", "-two", "."]


def ask(*, schema: dict[str, Any] | None = None, purpose: str = "synthesis") -> LLMRequest:
    return LLMRequest(
        purpose=purpose,
        messages=[{"role": "system", "content": "Be brief."},
                  {"role": "user", "content": "What is six times seven?"}],
        response_schema=schema,
    )


@dataclasses.dataclass
class Streamed:
    """What a consumer saw of one stream: deltas with their arrival times, the end."""

    deltas: list[str]
    times: list[float]
    response: LLMResponse | None
    error: LLMError | None

    @property
    def text(self) -> str:
        return "".join(self.deltas)


async def consume(events: AsyncIterator[LLMStreamEvent]) -> Streamed:
    """Iterate a stream to its end, as a consumer does, recording everything."""
    seen = Streamed([], [], None, None)
    started = time.perf_counter()
    try:
        async for event in events:
            if event.final:
                assert event.delta == "" and seen.response is None
                seen.response = event.response
            else:
                assert event.delta, "a delta event carries text"
                seen.deltas.append(event.delta)
                seen.times.append(time.perf_counter() - started)
    except LLMError as exc:
        seen.error = exc
    return seen


def assert_no_secret(err: LLMError) -> None:
    assert SECRET not in str(err)
    assert SECRET not in (err.raw or "")
    assert SECRET not in (err.partial or "")


@pytest.fixture
async def openai(openai_server: FakeOpenAIServer) -> AsyncIterator[OpenAICompatibleClient]:
    client = OpenAICompatibleClient(base_url=openai_server.base_url, model="gpt-test",
                                    api_key=SECRET, timeout_s=5)
    yield client
    await client.aclose()


@pytest.fixture
async def anthropic(anthropic_server: FakeAnthropicServer) -> AsyncIterator[AnthropicClient]:
    client = AnthropicClient(model="claude-test", api_key=SECRET,
                             base_url=anthropic_server.base_url, timeout_s=5)
    yield client
    await client.aclose()


# --- OpenAI-compatible client ----------------------------------------------------------------


async def test_openai_deltas_arrive_as_written_and_concatenate_to_the_answer(
    openai_server: FakeOpenAIServer, openai: OpenAICompatibleClient
) -> None:
    openai_server.stream_answer(WORDS, delay_s=0.08, prompt_tokens=21, completion_tokens=9)
    seen = await consume(openai.stream(ask()))

    assert seen.error is None and seen.response is not None
    assert seen.deltas == WORDS
    assert seen.response.content == seen.text == "The answer is forty-two."
    assert seen.response.usage == TokenUsage(21, 9)  # from the last chunk
    assert seen.response.finish_reason == "stop"
    assert seen.response.model == "gpt-test"
    assert seen.response.response_id == "chatcmpl-1"
    # really streamed: the first delta was in hand long before the last was written
    assert seen.times[-1] - seen.times[0] > 0.3, seen.times
    body = openai_server.requests[0].body
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert openai_server.requests[0].headers["accept"] == "text/event-stream"


async def test_openai_structured_output_streams_the_json_text(
    openai_server: FakeOpenAIServer, openai: OpenAICompatibleClient
) -> None:
    pieces = ['{"ans', 'wer": "fo', 'rty-two"', "}"]
    openai_server.stream_answer(pieces)
    seen = await consume(openai.stream(ask(schema=SCHEMA)))

    assert seen.deltas == pieces
    assert seen.response is not None and json.loads(seen.response.content) == {
        "answer": "forty-two"}
    assert openai_server.requests[0].body["response_format"]["type"] == "json_schema"


async def test_openai_tool_call_arguments_become_the_answer(
    openai_server: FakeOpenAIServer, openai: OpenAICompatibleClient
) -> None:
    openai_server.stream_tool_call(['{"answer"', ': "42"}'])
    seen = await consume(openai.stream(ask(schema=SCHEMA)))

    assert seen.response is not None
    assert seen.text == seen.response.content == '{"answer": "42"}'


async def test_openai_cut_stream_raises_connection_error_with_the_partial_text(
    openai_server: FakeOpenAIServer, openai: OpenAICompatibleClient
) -> None:
    openai_server.stream_answer(WORDS, cut_after=3, delay_s=0.02)
    seen = await consume(openai.stream(ask()))

    assert seen.deltas == WORDS[:3] and seen.response is None
    err = seen.error
    assert err is not None and err.kind is LLMErrorKind.CONNECTION and err.retryable
    assert err.partial == "The answer is "
    assert "was cut after 14 characters" in str(err)
    assert_no_secret(err)


async def test_openai_trickling_server_cannot_outlast_the_whole_call_timeout(
    openai_server: FakeOpenAIServer,
) -> None:
    # each byte comes well within any per-read timeout; the whole answer would take ~6 s
    openai_server.stream_answer(["forty-two " * 3], byte_delay_s=0.01)
    client = OpenAICompatibleClient(base_url=openai_server.base_url, model="m",
                                    api_key=SECRET, timeout_s=0.6)
    started = time.perf_counter()
    seen = await consume(client.stream(ask()))
    elapsed = time.perf_counter() - started
    await client.aclose()

    err = seen.error
    assert err is not None and err.kind is LLMErrorKind.TIMEOUT, err
    assert 0.55 < elapsed < 1.5, elapsed
    assert "did not finish within 0.6s" in str(err)
    assert err.partial == ""  # the first content chunk had not arrived whole
    assert_no_secret(err)


async def test_openai_error_chunk_mid_stream_is_classified_and_keeps_the_partial(
    openai_server: FakeOpenAIServer, openai: OpenAICompatibleClient
) -> None:
    openai_server.stream_answer(WORDS, error_after=2,
                                error=("server_error", f"worker crashed; key {SECRET}"))
    seen = await consume(openai.stream(ask()))

    err = seen.error
    assert err is not None and err.kind is LLMErrorKind.SERVER
    assert err.partial == "The answer "
    assert "reported server_error after 11 characters" in str(err)
    assert "worker crashed; key [redacted]" in str(err)
    assert_no_secret(err)


async def test_openai_rejected_key_is_an_auth_error_without_the_key() -> None:
    with FakeOpenAIServer(api_key="sk-the-right-one") as srv:
        client = OpenAICompatibleClient(base_url=srv.base_url, model="m", api_key=SECRET)
        seen = await consume(client.stream(ask()))
        await client.aclose()
    err = seen.error
    assert err is not None and err.kind is LLMErrorKind.AUTH and err.status == 401
    assert err.partial is None  # failed before any answer began
    assert "Incorrect API key provided: [redacted]" in str(err)
    assert_no_secret(err)


async def test_openai_server_without_stream_options_is_asked_again_without_them() -> None:
    with FakeOpenAIServer() as srv:
        client = OpenAICompatibleClient(base_url=srv.base_url, model="m")
        srv.error(400, "Unrecognized request argument supplied: stream_options")
        srv.stream_answer(["forty", "-two"])
        srv.stream_answer(["again"])
        first = await consume(client.stream(ask()))
        second = await consume(client.stream(ask()))
        await client.aclose()
    assert first.response is not None and first.text == "forty-two"
    assert first.response.usage.output_tokens == 2  # estimated: no usage chunk was sent
    assert "stream_options" in srv.requests[0].body
    assert "stream_options" not in srv.requests[1].body
    assert "stream_options" not in srv.requests[2].body  # remembered
    assert second.text == "again"


async def test_openai_auto_mode_steps_down_response_format_while_streaming() -> None:
    with FakeOpenAIServer(unsupported_response_formats={"json_schema"}) as srv:
        client = OpenAICompatibleClient(base_url=srv.base_url, model="m")
        srv.stream_answer(['{"answer": ', '"42"}'])
        seen = await consume(client.stream(ask(schema=SCHEMA)))
        await client.aclose()
    assert seen.text == '{"answer": "42"}'
    assert [r.body["response_format"]["type"] for r in srv.requests] == [
        "json_schema", "json_object"]
    assert client.effective_structured_output == "json_object"


async def test_openai_server_that_ignores_stream_answers_in_one_delta(
    openai_server: FakeOpenAIServer, openai: OpenAICompatibleClient
) -> None:
    openai_server.answer("forty-two", prompt_tokens=3, completion_tokens=2)
    seen = await consume(openai.stream(ask()))
    assert seen.deltas == ["forty-two"]
    assert seen.response is not None and seen.response.usage == TokenUsage(3, 2)


async def test_openai_stream_that_ends_without_finishing_counts_as_cut(
    openai_server: FakeOpenAIServer, openai: OpenAICompatibleClient
) -> None:
    # a clean end of the body, but neither a finish_reason nor [DONE]
    openai_server.stream_raw([
        b'data: {"choices": [{"index": 0, "delta": {"content": "forty"}}]}\n\n',
    ])
    seen = await consume(openai.stream(ask()))
    err = seen.error
    assert err is not None and err.kind is LLMErrorKind.CONNECTION
    assert err.partial == "forty" and "ended before its final chunk" in str(err)


async def test_event_stream_framing_comments_crlf_bom_and_multiline_data(
    openai_server: FakeOpenAIServer, openai: OpenAICompatibleClient
) -> None:
    openai_server.stream_raw([
        b"\xef\xbb\xbf: keep-alive comment\r\n\r\n",
        b'data: {"choices": [{"index": 0,\r\ndata:  "delta": {"content": "for"}}]}\r\n\r\n',
        b"id: 7\nretry: 10\n"
        b'data:{"choices": [{"index": 0, "delta": {"content": "ty"}, "finish_reason": '
        b'"stop"}]}\n\n',
        b"event: ignored-without-data\n\n",
        b"data: [DONE]",  # no blank line before the server closes
    ])
    seen = await consume(openai.stream(ask()))
    assert seen.error is None, seen.error
    assert seen.deltas == ["for", "ty"]


async def test_openai_unreadable_event_is_malformed_not_a_crash(
    openai_server: FakeOpenAIServer, openai: OpenAICompatibleClient
) -> None:
    openai_server.stream_raw([b'data: {"choices": [{"index": 0, "delta": {"content": "a"}}]}\n\n',
                              b"data: <html>oops</html>\n\n"])
    seen = await consume(openai.stream(ask()))
    err = seen.error
    assert err is not None and err.kind is LLMErrorKind.MALFORMED
    assert err.partial == "a" and err.raw == "<html>oops</html>"


async def test_cannot_connect_is_a_connection_error(closed_port_url: str) -> None:
    client = OpenAICompatibleClient(base_url=closed_port_url + "/v1", model="m", api_key=SECRET)
    seen = await consume(client.stream(ask()))
    await client.aclose()
    assert seen.error is not None and seen.error.kind is LLMErrorKind.CONNECTION
    assert seen.error.partial is None


# --- Anthropic client ------------------------------------------------------------------------


async def test_anthropic_text_deltas_concatenate_to_the_answer_with_usage(
    anthropic_server: FakeAnthropicServer, anthropic: AnthropicClient
) -> None:
    anthropic_server.stream_answer(WORDS, delay_s=0.05, input_tokens=30, output_tokens=12)
    seen = await consume(anthropic.stream(ask()))

    assert seen.error is None and seen.response is not None
    assert seen.deltas == WORDS
    assert seen.response.content == seen.text
    assert seen.response.usage == TokenUsage(30, 12)
    assert seen.response.finish_reason == "stop"
    assert seen.response.response_id == "msg_1"
    assert seen.times[-1] - seen.times[0] > 0.15, seen.times
    assert anthropic_server.requests[0].body["stream"] is True


async def test_anthropic_tool_use_streams_the_input_json_and_drops_the_text(
    anthropic_server: FakeAnthropicServer, anthropic: AnthropicClient
) -> None:
    pieces = ['{"answ', 'er": "42', '"}']
    anthropic_server.stream_tool_use(pieces, text_before="Let me answer with the tool.")
    seen = await consume(anthropic.stream(ask(schema=SCHEMA)))

    assert seen.deltas == pieces
    assert seen.response is not None and json.loads(seen.response.content) == {"answer": "42"}
    assert anthropic_server.requests[0].body["tool_choice"]["type"] == "tool"


async def test_anthropic_wrapped_schema_arrives_unwrapped_in_one_delta(
    anthropic_server: FakeAnthropicServer, anthropic: AnthropicClient
) -> None:
    anthropic_server.stream_tool_use(['{"value": [1,', " 2, 3]}"])
    seen = await consume(anthropic.stream(ask(schema={"type": "array"})))
    assert seen.deltas == ["[1, 2, 3]"]
    assert seen.response is not None and seen.response.content == "[1, 2, 3]"


async def test_anthropic_error_event_mid_stream_is_classified_with_the_partial(
    anthropic_server: FakeAnthropicServer, anthropic: AnthropicClient
) -> None:
    anthropic_server.stream_answer(WORDS, error_after=3)
    seen = await consume(anthropic.stream(ask()))

    assert seen.deltas == WORDS[:3]
    err = seen.error
    assert err is not None and err.kind is LLMErrorKind.SERVER and err.retryable
    assert err.partial == "The answer is "
    assert "reported overloaded_error after 14 characters" in str(err)
    assert "Overloaded" in str(err)
    assert_no_secret(err)


async def test_anthropic_cut_stream_raises_connection_error_with_the_partial(
    anthropic_server: FakeAnthropicServer, anthropic: AnthropicClient
) -> None:
    anthropic_server.stream_answer(WORDS, cut_after=4)
    seen = await consume(anthropic.stream(ask()))
    err = seen.error
    assert err is not None and err.kind is LLMErrorKind.CONNECTION
    assert err.partial == "The answer is forty" and "was cut" in str(err)
    assert_no_secret(err)


async def test_anthropic_rejected_key_is_an_auth_error_without_the_key() -> None:
    with FakeAnthropicServer(api_key="sk-ant-the-right-one") as srv:
        client = AnthropicClient(model="m", api_key=SECRET, base_url=srv.base_url)
        seen = await consume(client.stream(ask()))
        await client.aclose()
    err = seen.error
    assert err is not None and err.kind is LLMErrorKind.AUTH
    assert "[redacted]" in str(err)
    assert_no_secret(err)


async def test_anthropic_trickle_is_bounded_by_the_whole_call_timeout(
    anthropic_server: FakeAnthropicServer,
) -> None:
    anthropic_server.stream_answer(WORDS, byte_delay_s=0.01)
    client = AnthropicClient(model="m", api_key=SECRET, base_url=anthropic_server.base_url,
                             timeout_s=0.5)
    started = time.perf_counter()
    seen = await consume(client.stream(ask()))
    elapsed = time.perf_counter() - started
    await client.aclose()
    assert seen.error is not None and seen.error.kind is LLMErrorKind.TIMEOUT
    assert 0.45 < elapsed < 1.4, elapsed


# --- the contract: any client can be streamed ------------------------------------------------


class CompleteOnly:
    """A client that cannot stream (only the required methods)."""

    model = "plain"
    provider = "plain"

    async def complete(self, request: LLMRequest) -> LLMResponse:
        return LLMResponse(content="whole answer", usage=TokenUsage(4, 2), model=self.model)

    async def aclose(self) -> None:
        return None


async def test_a_client_that_cannot_stream_gives_its_whole_answer_as_one_delta() -> None:
    client: LLMClient = CompleteOnly()
    assert isinstance(client, LLMClient) and not supports_streaming(client)
    assert supports_streaming(ScriptedLLM(["x"]))
    seen = await consume(stream_from(client, ask()))
    assert seen.deltas == ["whole answer"]
    assert seen.response is not None and seen.response.content == "whole answer"


async def test_scripted_llm_streams_in_chunks_and_plays_a_cut() -> None:
    llm = ScriptedLLM(
        ["The answer is forty-two.",
         LLMError(LLMErrorKind.CONNECTION, "stream cut", partial="The answer")],
        chunk_chars=5, chunk_delay_s=0.03,
    )
    whole = await consume(llm.stream(ask()))
    assert whole.deltas == ["The a", "nswer", " is f", "orty-", "two."]
    assert whole.response is not None and whole.response.content == whole.text
    assert whole.times[-1] >= 0.1

    cut = await consume(llm.stream(ask()))
    assert cut.text == "The answer" and cut.error is not None
    assert cut.error.partial == "The answer"


# --- the gateway -----------------------------------------------------------------------------


@dataclasses.dataclass
class GatewayHarness:
    gateway: LLMGateway
    usage: RunUsage
    clock: ManualClock
    spans: InMemorySpanExporter
    records: list[tuple[LLMRequest, LLMResponse | None, BaseException | None]]


def harness(client: LLMClient, *, max_calls: int = 5, retries: int = 2) -> GatewayHarness:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    observer = Observer(Telemetry.create(provider, CollectorRegistry()), Redactor())
    clock = ManualClock()
    run = RunState(run_id="run-1", query="q")
    usage = run.usage
    budget = RunBudget(run, OrchestratorConfig(max_llm_calls_per_run=max_calls), observer)
    records: list[tuple[LLMRequest, LLMResponse | None, BaseException | None]] = []
    gateway = LLMGateway(
        client, observer=observer, usage=usage, run_id="run-1", budget=budget,
        policy=RetryPolicy(max_attempts=retries + 1, base_delay_s=0.25), clock=clock,
        debug_recorder=lambda req, resp, err, _elapsed: records.append((req, resp, err)),
    )
    return GatewayHarness(gateway, usage, clock, exporter, records)


async def test_gateway_retries_a_429_before_the_stream_and_accounts_the_answer(
    openai_server: FakeOpenAIServer, openai: OpenAICompatibleClient
) -> None:
    openai_server.error(429, "slow down", headers={"Retry-After": "2"})
    openai_server.stream_answer(WORDS, prompt_tokens=40, completion_tokens=8)
    h = harness(openai)
    seen = await consume(h.gateway.stream(ask()))

    # each piece once (pieces that arrived together are handed over as one)
    assert seen.error is None and "".join(seen.deltas) == "".join(WORDS)
    assert seen.response is not None and seen.response.content == seen.text
    assert h.clock.sleeps == [2.0]  # Retry-After honoured before the retry
    assert len(openai_server.requests) == 2
    assert (h.usage.llm_calls, h.usage.input_tokens, h.usage.output_tokens) == (1, 40, 8)
    assert h.usage.by_purpose["synthesis"]["calls"] == 1
    assert h.gateway.budget.llm_calls_made == 2  # the rate-limited attempt counts too
    spans = [s for s in h.spans.get_finished_spans() if s.name == "chat gpt-test"]
    assert len(spans) == 2
    assert spans[-1].attributes is not None
    assert spans[-1].attributes["gen_ai.usage.output_tokens"] == 8
    (_, first, error), (_, response, _) = h.records
    assert first is None and isinstance(error, LLMError)
    assert response is not None and response.content == "The answer is forty-two."


async def test_gateway_never_retries_after_the_first_delta(
    openai_server: FakeOpenAIServer, openai: OpenAICompatibleClient
) -> None:
    openai_server.stream_answer(WORDS, cut_after=2)
    openai_server.stream_answer(WORDS)  # what a retry would get: must stay unused
    h = harness(openai, retries=3)
    seen = await consume(h.gateway.stream(ask()))

    err = seen.error
    assert err is not None and err.kind is LLMErrorKind.CONNECTION and err.retryable
    assert "".join(seen.deltas) == "The answer " and err.partial == "The answer "
    assert len(openai_server.requests) == 1 and openai_server.pending == 1
    assert h.clock.sleeps == []
    assert h.usage.llm_calls == 0  # no usage without an answer, as for complete()
    (_, response, error), = h.records
    assert response is None and error is err


async def test_gateway_retries_an_error_event_that_came_before_any_text(
    anthropic_server: FakeAnthropicServer, anthropic: AnthropicClient
) -> None:
    anthropic_server.stream_raw(lambda request: [
        b'event: message_start\ndata: {"type": "message_start", "message": {"id": "msg_x", '
        b'"model": "claude-test", "usage": {"input_tokens": 5}}}\n\n',
        b'event: error\ndata: {"type": "error", "error": {"type": "overloaded_error", '
        b'"message": "Overloaded"}}\n\n',
    ])
    anthropic_server.stream_answer(["forty", "-two"])
    h = harness(anthropic)
    seen = await consume(h.gateway.stream(ask()))

    assert seen.error is None and "".join(seen.deltas) == "forty-two"
    assert len(anthropic_server.requests) == 2 and len(h.clock.sleeps) == 1
    assert h.usage.llm_calls == 1


async def test_gateway_turns_a_content_filter_finish_into_an_error_with_the_partial(
    openai_server: FakeOpenAIServer, openai: OpenAICompatibleClient
) -> None:
    openai_server.stream_answer(["I will not"], finish_reason="content_filter")
    seen = await consume(harness(openai).gateway.stream(ask()))
    assert seen.error is not None and seen.error.kind is LLMErrorKind.CONTENT_FILTER
    assert seen.error.partial == "I will not"


async def test_gateway_budget_applies_to_streams() -> None:
    h = harness(ScriptedLLM(["a", "b"]), max_calls=1)
    assert (await consume(h.gateway.stream(ask()))).text == "a"
    over = await consume(h.gateway.stream(ask()))
    assert isinstance(over.error, LLMBudgetExceeded)


async def test_gateway_streams_a_client_that_cannot_stream() -> None:
    h = harness(CompleteOnly())
    seen = await consume(h.gateway.stream(ask()))
    assert seen.deltas == ["whole answer"] and h.usage.input_tokens == 4


async def test_leaving_a_gateway_stream_early_cancels_the_call(
    openai_server: FakeOpenAIServer, openai: OpenAICompatibleClient
) -> None:
    openai_server.stream_answer(WORDS * 10, delay_s=0.05)  # ~3 s if read to the end
    h = harness(openai)
    started = time.perf_counter()
    async with aclosing(h.gateway.stream(ask())) as events:
        async for event in events:
            assert event.delta == "The "
            break
    assert time.perf_counter() - started < 1.0
    assert [t for t in asyncio.all_tasks() if t.get_name().startswith("llm-stream")] == []


async def test_pieces_that_arrived_together_are_handed_over_as_one_marked_last() -> None:
    # the whole answer was there before the consumer looked: one delta, marked last
    burst = harness(ScriptedLLM(["The answer is forty-two."], chunk_chars=3))
    events = [event async for event in burst.gateway.stream(ask())]
    assert [(e.delta, e.last) for e in events[:-1]] == [("The answer is forty-two.", True)]
    assert events[-1].final and events[-1].response is not None
    assert events[-1].response.content == "The answer is forty-two."

    # pieces that trickle in are handed over as they come; none but the last is marked
    trickle = harness(ScriptedLLM(["The answer is forty-two."], chunk_chars=3,
                                  chunk_delay_s=0.01))
    deltas = [event async for event in trickle.gateway.stream(ask()) if not event.final]
    assert len(deltas) == 8 and "".join(e.delta for e in deltas) == "The answer is forty-two."
    assert not any(e.last for e in deltas[:-1])


async def test_the_consumers_context_is_not_inside_the_llm_span(
    openai_server: FakeOpenAIServer, openai: OpenAICompatibleClient
) -> None:
    from opentelemetry import trace

    openai_server.stream_answer(["a", "b"])
    h = harness(openai)
    current = []
    async for _event in h.gateway.stream(ask()):
        current.append(trace.get_current_span().get_span_context().is_valid)
    assert current and not any(current)  # the deltas (one or more) and the final event


# --- answer synthesis through the orchestrator ----------------------------------------------


def adder_catalog() -> Catalog:
    catalog = Catalog()

    def add(a: int, b: int) -> dict[str, int]:
        return {"sum": a + b}

    catalog.add_function(add, tool="math", capability="add", input_schema={
        "type": "object", "required": ["a", "b"],
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}})
    return catalog


PLAN = {"steps": [{"id": "s", "tool": "math", "capability": "add",
                   "params": {"a": 40, "b": 2}}]}


class StreamingOrchestrator:
    """An orchestrator whose runs are watched live (``on_event``): their answer streams
    as ``answer_delta`` events, whose text lands in ``deltas``."""

    def __init__(self, llm: LLMClient, deltas: list[str], **config: Any) -> None:
        self.orch = Orchestrator(adder_catalog(), llm=llm, config=OrchestratorConfig(**config),
                                 registry=CollectorRegistry())
        self.deltas = deltas

    def _collect(self, event: RunEvent) -> None:
        if event.type == "answer_delta":
            self.deltas.append(event.data["text"])

    async def arun(self, query: str) -> RunResult:
        return await self.orch.arun(query, on_event=self._collect)


def streaming_orchestrator(
    llm: LLMClient, deltas: list[str], monkeypatch: pytest.MonkeyPatch, **config: Any
) -> StreamingOrchestrator:
    return StreamingOrchestrator(llm, deltas, **config)


async def test_streamed_synthesis_answer_equals_the_deltas_from_a_real_server(
    monkeypatch: pytest.MonkeyPatch, openai_server: FakeOpenAIServer,
    openai: OpenAICompatibleClient,
) -> None:
    openai_server.answer(json.dumps(PLAN))  # the plan: asked whole
    openai_server.stream_answer(["  The sum", " is 42", ".\n\n"], delay_s=0.02)
    deltas: list[str] = []
    result = await streaming_orchestrator(openai, deltas, monkeypatch,
                                          stream_plan=False).arun("40 + 2?")

    assert result.status == "succeeded", result.error
    assert result.answer == "The sum is 42." == "".join(deltas)  # trimmed as it streamed
    assert result.warnings == []
    assert "stream" not in openai_server.requests[0].body
    assert openai_server.requests[1].body["stream"] is True
    assert result.usage.by_purpose["synthesis"]["output_tokens"] == 7


async def test_cut_synthesis_stream_keeps_the_partial_answer_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, openai_server: FakeOpenAIServer,
    openai: OpenAICompatibleClient, tmp_path: Path,
) -> None:
    openai_server.answer(json.dumps(PLAN))
    openai_server.stream_answer(["The sum ", "is 4", "2."], cut_after=2)
    deltas: list[str] = []
    debug = tmp_path / "llm.jsonl"
    result = await streaming_orchestrator(
        openai, deltas, monkeypatch, llm_max_retries=2, llm_debug_enabled=True,
        llm_debug_path=debug).arun("40 + 2?")

    assert result.status == "succeeded"
    assert result.answer == "The sum is 4" == "".join(deltas)
    (warning,) = result.warnings
    assert warning.startswith("answer is partial: the answer stream stopped after 12 "
                              "characters"), warning
    assert "was cut" in warning and SECRET not in warning
    assert len(openai_server.requests) == 2  # no retry after text went out
    synthesis = [r for r in iter_records(debug) if r["site"] == "synthesis"]
    assert [r["error"]["partial"] for r in synthesis] == ["The sum is 4"]


async def test_synthesis_without_a_delta_consumer_asks_for_the_whole_answer(
    openai_server: FakeOpenAIServer, openai: OpenAICompatibleClient
) -> None:
    openai_server.stream_answer([json.dumps(PLAN)])  # the plan streams (ORCH_STREAM_PLAN)
    openai_server.answer("The sum is 42.")
    orch = Orchestrator(adder_catalog(), llm=openai, registry=CollectorRegistry())
    result = await orch.arun("40 + 2?")
    assert result.answer == "The sum is 42."
    plan, synthesis = openai_server.requests
    assert plan.body["stream"] is True and "stream" not in synthesis.body


async def test_synthesis_stream_failing_before_any_text_is_a_failed_synthesis(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    llm = ScriptedLLM([PLAN, LLMError(LLMErrorKind.AUTH, "bad key", partial="")])
    deltas: list[str] = []
    result = await streaming_orchestrator(llm, deltas, monkeypatch).arun("40 + 2?")
    assert result.answer is None and deltas == []
    assert result.warnings[0].startswith("answer synthesis failed: LLM auth error")


async def test_run_deadline_mid_stream_keeps_what_was_streamed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    llm = ScriptedLLM([PLAN, "The sum is 42, as the tool said."], chunk_chars=4,
                      chunk_delay_s=0.2)
    deltas: list[str] = []
    # the plan asked whole: streamed at this pace it alone would outlast the deadline
    orch = streaming_orchestrator(llm, deltas, monkeypatch, run_timeout_s=0.5,
                                  stream_plan=False)
    result = await orch.arun("40 + 2?")
    assert deltas and result.answer == "".join(deltas)
    assert len(result.answer) < len("The sum is 42, as the tool said.")
    assert "answer is partial" in result.warnings[0]
    assert "the run deadline passed" in result.warnings[0]
