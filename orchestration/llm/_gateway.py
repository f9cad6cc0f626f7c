"""The one door every LLM call of a run goes through.

It enforces the per-run call budget, retries transient provider failures (rate limit,
timeout, connection, 5xx) with backoff that honours ``Retry-After``, turns a
content-filter finish into an error, records usage, and emits a span and metrics per
call. Planners and layers ask it; they never hold a client themselves.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from opentelemetry.trace import SpanKind, Status, StatusCode
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from orchestration.clock import Clock
from orchestration.errors import LLMBudgetExceeded, LLMError, LLMErrorKind
from orchestration.llm.base import LLMClient, LLMRequest, LLMResponse
from orchestration.result import RunUsage
from orchestration.telemetry import Telemetry
from orchestration.telemetry import _tracing as attr

DebugRecorder = Callable[[LLMRequest, LLMResponse | None, BaseException | None, float], None]


class LLMGateway:
    """Per-run access to the LLM: budget, retries, telemetry, usage accounting."""

    def __init__(
        self,
        client: LLMClient,
        *,
        telemetry: Telemetry,
        usage: RunUsage,
        run_id: str,
        max_calls: int,
        max_retries: int = 2,
        base_delay_s: float = 0.5,
        max_delay_s: float = 10.0,
        retry_after_cap_s: float = 30.0,
        clock: Clock | None = None,
        debug_recorder: DebugRecorder | None = None,
    ) -> None:
        self.client = client
        self.telemetry = telemetry
        self.usage = usage
        self.run_id = run_id
        self.max_calls = max_calls
        self.max_retries = max_retries
        self.base_delay_s = base_delay_s
        self.max_delay_s = max_delay_s
        self.retry_after_cap_s = retry_after_cap_s
        self.clock = clock or Clock()
        self.debug_recorder = debug_recorder
        self.calls_made = 0

    @property
    def model(self) -> str | None:
        return getattr(self.client, "model", None)

    @property
    def remaining_calls(self) -> int:
        return self.max_calls - self.calls_made

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        delay = min(self.max_delay_s, self.base_delay_s * (2 ** (state.attempt_number - 1)))
        if isinstance(exc, LLMError) and exc.retry_after_s is not None:
            delay = min(self.retry_after_cap_s, max(delay, exc.retry_after_s))
        return delay

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """Ask the LLM, retrying transient provider failures; raise :class:`LLMError`."""
        request.run_id = request.run_id or self.run_id
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.max_retries + 1),
            wait=self._wait,
            retry=retry_if_exception(
                lambda e: isinstance(e, LLMError)
                and e.retryable
                and not isinstance(e, LLMBudgetExceeded)
            ),
            sleep=self.clock.sleep,
            reraise=True,
        )
        response: LLMResponse | None = None
        async for attempt in retrying:
            with attempt:
                response = await self._one_call(request)
        assert response is not None
        return response

    async def _one_call(self, request: LLMRequest) -> LLMResponse:
        m = self.telemetry.metrics
        if self.calls_made >= self.max_calls:
            m.llm_calls.labels(request.purpose, "budget_exceeded").inc()
            raise LLMBudgetExceeded(self.max_calls)
        self.calls_made += 1
        model = self.model or "unknown"
        span_attrs: dict[str, Any] = {
            attr.GEN_AI_OPERATION: "chat",
            attr.GEN_AI_SYSTEM: getattr(self.client, "provider", "unknown"),
            attr.GEN_AI_PROVIDER: getattr(self.client, "provider", "unknown"),
            attr.GEN_AI_REQUEST_MODEL: model,
            attr.GEN_AI_REQUEST_TEMPERATURE: request.temperature,
            attr.GEN_AI_REQUEST_MAX_TOKENS: request.max_output_tokens,
            attr.GEN_AI_OUTPUT_TYPE: "json" if request.response_schema else "text",
            attr.PURPOSE: request.purpose,
            attr.RUN_ID: self.run_id,
            attr.STEP_ID: request.step_id,
        }
        with self.telemetry.tracer.start_as_current_span(
            f"chat {model}", kind=SpanKind.CLIENT, attributes=attr.clean_attributes(span_attrs)
        ) as span:
            started = time.perf_counter()
            try:
                response = await self.client.complete(request)
                if response.finish_reason == "content_filter":
                    raise LLMError(
                        LLMErrorKind.CONTENT_FILTER,
                        "the provider stopped the answer with its content filter",
                        provider=getattr(self.client, "provider", None),
                    )
            except LLMError as exc:
                elapsed = time.perf_counter() - started
                m.llm_calls.labels(request.purpose, exc.kind.value).inc()
                m.llm_latency.labels(request.purpose).observe(elapsed)
                span.set_status(Status(StatusCode.ERROR, str(exc)))
                span.set_attribute("error.type", exc.kind.value)
                self._record_debug(request, None, exc, elapsed)
                raise
            except Exception as exc:  # a client bug must not escape unclassified
                elapsed = time.perf_counter() - started
                m.llm_calls.labels(request.purpose, "other").inc()
                span.set_status(Status(StatusCode.ERROR, repr(exc)))
                span.set_attribute(attr.ERROR_TYPE, type(exc).__name__)
                self._record_debug(request, None, exc, elapsed)
                raise LLMError(LLMErrorKind.OTHER, f"LLM client raised {exc!r}") from exc
            elapsed = time.perf_counter() - started
            usage = response.usage
            self.usage.record_llm(request.purpose, usage.input_tokens, usage.output_tokens)
            m.llm_calls.labels(request.purpose, "ok").inc()
            m.llm_latency.labels(request.purpose).observe(elapsed)
            m.llm_tokens.labels(request.purpose, "input").inc(usage.input_tokens)
            m.llm_tokens.labels(request.purpose, "output").inc(usage.output_tokens)
            span.set_attribute(attr.GEN_AI_INPUT_TOKENS, usage.input_tokens)
            span.set_attribute(attr.GEN_AI_OUTPUT_TOKENS, usage.output_tokens)
            if response.model:
                span.set_attribute(attr.GEN_AI_RESPONSE_MODEL, response.model)
            if response.finish_reason:
                span.set_attribute(attr.GEN_AI_RESPONSE_FINISH_REASONS, [response.finish_reason])
            self._record_debug(request, response, None, elapsed)
            return response

    def _record_debug(
        self,
        request: LLMRequest,
        response: LLMResponse | None,
        error: BaseException | None,
        elapsed: float,
    ) -> None:
        if self.debug_recorder is not None:
            self.debug_recorder(request, response, error, elapsed)
