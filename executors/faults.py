"""What a failed attempt means: the one classification every recovery layer reads.

A :class:`~orchestration.protocol.StepError` says what failed (``category``, ``code``)
and where it came from (``source``: binding, validation, transport, an HTTP status
without our envelope, the tool's own structured error, a Python tool that raised, ...).
The questions the layers ask of it are answered here, once, from those fields — never
by matching codes such as ``"HTTP_..."``:

==================================  =============================================  ======
question                            answered by                                    asked by
==================================  =============================================  ======
may the tool have acted on it?      :func:`may_have_acted`                         the re-send guard
is it a transport fault?            :func:`is_transport_fault`                     resilience
a structured 503 layer 4 can read?  :func:`is_structured_service_error`            resilience, layer 4
can a new value fix it (layer 3)?   :func:`correction_trigger`                     layer 3
can the trajectory fix it (4)?      :func:`semantic_trigger`                       layer 4
==================================  =============================================  ======

Whether sending a call *again* is unsafe is the re-send guard's question
(:mod:`executors._resend`), which asks :func:`may_have_acted` of each earlier attempt.
"""

from __future__ import annotations

from collections.abc import Sequence

from orchestration.protocol import ErrorCategory, ErrorSource, StepError

__all__ = [
    "AMBIGUOUS_CATEGORIES",
    "correction_trigger",
    "is_structured",
    "is_structured_service_error",
    "is_transport_fault",
    "may_have_acted",
    "semantic_trigger",
]

AMBIGUOUS_CATEGORIES = frozenset({ErrorCategory.TIMEOUT, ErrorCategory.CONNECTION_ERROR,
                                  ErrorCategory.SERVICE_ERROR, ErrorCategory.CANCELLED})
"""Failures after which the tool may have acted on a request it did not answer."""

_UNSTRUCTURED_INPUT_STATUSES = (400, 422)  # plain HTTP statuses that mean "your input is wrong"
_SEMANTIC_INPUT_STATUSES = frozenset({400, 404, 409, 422})
_SEMANTIC_INPUT_CATEGORIES = frozenset(
    {ErrorCategory.INPUT_ERROR, ErrorCategory.NOT_FOUND, ErrorCategory.VALIDATION_ERROR})
_NEVER_SEMANTIC = frozenset({ErrorCategory.AUTH_ERROR, ErrorCategory.RATE_LIMIT})


def is_structured(error: StepError) -> bool:
    """The tool's own structured error (envelope or ``ToolFailed``): its category and
    ``retryable`` are the tool's word, not our guess from a status code."""
    return error.source is ErrorSource.ENVELOPE


def may_have_acted(error: StepError) -> bool:
    """The request was sent and the failure leaves open whether the tool acted on it."""
    return error.request_sent and error.category in AMBIGUOUS_CATEGORIES


def is_transport_fault(error: StepError) -> bool:
    """A fault of the way to the tool rather than of the parameters: a rate limit, a
    timeout, a dropped or refused connection, a service error."""
    return error.category is ErrorCategory.RATE_LIMIT or error.category in AMBIGUOUS_CATEGORIES


def is_structured_service_error(error: StepError) -> bool:
    """A service error the tool reported as a structured error with a 503 (or a Python
    tool's ``ToolFailed``): it may carry meaning layer 4 can read ("location not found"
    wrapped in a 503), which a bare ``HTTP 503`` does not."""
    return (error.category is ErrorCategory.SERVICE_ERROR and is_structured(error)
            and error.http_status in (503, None))


def correction_trigger(error: StepError, patterns: Sequence[str]) -> str | None:
    """Why ``error`` is worth a layer-3 correction, or None when it is not.

    * pre-flight validation failed: always (the schema says exactly what is wrong), and
      likewise parameters that do not fit a Python tool's signature;
    * a structured tool error: category ``INPUT_ERROR`` or ``NOT_FOUND`` with
      ``retryable: true`` — the tool's own word is trusted both ways;
    * an unstructured answer (no envelope, a Python tool that raised): HTTP 400/422, or a
      message containing one of ``patterns`` (case-insensitive), e.g. "cannot unmarshal".
    """
    if error.source is ErrorSource.VALIDATION:
        return ("preflight_validation" if error.category is ErrorCategory.VALIDATION_ERROR
                else "tool_input_error")
    if error.source in (ErrorSource.HTTP_STATUS, ErrorSource.RAISED):
        if error.http_status in _UNSTRUCTURED_INPUT_STATUSES:
            return f"http_{error.http_status}"
        text = error.message.lower()
        for pattern in patterns:
            if pattern and pattern.lower() in text:
                return f"error_pattern:{pattern}"
        return None
    if is_structured(error) and error.retryable and error.category in (
            ErrorCategory.INPUT_ERROR, ErrorCategory.NOT_FOUND):
        return f"tool_{error.category.value.lower()}"
    return None


def semantic_trigger(error: StepError) -> str | None:
    """Which layer-4 trigger ``error`` is, or None when layer 4 does not handle it.

    Layer 4 reads the whole trajectory, so it acts on what the trajectory can fix: a
    reference that could not be bound, an input error layer 3 left alone (it runs after
    layer 3, so being asked means layer 3 declined, was exhausted or switched off), and a
    structured 503. Auth errors and rate limits never: no parameter fixes them.
    """
    if error.category in _NEVER_SEMANTIC:
        return None
    if error.source is ErrorSource.BINDING:
        return "unbound_reference"
    if is_structured_service_error(error):
        return "structured_503"
    if error.category in _SEMANTIC_INPUT_CATEGORIES or error.http_status in _SEMANTIC_INPUT_STATUSES:
        return "input_error"
    return None
