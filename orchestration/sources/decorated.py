"""``@catalog.tool("calc.add")``: a type-hinted Python function as a capability.

The function keeps working as a normal function; the catalog gets a wrapper that turns
the step's JSON parameters into the declared Python values (through the signature's
pydantic model) and the return value back into JSON. Parameters the model rejects are an
``INPUT_ERROR`` with ``retryable: true``, so layer 3 can correct them like any other
input error; everything else behaves as :meth:`Catalog.add_function` (``ToolFailed`` for
structured errors, timeouts for async functions, ``run_in_thread`` for blocking code).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from orchestration.context import ApprovalCondition
from orchestration.errors import CatalogError, ToolFailed
from orchestration.protocol import ErrorCategory
from orchestration.sources._schema_from_hints import (
    SignatureSchema,
    describe_validation_error,
    schema_from_signature,
)

if TYPE_CHECKING:
    from orchestration.catalog import Capability, Catalog

__all__ = ["DEFAULT_TOOL", "register_function", "split_name", "wrap"]

DEFAULT_TOOL = "python"


def split_name(name: str | None, fn: Callable[..., Any]) -> tuple[str, str]:
    """``"calc.add"`` → (``calc``, ``add``); no name → (``python``, the function's name)."""
    if name is None:
        return DEFAULT_TOOL, getattr(fn, "__name__", "tool")
    tool, dot, capability = name.partition(".")
    if not dot or not tool or not capability:
        raise CatalogError(f"tool name {name!r} must be 'tool.capability', e.g. 'calc.add'")
    return tool, capability


def _arguments(schema: SignatureSchema, params: dict[str, Any]) -> dict[str, Any]:
    try:
        return schema.arguments(params)
    except ValidationError as exc:
        raise ToolFailed("BAD_ARGUMENTS", describe_validation_error(exc),
                         ErrorCategory.INPUT_ERROR, retryable=True) from exc


def wrap(fn: Callable[..., Any], schema: SignatureSchema) -> Callable[..., Any]:
    """The callable the transport calls: JSON in, JSON out, same sync/async nature as ``fn``."""
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def call_async(**params: Any) -> Any:
            return schema.dump_output(await fn(**_arguments(schema, params)))

        return call_async

    @functools.wraps(fn)
    def call_sync(**params: Any) -> Any:
        return schema.dump_output(fn(**_arguments(schema, params)))

    return call_sync


def register_function(
    catalog: Catalog,
    fn: Callable[..., Any],
    *,
    name: str | None,
    description: str | None,
    idempotent: bool,
    timeout_s: float | None,
    run_in_thread: bool,
    examples: list[dict[str, Any]] | None,
    requires_approval: bool | ApprovalCondition = False,
) -> Capability:
    """Derive the schemas of ``fn`` and add it to ``catalog`` (the ``@catalog.tool`` body)."""
    if not callable(fn):
        raise CatalogError(f"@catalog.tool needs a function, got {type(fn).__name__}")
    tool, capability = split_name(name, fn)
    where = f"capability {tool}.{capability} ({getattr(fn, '__qualname__', fn)!s})"
    schema = schema_from_signature(fn, where)
    cap = catalog.add_function(
        wrap(fn, schema), tool=tool, capability=capability,
        input_schema=schema.input_schema, output_schema=schema.output_schema,
        description=description if description is not None else inspect.getdoc(fn) or "",
        idempotent=idempotent, timeout_s=timeout_s, run_in_thread=run_in_thread,
        examples=examples, requires_approval=requires_approval,
    )
    return cap
