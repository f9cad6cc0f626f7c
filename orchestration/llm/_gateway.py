"""The one door every LLM call of a run goes through.

It enforces the run's LLM budgets (calls, tokens, cost: :mod:`orchestration._budget`),
retries transient provider failures (rate limit,
timeout, connection, 5xx) under the same :class:`~orchestration.retry_policy.RetryPolicy`
type the tools use (``Retry-After`` honoured, capped), turns a content-filter finish into
an error, and records usage. What it does is told to the run's observer (span, metrics)
and to the debug store. Planners and layers ask it; they never hold a client themselves.

:meth:`LLMGateway.stream` does the same for a streamed answer, with one rule of its
own: **a stream is retried only before its first delta has been delivered.** A failure
before any text (a 429 or 5xx answer, a refused connection, an ``error`` event or a cut
before the first delta) is retried like a failed ``complete``; after a delta has gone
to the consumer, a retry would make the model write the answer again and the consumer
would see text twice, so the error is raised at once with the text so far in its
``partial``.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncGenerator, Callable

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from orchestration._budget import RunBudget
from orchestration.clock import Clock
from orchestration.errors import LLMBudgetExceeded, LLMError, LLMErrorKind
from orchestration.llm.base import (
    LLMClient,
    LLMRequest,
    LLMResponse,
    LLMStreamEvent,
    close_iterator,
    stream_from,
    supports_streaming,
)
from orchestration.result import RunUsage
from orchestration.retry_policy import RetryPolicy
from orchestration.telemetry._observer import Observer

__all__ = ["DebugRecorder", "LLMGateway"]

DebugRecorder = Callable[[LLMRequest, LLMResponse | None, BaseException | None, float], None]


def _worth_retrying(exc: BaseException) -> bool:
    return isinstance(exc, LLMError) and exc.retryable and not isinstance(exc, LLMBudgetExceeded)


@dataclasses.dataclass(frozen=True, slots=True)
class _StreamFailed:
    """How a stream's producer hands its error to the consumer."""

    error: BaseException


