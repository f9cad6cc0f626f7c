"""The re-send guard: what counts as *the same call*, and when sending it again is unsafe.

A non-idempotent call (a payment, an order) that may have been processed must not be
sent again — not by resilience, not with parameters layer 3 or 4 rewrote into the same
call, not by a repair plan, not when a stored run is resumed. Two questions decide it,
and both are answered only here:

* **the same call?** Two calls are the same when they go to the same capability with
  the same parameters *after binding and layer-2 coercion*: ``{"amount": "100"}`` and
  ``{"amount": 100}`` reach the tool as the same request, so they are the same call.
  :func:`call_fingerprint` is that identity (canonical JSON; ``100`` and ``100.0`` are
  one number), and the idempotency key is derived from it (:func:`idempotency_key`).
* **may an earlier attempt have been processed?** An attempt that succeeded, failed
  ambiguously after it was sent (timeout, dropped connection, 5xx —
  :func:`executors.faults.may_have_acted`), or was cancelled after its request went out.

:func:`resend_blocked` combines them: it blocks a call to a non-idempotent capability
without an idempotency-key header when an attempt of the same call may have been
processed. A *different* call is a new request and is not this guard's business.

Users: the step runner checks every prepared call before sending it (whichever layer
produced it); the replanner checks repair steps through :class:`CallInspector`, which
the facade hands to planners in ``RunServices.calls`` (planners do not import the
executor); a resumed run passes its stored attempts as ``history``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from executors._binding import BindingFailure, bind_params
from executors._prepare import CapabilityCache
from executors.faults import may_have_acted
from orchestration.catalog import Capability
from orchestration.layer_settings import LayerSettings
from orchestration.result import Attempt

__all__ = ["NOT_RESENT", "CallInspector", "call_fingerprint", "idempotency_key",
           "may_have_been_processed", "resend_blocked"]

NOT_RESENT = "not re-sent: non-idempotent capability and the request may have been processed"

_MAX_EXACT_FLOAT = 2.0 ** 53


def _canonical(value: Any) -> Any:
    """``value`` with integral floats as ints, so ``100.0`` and ``100`` are one number."""
    if isinstance(value, float) and value.is_integer() and abs(value) < _MAX_EXACT_FLOAT:
        return int(value)
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_canonical(v) for v in value]
    return value


def call_fingerprint(capability_key: str, params: Mapping[str, Any]) -> str:
    """The identity of a call: the capability and its (bound, coerced) parameters as
    canonical JSON. Equal fingerprints mean the tool receives the same request."""
    body = json.dumps(_canonical(dict(params)), sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False, default=str)
    return f"{capability_key}\x00{body}"


def idempotency_key(run_id: str, capability_key: str, params: Mapping[str, Any]) -> str:
    """The idempotency key of a call: a pure function of the run id, the capability key
    and the coerced parameters — never of the step id or the attempt.

    So every send of the same call in a run carries the same key: a resilience retry, a
    repair step that makes the same call as the step it replaces, and the same call sent
    again when the run is resumed (with the same run id) in another process.
    """
    material = f"{run_id}\x00{call_fingerprint(capability_key, params)}"
    return hashlib.sha256(material.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def may_have_been_processed(attempt: Attempt) -> bool:
    """Whether the tool may have acted on ``attempt``'s request: it succeeded, it failed
    ambiguously after being sent, or it was cancelled after its request went out."""
    if attempt.outcome == "succeeded":
        return True
    error = attempt.error
    if error is None:
        return False
    if attempt.outcome == "cancelled":
        return error.request_sent
    return attempt.outcome == "failed" and may_have_acted(error)


def resend_blocked(
    capability: Capability, params: Mapping[str, Any], history: Iterable[Attempt]
) -> str | None:
    """Why sending ``params`` (bound and coerced) to ``capability`` is unsafe given the
    attempts in ``history``, or None when it is safe.

    Unsafe means: the capability is not idempotent, declares no idempotency-key header,
    and an attempt of the same call (same fingerprint) may have been processed.
    ``history`` holds attempts of this capability's calls — a step's own attempts, a
    run's attempts across steps and rounds, or a stored run's attempts on resume.
    """
    if capability.is_idempotent or capability.idempotency_key_header:
        return None
    wanted = call_fingerprint(capability.key, params)
    for attempt in history:
        if may_have_been_processed(attempt) and \
                call_fingerprint(capability.key, attempt.params) == wanted:
            return NOT_RESENT + f" (attempt {attempt.number}, {attempt.outcome})"
    return None


class CallInspector:
    """Answers "the same call?" and "blocked?" for code that cannot import the executor.

    The facade puts one in ``RunServices.calls``; it satisfies
    :class:`orchestration.services.CallInspector`. Parameters are bound to the run's
    outputs and coerced exactly as the step runner would before comparing.
    """

    def __init__(self, capabilities: CapabilityCache, layers: LayerSettings) -> None:
        self._capabilities = capabilities
        self._layers = layers

    def prepared(
        self, capability: Capability, params: Mapping[str, Any], outputs: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        """``params`` bound and coerced as the step runner would; None when a reference
        cannot be bound yet (then no call can be compared)."""
        try:
            bound = bind_params(dict(params), outputs)
        except BindingFailure:
            return None
        settings = self._layers.with_overrides(
            capability.layers, source=f"capability {capability.key!r} layers")
        return self._capabilities.get(capability).prepare(
            bound, coerce=settings.type_coercion_enabled).params

    def fingerprint(
        self, capability: Capability, params: Mapping[str, Any], outputs: Mapping[str, Any]
    ) -> str | None:
        prepared = self.prepared(capability, params, outputs)
        return None if prepared is None else call_fingerprint(capability.key, prepared)

    def resend_blocked(
        self, capability: Capability, params: Mapping[str, Any], outputs: Mapping[str, Any],
        history: Iterable[Attempt],
    ) -> str | None:
        prepared = self.prepared(capability, params, outputs)
        return None if prepared is None else resend_blocked(capability, prepared, history)
