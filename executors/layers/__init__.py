"""Defense layers applied when a step attempt fails, and the default recovery chain.

Order matters: the first handler that decides wins.

1. :class:`~executors.layers.resilience.ResilienceHandler` — auth errors stop at once;
   transport faults (connection, timeout, 429, plain 5xx) retry the same parameters
   with deterministic backoff, never re-sending a non-idempotent call after an
   ambiguous failure.
2. :class:`~executors.layers.validation_feedback.ValidationFeedback` (layer 3) — the LLM
   corrects parameters from the schema and the exact error.
3. :class:`~executors.layers.semantic_retry.SemanticRetry` (layer 4) — the LLM
   re-resolves parameters from the query and upstream outputs, or declares the error
   transient (overriding ``retryable: false``).
"""

from __future__ import annotations

from executors.layers.resilience import ResilienceHandler
from executors.layers.semantic_retry import SemanticRetry
from executors.layers.validation_feedback import ValidationFeedback
from executors.recovery import RecoveryHandler


def default_handlers() -> list[RecoveryHandler]:
    """The standard recovery chain, in the order handlers are consulted.

    Each handler reads its settings from the step it is asked about (the config's
    values with the capability's ``layers:`` overrides), so one chain serves every
    capability and every configuration.
    """
    return [ResilienceHandler(), ValidationFeedback(), SemanticRetry()]


__all__ = ["ResilienceHandler", "SemanticRetry", "ValidationFeedback", "default_handlers"]