class LLMGateway:
    """Per-run access to the LLM: budget, retries, usage accounting, observation.

    ``usage`` is the run state's :class:`RunUsage`, updated in place; ``budget`` counts
    the calls (from ``usage.llm_calls``, so a resumed run keeps the budget it has spent)
    and refuses the ones no budget allows.
    """

    def __init__(
        self,
        client: LLMClient,
        *,
        observer: Observer,
        usage: RunUsage,
        run_id: str,
        budget: RunBudget,
        policy: RetryPolicy,
        clock: Clock | None = None,
        debug_recorder: DebugRecorder | None = None,
    ) -> None:
        self.client = client
        self.observer = observer
        self.usage = usage
        self.run_id = run_id
        self.budget = budget
        self.policy = policy
        self.clock = clock or Clock()
        self.debug_recorder = debug_recorder

    @property
    def model(self) -> str | None:
        return getattr(self.client, "model", None)

    @property
    def streams(self) -> bool:
        """Whether the client streams natively (:func:`supports_streaming`): only then does
        :meth:`stream` deliver an answer while it is written rather than all at the end."""
        return supports_streaming(self.client)

    @property
    def max_retries(self) -> int:
        return self.policy.max_retries

    @property
    def remaining_calls(self) -> int:
        """LLM calls the run may still make (0 once any budget stopped it)."""
        return self.budget.remaining_llm_calls

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        retry_after = exc.retry_after_s if isinstance(exc, LLMError) else None
        return self.policy.rate_limit_delay(retry_after, state.attempt_number, self.run_id)

    def _retrying(self, worth_retrying: Callable[[BaseException], bool]) -> AsyncRetrying:
        return AsyncRetrying(
            stop=stop_after_attempt(self.policy.max_attempts),
            wait=self._wait,
            retry=retry_if_exception(worth_retrying),
            sleep=self.clock.sleep,
            reraise=True,
        )

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """Ask the LLM, retrying transient provider failures; raise :class:`LLMError`."""
        request.run_id = request.run_id or self.run_id
        response: LLMResponse | None = None
        async for attempt in self._retrying(_worth_retrying):
            with attempt:
                response = await self._one_call(request)
        assert response is not None
        return response

    async def stream(self, request: LLMRequest) -> AsyncGenerator[LLMStreamEvent, None]:
        """Ask the LLM for a streamed answer: deltas, then the final event.

        Budget, usage, span (``chat <model>``), debug record (the whole answer) and
        content filter as :meth:`complete`; retries only until the first delta (see the
        module docstring). A client that cannot stream answers through ``complete()``
        and its answer arrives as one delta. Errors are :class:`LLMError`; one raised
        after text arrived carries it in ``partial``. The final response's content is
        exactly the concatenation of the deltas delivered.

        The call runs in a task of its own that hands events over a queue, so the
        call's span is never the current span in the consumer's code (work the consumer
        starts between deltas is not parented to the LLM call), and leaving the loop
        early, or being cancelled, cancels the call. Iterate to the end or inside
        ``contextlib.aclosing``.
        """
        request.run_id = request.run_id or self.run_id
        queue: asyncio.Queue[LLMStreamEvent | _StreamFailed] = asyncio.Queue()
        producer = asyncio.create_task(self._produce(request, queue),
                                       name=f"llm-stream:{request.purpose}")
        try:
            while True:
                item = await queue.get()
                if isinstance(item, _StreamFailed):
                    raise item.error
                yield item
                if item.final:
                    return
        finally:
            if not producer.done():
                producer.cancel()
                # wait() rather than await: the producer's CancelledError is not ours,
                # while a cancellation of this task must still get through.
                await asyncio.wait({producer})

    async def _produce(
        self, request: LLMRequest, queue: asyncio.Queue[LLMStreamEvent | _StreamFailed]
    ) -> None:
        """Run the streamed call with its retries, feeding ``queue``; never raises."""
        delivered = False

        def deliver(event: LLMStreamEvent) -> None:
            nonlocal delivered
            delivered = True
            queue.put_nowait(event)

        def worth_retrying(exc: BaseException) -> bool:
            return not delivered and _worth_retrying(exc)

        try:
            response: LLMResponse | None = None
            async for attempt in self._retrying(worth_retrying):
                with attempt:
                    response = await self._one_stream(request, deliver)
            assert response is not None
            queue.put_nowait(LLMStreamEvent(response=response))
        except Exception as exc:  # handed to the consumer, who raises it
            queue.put_nowait(_StreamFailed(exc))

    async def _one_stream(
        self, request: LLMRequest, deliver: Callable[[LLMStreamEvent], None]
    ) -> LLMResponse:
        """One streamed call: every delta to ``deliver``, the final response returned."""
        self._spend_call(request)
        provider = self._provider
        parts: list[str] = []
        with self.observer.llm_call(request, run_id=self.run_id, provider=provider,
                                    model=self.model or "unknown",
                                    base_url=getattr(self.client, "base_url", None)) as call:
            try:
                response = await self._read_stream(request, parts, deliver)
                if response.finish_reason == "content_filter":
                    raise LLMError(
                        LLMErrorKind.CONTENT_FILTER,
                        "the provider stopped the answer with its content filter",
                        provider=provider,
                        partial="".join(parts),
                    )
            except LLMError as exc:
                if exc.partial is None and parts:
                    exc.partial = "".join(parts)
                self._record_debug(request, None, exc, call.failed(exc))
                raise
            except Exception as exc:  # a client bug must not escape unclassified
                self._record_debug(request, None, exc, call.failed(exc))
                raise LLMError(LLMErrorKind.OTHER, f"LLM client raised {exc!r}",
                               partial="".join(parts) if parts else None) from exc
            usage = response.usage
            self.usage.record_llm(request.purpose, usage.input_tokens, usage.output_tokens)
            self.budget.after_llm_call(request.purpose, response, self.model)
            self._record_debug(request, response, None, call.succeeded(response))
            return response

    async def _read_stream(
        self,
        request: LLMRequest,
        parts: list[str],
        deliver: Callable[[LLMStreamEvent], None],
    ) -> LLMResponse:
        events = stream_from(self.client, request)
        try:
            async for event in events:
                if event.response is not None:
                    text = "".join(parts)
                    if event.response.content != text:
                        # What the consumer saw is the answer: a client whose final
                        # content differs from its deltas must not contradict it.
                        return dataclasses.replace(event.response, content=text)
                    return event.response
                if event.delta:
                    parts.append(event.delta)
                    deliver(event)
        finally:
            await close_iterator(events)
        raise LLMError(LLMErrorKind.MALFORMED,
                       "the client's stream ended without its final response",
                       provider=self._provider)

    @property
    def _provider(self) -> str:
        return str(getattr(self.client, "provider", "unknown"))

    def _spend_call(self, request: LLMRequest) -> None:
        """Count one call against the run's budgets, or raise :class:`LLMBudgetExceeded`."""
        try:
            self.budget.before_llm_call()
        except LLMBudgetExceeded:
            self.observer.llm_budget_exceeded(request.purpose)
            raise

    async def _one_call(self, request: LLMRequest) -> LLMResponse:
        self._spend_call(request)
        provider = self._provider
        with self.observer.llm_call(request, run_id=self.run_id, provider=provider,
                                    model=self.model or "unknown",
                                    base_url=getattr(self.client, "base_url", None)) as call:
            try:
                response = await self.client.complete(request)
                if response.finish_reason == "content_filter":
                    raise LLMError(
                        LLMErrorKind.CONTENT_FILTER,
                        "the provider stopped the answer with its content filter",
                        provider=provider,
                    )
            except LLMError as exc:
                self._record_debug(request, None, exc, call.failed(exc))
                raise
            except Exception as exc:  # a client bug must not escape unclassified
                self._record_debug(request, None, exc, call.failed(exc))
                raise LLMError(LLMErrorKind.OTHER, f"LLM client raised {exc!r}") from exc
            usage = response.usage
            self.usage.record_llm(request.purpose, usage.input_tokens, usage.output_tokens)
            self.budget.after_llm_call(request.purpose, response, self.model)
            self._record_debug(request, response, None, call.succeeded(response))
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
