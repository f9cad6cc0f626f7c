"""What crosses Temporal's wire between a run's workflow, its activities and its clients.

Everything is plain JSON (dicts, lists, strings, numbers): Temporal's default converter
stores it in the workflow history as it is, a history can be read without dagwright, and
no class has to be importable by both sides. Each value has one function that builds it
and one that reads it back, here, so the workflow side and the worker side cannot drift.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from pydantic import SecretStr

from orchestration._transport import CallResult
from orchestration.circuit import CircuitTransition
from orchestration.config import OrchestratorConfig
from orchestration.errors import LLMError, LLMErrorKind
from orchestration.llm.base import LLMRequest, LLMResponse, TokenUsage
from orchestration.protocol import StepError

__all__ = [
    "CALL_TOOL",
    "LLM_COMPLETE",
    "RECONCILE_CALL",
    "RECORD_RUN",
    "WORKFLOW",
    "call_result_from_payload",
    "call_result_to_payload",
    "config_from_payload",
    "config_to_payload",
    "llm_error_from_payload",
    "llm_error_to_payload",
    "llm_request_from_payload",
    "llm_request_to_payload",
    "llm_response_from_payload",
    "llm_response_to_payload",
]

WORKFLOW = "dagwright.run"
"""The workflow type of a run; its workflow id is the run id."""
CALL_TOOL = "dagwright.call_tool"
"""The activity that sends one attempt of a step to its tool."""
LLM_COMPLETE = "dagwright.llm_complete"
"""The activity that makes one LLM call (planning, layers 3 and 4, synthesis)."""
RECORD_RUN = "dagwright.record_run"
"""The activity that writes a settled run to the workers' run store."""
RECONCILE_CALL = "dagwright.reconcile_call"
"""The activity that reads what became of a side-effect call whose activity ended without
an answer, from the run store (:mod:`orchestration.temporal._call_ledger`)."""

_NOT_SENT = frozenset({"store_url"})
"""Settings that are not the run's to carry: the store URL may hold a password, and where
runs are recorded is the workers' business (secrets are left out by type)."""


# --- the run's configuration ------------------------------------------------------------
def config_to_payload(config: OrchestratorConfig) -> dict[str, Any]:
    """The client's settings as the run carries them in its history.

    A run is executed by whichever workers pick it up, and replayed on others; carrying
    its settings (rather than reading each worker's environment) makes every worker run
    it alike. Secrets and the store URL stay out of the history.
    """
    values = config.model_dump(mode="json")
    for name in type(config).model_fields:
        if name in _NOT_SENT or isinstance(getattr(config, name), SecretStr):
            values.pop(name, None)
    return values


def config_from_payload(values: dict[str, Any]) -> OrchestratorConfig:
    """The run's settings back, every field given (so no worker environment leaks in)."""
    return OrchestratorConfig(**{"llm_api_key": None, "store_url": "memory://", **values})


# --- tool calls ---------------------------------------------------------------------------
def call_result_to_payload(result: CallResult) -> dict[str, Any]:
    error = result.error.model_dump(mode="json") if result.error is not None else None
    payload = {"data": result.data, "error": error, "latency_s": result.latency_s}
    if result.circuit:  # the worker's breaker changed state with this call
        payload["circuit"] = [t.to_dict() for t in result.circuit]
    return payload


def call_result_from_payload(payload: dict[str, Any]) -> CallResult:
    error = payload.get("error")
    return CallResult(data=payload.get("data"),
                      error=StepError.model_validate(error) if error is not None else None,
                      latency_s=float(payload.get("latency_s") or 0.0),
                      circuit=tuple(CircuitTransition.from_dict(t)
                                    for t in payload.get("circuit") or ()))


# --- LLM calls ------------------------------------------------------------------------------
def llm_request_to_payload(request: LLMRequest) -> dict[str, Any]:
    return asdict(request)


def llm_request_from_payload(payload: dict[str, Any]) -> LLMRequest:
    return LLMRequest(**payload)


def llm_response_to_payload(response: LLMResponse) -> dict[str, Any]:
    return {"content": response.content, "finish_reason": response.finish_reason,
            "usage": asdict(response.usage), "model": response.model}


def llm_response_from_payload(payload: dict[str, Any]) -> LLMResponse:
    return LLMResponse(content=payload["content"], finish_reason=payload.get("finish_reason"),
                       usage=TokenUsage(**payload.get("usage") or {}), model=payload.get("model"))


def llm_error_to_payload(exc: LLMError) -> dict[str, Any]:
    return {"kind": exc.kind.value, "text": str(exc), "status": exc.status,
            "retry_after_s": exc.retry_after_s, "provider": exc.provider}


def llm_error_from_payload(payload: dict[str, Any]) -> LLMError:
    """The worker's :class:`LLMError` again, reading exactly as it did there (the planner
    and the run's warnings quote it)."""
    error = LLMError(LLMErrorKind(payload["kind"]), "", status=payload.get("status"),
                     retry_after_s=payload.get("retry_after_s"))
    error.provider = payload.get("provider")
    error.args = (payload["text"],)
    return error
