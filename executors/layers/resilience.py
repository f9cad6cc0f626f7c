"""Resilience: retry transport faults with the same parameters, or stop at once.

The first handler of the recovery chain. It never rewrites parameters — a timeout or an
overloaded server is not the parameters' fault — and it decides before any LLM is asked:

* auth errors (401/403) stop the step at once: no retry and no LLM call can fix
  credentials, so the later layers never see them;
* a refused connection (nothing was sent) and a rate limit (the server refused to
  process) are always safe to repeat; a 429 waits for its ``Retry-After``, capped;
* a timeout, dropped connection or 5xx may have been processed already: it is repeated
  only for idempotent capabilities or ones that send an idempotency key; otherwise the
  step stops and its history says why it was not re-sent;
* a Python tool that timed out while its thread still runs (``details.still_running``)
  is never repeated: it would run twice at once;
* a service error the tool reported as a structured error marked ``retryable: false`` is
  not a plain transport fault: a 503 of that kind is left to layer 4 (which may
  re-resolve the parameters or declare it transient), any other status stops the step.

Retries are counted per step against the step's
:class:`~orchestration.retry_policy.RetryPolicy` (global → capability → step overrides).
What the faults mean comes from :mod:`executors.faults`.
"""

from __future__ import annotations

from executors._resend import resend_blocked
from executors.faults import is_structured, is_structured_service_error, is_transport_fault
from executors.recovery import Decision, GiveUp, StepState
from orchestration.protocol import ErrorCategory, StepError

__all__ = ["COUNTER", "ResilienceHandler"]

COUNTER = "resilience"


class ResilienceHandler:
    """Auth → stop; transport faults → same parameters after deterministic backoff."""

    async def decide(self, state: StepState, error: StepError) -> Decision | GiveUp | None:
        category = error.category
        if category is ErrorCategory.AUTH_ERROR:
            status = f"HTTP {error.http_status}" if error.http_status is not None else error.code
            return GiveUp(
                f"authentication/authorization failed ({status}): not retried and no LLM "
                "asked — parameters cannot fix credentials"
            )
        if category is ErrorCategory.SERVICE_ERROR and is_structured(error) and not error.retryable:
            if is_structured_service_error(error):
                return None  # layer 4 reads it (and may declare it transient)
            return GiveUp(
                f"the tool reported {error.code} (HTTP {error.http_status}) with "
                "retryable=false: not retried"
            )
        if not is_transport_fault(error):
            return None  # input errors, binding, invalid responses: not a transport fault
        if error.details.get("still_running"):
            return GiveUp("the Python tool timed out and is still running in its thread: "
                          "not run again while it runs")

        policy = state.retry_policy
        if policy.max_retries == 0:
            return None  # retries are switched off for this call
        if category is not ErrorCategory.RATE_LIMIT:
            blocked = resend_blocked(state.capability, state.params or {}, state.attempts)
            if blocked is not None:
                state.annotate_last_attempt(blocked)
                return GiveUp(blocked)
        used = state.count(COUNTER)
        if used >= policy.max_retries:
            if is_structured_service_error(error):
                return None  # layer 4 may still read the structured error
            return GiveUp(
                f"resilience retries exhausted: {used} retr{'y' if used == 1 else 'ies'} after "
                f"{category.value} (retry max_attempts={policy.max_attempts})"
            )
        return self._retry(state, error)

    @staticmethod
    def _retry(state: StepState, error: StepError) -> Decision:
        policy = state.retry_policy
        number = state.bump(COUNTER)
        if error.category is ErrorCategory.RATE_LIMIT:
            delay = policy.rate_limit_delay(error.retry_after_s, number, state.retry_key)
        else:
            delay = policy.delay(number, state.retry_key)
        state.report("resilience_retry", {
            "error.category": error.category.value,
            "error.code": error.code,
            "retry.delay_s": delay,
            "retry.attempt": number,
            "retry.max_retries": policy.max_retries,
            "retry.retry_after_s": error.retry_after_s,
        })
        return Decision(
            params=dict(state.params or {}),
            layer="resilience",
            delay_s=delay,
            note=f"resilience retry {number}/{policy.max_retries} after "
            f"{error.category.value}/{error.code}",
        )
