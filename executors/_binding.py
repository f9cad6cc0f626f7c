"""The bind stage: replace ``{{step.path}}`` in parameters with upstream outputs.

A whole-value reference keeps the JSON type of what it points at (a number stays a
number); a reference inside a longer string is interpolated (non-strings as JSON). The
resolution itself is :mod:`orchestration._resolve` (workflows bind their inputs with it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from orchestration._resolve import BindingFailure, bind_params, resolve_reference
from orchestration.plan import ParsedText
from orchestration.protocol import ErrorCategory, ErrorSource, StepError

__all__ = ["BindingFailure", "bind", "bind_params", "resolve_reference"]


def bind(params: dict[str, Any], outputs: Mapping[str, Any],
         parsed: Mapping[str, ParsedText] | None = None) -> dict[str, Any] | StepError:
    """The bind stage: ``params`` with references resolved, or the binding error (nothing
    is sent; layer 4 may re-resolve the value from the trajectory)."""
    try:
        return bind_params(params, outputs, parsed)
    except BindingFailure as failure:
        return StepError(
            category=ErrorCategory.BINDING_ERROR,
            code="UNRESOLVED_REFERENCE",
            message=str(failure),
            source=ErrorSource.BINDING,
            retryable=True,
            request_sent=False,
            details={"param": failure.param_path, "reference": failure.reference.text,
                     "reason": failure.reason},
        )
