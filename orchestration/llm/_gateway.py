"""The one door every LLM call of a run goes through.

It enforces the run's LLM budgets (calls, tokens, cost: :mod:`orchestration._budget`),
retries transient provider failures (rate limit,
timeout, connection, 5xx) under the same :class:`~orchestration.retry_policy.RetryPolicy`
type the tools use (``Retry-After`` honoured, capped), turns a content-filter finish into
an error, and records usage. What it does is told to the run's observer (span, metrics)
and to the debug store. Planners and layers ask it; they never hold a client themselves.
"""

from __future__ import annotations

from collections.abc import Callable

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from orchestration._budget import RunBudget
from orchestration.clock import Clock
from orchestration.errors import LLMBudgetExceeded, LLMError, LLMErrorKind
from orchestration.llm.base import LLMClient, LLMRequest, LLMResponse
from orchestration.result import RunUsage
from orchestration.retry_policy import RetryPolicy
from orchestration.telemetry._observer import Observer

__all__ = ["DebugRecorder", "LLMGateway"]

DebugRecorder = Callable[[LLMRequest, LLMResponse | None, BaseException | None, float], None]


def _worth_retrying(exc: BaseException) -> bool:
    return isinstance(exc, LLMError) and exc.retryable and not isinstance(exc, LLMBudgetExceeded)


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

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """Ask the LLM, retrying transient provider failures; raise :class:`LLMError`."""
        request.run_id = request.run_id or self.run_id
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.policy.max_attempts),
            wait=self._wait,
            retry=retry_if_exception(_worth_retrying),
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
        try:
            self.budget.before_llm_call()
        except LLMBudgetExceeded:
            self.observer.llm_budget_exceeded(request.purpose)
            raise
        provider = str(getattr(self.client, "provider", "unknown"))
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
