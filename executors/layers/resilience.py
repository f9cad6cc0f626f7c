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
  re-resolve the parameters or declare it transient), any other status stops the step;
* a call the tool's circuit breaker refused (``CIRCUIT_OPEN``, nothing sent) fails the
  step at once — that is the point of the breaker — unless the breaker lets a probe
  through within the tool's ``max_wait_s`` (``ORCH_CIRCUIT_MAX_WAIT_S``, default 0)
  and before the step's deadline: then it waits for that and tries again.

Retries are counted per step against the step's
:class:`~orchestration.retry_policy.RetryPolicy` (global → capability → step overrides).
What the faults mean comes from :mod:`executors.faults`.
"""

from __future__ import annotations

import asyncio

from executors._resend import resend_blocked
from executors.faults import is_structured, is_structured_service_error, is_transport_fault
from executors.recovery import Decision, GiveUp, StepState
from orchestration.circuit import CircuitSettings
from orchestration.protocol import ErrorCategory, StepError

__all__ = ["COUNTER", "ResilienceHandler"]

COUNTER = "resilience"
_PAST_COOL_DOWN_S = 0.001
"""Added to a wait for a breaker's cool-down, so the retry comes after it, not at it."""


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
        if category is ErrorCategory.CIRCUIT_OPEN:
            return self._circuit_open(state, error)
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
    def _circuit_open(state: StepState, error: StepError) -> Decision | GiveUp:
        """The tool's circuit breaker refused the call (nothing was sent): fail fast,
        unless the breaker lets a probe through within the tool's ``max_wait_s``, before
        the step's deadline and with a retry left — then wait for it and try again."""
        policy = state.retry_policy
        settings = CircuitSettings.for_capability(state.services.config, state.capability)
        used = state.count(COUNTER)
        wait = (error.retry_after_s if error.retry_after_s is not None
                else policy.delay(used + 1, state.retry_key))
        why = None
        if used >= policy.max_retries:
            why = f"no resilience retry left (retry max_attempts={policy.max_attempts})"
        elif wait > settings.max_wait_s:
            why = (f"the breaker lets a call through in {wait:.1f}s, longer than a step "
                   f"waits for it (circuit max_wait_s={settings.max_wait_s:g}, "
                   "ORCH_CIRCUIT_MAX_WAIT_S)")
        elif state.deadline is not None and (
                asyncio.get_running_loop().time() + wait >= state.deadline):
            why = f"the breaker lets a call through in {wait:.1f}s, after the step's deadline"
        if why is not None:
            return GiveUp(f"failed fast: the circuit breaker of tool "
                          f"{state.capability.tool!r} is open; {why}")
        number = state.bump(COUNTER)
        delay = wait + _PAST_COOL_DOWN_S
        state.report("resilience_retry", {
            "error.category": error.category.value, "error.code": error.code,
            "retry.delay_s": delay, "retry.attempt": number,
            "retry.max_retries": policy.max_retries, "retry.retry_after_s": error.retry_after_s,
        })
        return Decision(params=dict(state.params or {}), layer="resilience", delay_s=delay,
                        note=f"resilience retry {number}/{policy.max_retries}: waited for the "
                             f"circuit breaker of tool {state.capability.tool!r} to let a "
                             "probe call through")

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
