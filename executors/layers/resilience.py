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
* a 5xx whose body is a structured tool error marked ``retryable: false`` is not a plain
  transport fault: a 503 of that kind is left to layer 4 (which may re-resolve the
  parameters or declare it transient), any other status stops the step.

Retries are counted per step against the call's :class:`~executors.retry_policy.RetryPolicy`.
"""

from __future__ import annotations

from opentelemetry import trace

from executors.recovery import Decision, GiveUp, StepState
from orchestration.catalog import Capability
from orchestration.config import OrchestratorConfig
from orchestration.errors import ConfigError
from orchestration.protocol import ErrorCategory, StepError
from orchestration.retry_policy import RetryPolicy, policy_for, retry_key
from orchestration.telemetry import _tracing as attr

COUNTER = "resilience"

# failures after which the tool may have acted on the request although it did not answer
_AMBIGUOUS = frozenset({ErrorCategory.TIMEOUT, ErrorCategory.CONNECTION_ERROR,
                        ErrorCategory.SERVICE_ERROR})

NOT_RESENT = "not re-sent: non-idempotent capability and the request may have been processed"


def carries_structured_error(error: StepError) -> bool:
    """A service error reported as a tool error envelope with a 503 (or by a Python tool).

    Such an answer carries semantic information (e.g. "location not found" wrapped in a
    503) that layer 4 can read; a bare ``HTTP_5xx`` carries none.
    """
    return (
        error.category is ErrorCategory.SERVICE_ERROR
        and not error.code.startswith("HTTP_")
        and error.http_status in (503, None)
    )


def resend_blocked(capability: Capability, error: StepError) -> str | None:
    """Why repeating the same request is unsafe after ``error``, or None if it is safe.

    It is unsafe when the capability is not idempotent, the failure is ambiguous (the
    request was sent and the tool may have acted on it) and no idempotency key lets the
    tool recognise the repeat.
    """
    if capability.is_idempotent or capability.idempotency_key_header:
        return None
    if error.request_sent and error.category in _AMBIGUOUS:
        return NOT_RESENT
    return None


def annotate_last_attempt(state: StepState, text: str) -> None:
    """Record ``text`` on the step's latest attempt, so the history says why it stopped."""
    last = state.last_attempt
    if last is not None:
        last.note = f"{last.note}; {text}" if last.note else text


class ResilienceHandler:
    """Auth → stop; transport faults → same parameters after deterministic backoff."""

    def __init__(self, config: OrchestratorConfig) -> None:
        self.config = config

    async def decide(self, state: StepState, error: StepError) -> Decision | GiveUp | None:
        category = error.category
        if category is ErrorCategory.AUTH_ERROR:
            status = f"HTTP {error.http_status}" if error.http_status is not None else error.code
            return GiveUp(
                f"authentication/authorization failed ({status}): not retried and no LLM "
                "asked — parameters cannot fix credentials"
            )
        if category is ErrorCategory.SERVICE_ERROR and not error.retryable \
                and not error.code.startswith("HTTP_"):
            if carries_structured_error(error):
                return None  # layer 4 reads it (and may declare it transient)
            return GiveUp(
                f"the tool reported {error.code} (HTTP {error.http_status}) with "
                "retryable=false: not retried"
            )
        if category is not ErrorCategory.RATE_LIMIT and category not in _AMBIGUOUS:
            return None  # input errors, binding, invalid responses: not a transport fault

        try:
            policy = policy_for(state.ctx.config, state.capability, state.step)
        except ConfigError as exc:
            return GiveUp(str(exc))
        if policy.max_retries == 0:
            return None  # retries are switched off for this call
        if category is not ErrorCategory.RATE_LIMIT:
            blocked = resend_blocked(state.capability, error)
            if blocked is not None:
                annotate_last_attempt(state, blocked)
                return GiveUp(blocked)
        used = state.count(COUNTER)
        if used >= policy.max_retries:
            if carries_structured_error(error):
                return None  # layer 4 may still read the structured error
            return GiveUp(
                f"resilience retries exhausted: {used} retr{'y' if used == 1 else 'ies'} after "
                f"{category.value} (retry max_attempts={policy.max_attempts})"
            )
        return self._retry(state, error, policy)

    def _retry(self, state: StepState, error: StepError, policy: RetryPolicy) -> Decision:
        number = state.bump(COUNTER)
        key = retry_key(state.step)
        if error.category is ErrorCategory.RATE_LIMIT:
            delay = policy.rate_limit_delay(error.retry_after_s, number, key)
        else:
            delay = policy.delay(number, key)
        cap = state.capability
        state.ctx.telemetry.metrics.resilience_retries.labels(
            cap.tool, cap.name, error.category.value
        ).inc()
        attr.add_event(trace.get_current_span(), "resilience_retry", {
            attr.STEP_ID: state.step.id,
            attr.CAPABILITY: cap.key,
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
