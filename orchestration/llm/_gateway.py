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
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import TypeVar

from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt

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

T = TypeVar("T")

DebugRecorder = Callable[[LLMRequest, LLMResponse | None, BaseException | None, float], None]


def _worth_retrying(exc: BaseException) -> bool:
    return isinstance(exc, LLMError) and exc.retryable and not isinstance(exc, LLMBudgetExceeded)


class _Channel:
    """How a stream's producer hands its text to the consumer: the text that arrived
    since the consumer last looked, and how the stream ended (its final event, or the
    error it failed with).

    The text that arrived while the consumer was busy is handed over in one piece: a
    consumer's cost is per event, and an answer that arrives whole (a model that answers
    at once, a burst of server-sent events read together) then costs one event instead
    of hundreds. Nothing that has arrived is held back, so a stream that trickles in is
    delivered piece by piece as before.
    """

    __slots__ = ("_waiter", "delivered", "end", "pieces")

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.delivered = False
        """Text has been handed over: the call may no longer be retried."""
        self.end: LLMStreamEvent | BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None

    def put(self, delta: str) -> None:
        self.pieces.append(delta)
        self.delivered = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def close(self, end: LLMStreamEvent | BaseException) -> None:
        self.end = end
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def take(self) -> tuple[str, LLMStreamEvent | BaseException | None]:
        """The text that arrived since the last call (waiting for some), and the end if
        the stream has ended."""
        while not self.pieces and self.end is None:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        text = self.pieces[0] if len(self.pieces) == 1 else "".join(self.pieces)
        self.pieces.clear()
        return text, self.end


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

    def _delay(self, exc: BaseException | None, attempt: int) -> float:
        """How long to wait after failed attempt number ``attempt`` (from 1)."""
        retry_after = exc.retry_after_s if isinstance(exc, LLMError) else None
        return self.policy.rate_limit_delay(retry_after, attempt, self.run_id)

    async def _with_retries(
        self, call: Callable[[], Awaitable[T]], worth_retrying: Callable[[BaseException], bool]
    ) -> T:
        """``call()``, retried under the policy while its failure is worth retrying.

        The first attempt is a plain call: almost every LLM call succeeds at once, and
        tenacity's retry state (objects that refer to each other, so only the cyclic
        garbage collector frees them and what they hold — the run) is made only once a
        retry is due. Attempt ``n`` waits the policy's delay for attempt ``n - 1``."""
        try:
            return await call()
        except Exception as exc:
            if self.policy.max_attempts <= 1 or not worth_retrying(exc):
                raise
            first = exc
        await self.clock.sleep(self._delay(first, 1))
        result: list[T] = []
        async for attempt in AsyncRetrying(
            stop=stop_after_attempt(self.policy.max_attempts - 1),
            wait=lambda state: self._delay(
                state.outcome.exception() if state.outcome else None, state.attempt_number + 1),
            retry=retry_if_exception(worth_retrying),
            sleep=self.clock.sleep,
            reraise=True,
        ):
            with attempt:
                result.append(await call())
        return result[-1]

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """Ask the LLM, retrying transient provider failures; raise :class:`LLMError`."""
        request.run_id = request.run_id or self.run_id
        return await self._with_retries(lambda: self._one_call(request), _worth_retrying)

    async def stream(self, request: LLMRequest) -> AsyncGenerator[LLMStreamEvent, None]:
        """Ask the LLM for a streamed answer: deltas, then the final event.

        Budget, usage, span (``chat <model>``), debug record (the whole answer) and
        content filter as :meth:`complete`; retries only until the first delta (see the
        module docstring). A client that cannot stream answers through ``complete()``
        and its answer arrives as one delta. Errors are :class:`LLMError`; one raised
        after text arrived carries it in ``partial``. The final response's content is
        exactly the concatenation of the deltas delivered.

        The call runs in a task of its own that hands its text over (``_Channel``), so the
        call's span is never the current span in the consumer's code (work the consumer
        starts between deltas is not parented to the LLM call), and leaving the loop
        early, or being cancelled, cancels the call. Iterate to the end or inside
        ``contextlib.aclosing``.
        """
        request.run_id = request.run_id or self.run_id
        channel = _Channel()
        producer = asyncio.create_task(self._produce(request, channel),
                                       name=f"llm-stream:{request.purpose}")
        try:
            while True:
                text, end = await channel.take()
                if text:
                    # ``last``: the rest of the answer came with this text
                    yield LLMStreamEvent(delta=text, last=isinstance(end, LLMStreamEvent))
                if isinstance(end, BaseException):
                    raise end
                if end is not None:
                    yield end
                    return
        finally:
            if not producer.done():
                producer.cancel()
                # wait() rather than await: the producer's CancelledError is not ours,
                # while a cancellation of this task must still get through.
                await asyncio.wait({producer})

    async def _produce(
        self, request: LLMRequest, channel: _Channel
    ) -> None:
        """Run the streamed call with its retries, feeding ``channel``; never raises."""

        def worth_retrying(exc: BaseException) -> bool:
            return not channel.delivered and _worth_retrying(exc)

        try:
            response = await self._with_retries(
                lambda: self._one_stream(request, channel.put), worth_retrying)
            channel.close(LLMStreamEvent(response=response))
        except Exception as exc:  # handed to the consumer, who raises it
            channel.close(exc)

    async def _one_stream(
        self, request: LLMRequest, deliver: Callable[[str], None]
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
        deliver: Callable[[str], None],
    ) -> LLMResponse:
        # a client that streams is read directly (every piece of a long answer passes
        # here: one async generator less per piece), any other through stream_from
        client = self.client
        events = (client.stream(request) if supports_streaming(client)
                  else stream_from(client, request))
        append = parts.append
        try:
            async for event in events:
                if event.response is not None:
                    text = "".join(parts)
                    if event.response.content != text:
                        # What the consumer saw is the answer: a client whose final
                        # content differs from its deltas must not contradict it.
                        return dataclasses.replace(event.response, content=text)
                    return event.response
                delta = event.delta
                if delta:
                    append(delta)
                    deliver(delta)
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
