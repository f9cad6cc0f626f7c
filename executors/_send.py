"""The send stage: call the capability once with prepared parameters.

The run's budgets are asked first: a call that a budget refuses (a capability's
``max_calls_per_run``, or a run already stopped by a budget) is not sent and comes back
as a ``BUDGET_EXCEEDED`` error from the engine.

It fixes what the call carries besides the parameters — the trace context, an
idempotency key when the capability declares a header for one — and how long it may
take: the step's own ``timeout_s`` (a workflow's), else the capability's (or
``tool_timeout_s``), cut to what remains of the step's deadline. A change of the tool's
circuit breaker the call caused becomes a ``circuit_changed`` run event. The transport
classifies whatever comes back into data or a :class:`~orchestration.protocol.StepError`;
nothing raises past this stage but cancellation, and a
:class:`~orchestration._transport.CallTrace` says how far a cancelled call got. A run's
per-run credentials for the capability's tool are handed to the transport here and to
nothing else (see :mod:`orchestration.credentials`).
"""

from __future__ import annotations

import asyncio
from typing import Any

from executors._resend import idempotency_key
from executors.recovery import StepState
from orchestration._transport import CallResult, CallTrace
from orchestration.credentials import MISSING
from orchestration.result import Layer

__all__ = ["idempotency_key", "send"]


def key_for(state: StepState, params: dict[str, Any]) -> str | None:
    """The idempotency key this call sends, if its capability declares a header for one."""
    if state.capability.function is None and state.capability.idempotency_key_header:
        return idempotency_key(state.run.run_id, state.capability.key, params)
    return None


async def send(
    state: StepState, params: dict[str, Any], *, layer: Layer, number: int, deadline: float,
    key: str | None = None,
    trace: CallTrace | None = None,
) -> CallResult:
    """One call of the step's capability with ``params`` (and the idempotency ``key``),
    observed as a ``tool_call``."""
    cap, services = state.capability, state.services
    credentials = services.credentials
    carried = credentials.for_capability(cap) if credentials else None
    if carried is MISSING:  # given to the run once, not to this execution: never fall
        assert credentials is not None  # back on the catalog's own credentials
        return CallResult(error=credentials.missing_error(cap))
    refused = services.budget.admit_tool_call(cap)
    if refused is not None:
        return CallResult(error=refused)
    remaining = deadline - asyncio.get_running_loop().time()
    limit = state.step.timeout_s or cap.timeout_s or services.config.tool_timeout_s
    timeout = min(limit, max(0.001, remaining))
    headers: dict[str, str] = {}
    assert state.observation is not None, "the step runner observes every step it runs"
    with state.observation.call(number, layer, headers) as call:
        if key is not None and cap.idempotency_key_header:
            headers[cap.idempotency_key_header] = key
        if trace is not None and trace.gate is not None and not getattr(
                services.transport, "gates_calls", False):
            # a transport that does not run the gate at its last moment: run it here
            refused = await trace.pass_gate()
            if refused is not None:
                result = CallResult(error=refused)
                call.answered(result)
                return result
        # the run's credentials go to the transport alone, after the call was observed
        # (``headers`` is what the observation saw): nothing that records ever holds them
        extra = {"credentials": carried} if isinstance(carried, dict) else {}
        result = await services.transport.call(cap, params, timeout_s=timeout, headers=headers,
                                               trace=trace, **extra)
        if extra:
            assert credentials is not None
            result = credentials.scrub(result)  # a tool that echoed one back
        # the catalog's credentials and the LLM key, echoed back: masked before anything
        # keeps the answer (its output, the run store, the answer prompt)
        result = result.with_echoes_masked(getattr(services.observer, "redactor", None))
        call.answered(result)
    for transition in result.circuit:  # this call opened, probed or closed the breaker
        services.events.emit("circuit_changed", step_id=state.step.id, tool=transition.tool,
                             state=transition.after, previous=transition.before,
                             failures=transition.failures, reason=transition.reason)
    return result
