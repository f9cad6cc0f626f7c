"""Resolving a ``{{step.path}}`` reference against the outputs it points into.

One implementation, shared by the executor's bind stage, the ground stage (layer 4's
claimed sources), and the workflows' ``{{inputs.name}}`` bindings and named outputs
(which resolve against the inputs and the run's outputs the same way, with the same
messages).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from orchestration.plan import REFERENCE_RE, ParsedText, Reference, path_index

__all__ = ["BindingFailure", "bind_params", "bind_value", "resolve_reference"]


class BindingFailure(Exception):
    """A reference could not be resolved: names the parameter path, reference and reason."""

    def __init__(self, param_path: str, reference: Reference, reason: str) -> None:
        self.param_path = param_path
        self.reference = reference
        self.reason = reason
        super().__init__(f"param {param_path}: cannot resolve {{{{{reference.dotted}}}}}: {reason}")


def resolve_reference(ref: Reference, outputs: Mapping[str, Any], param_path: str) -> Any:
    """The value ``ref`` points at in the outputs of succeeded steps."""
    if ref.step_id not in outputs:
        raise BindingFailure(param_path, ref, f"step {ref.step_id!r} has no output")
    value = outputs[ref.step_id]
    walked = ref.step_id
    for part in ref.path:
        if isinstance(part, int):
            if not isinstance(value, list) or part >= len(value):
                size = len(value) if isinstance(value, list) else None
                raise BindingFailure(
                    param_path, ref,
                    f"{walked} is not a list with index {part}"
                    + (f" (it has {size} items)" if size is not None else
                       f" (it is {type(value).__name__})"),
                )
            value = value[part]
            walked += f"[{part}]"
        else:
            index = path_index(part)
            if isinstance(value, list) and index is not None and index < len(value):
                value = value[index]
            elif isinstance(value, dict) and part in value:
                value = value[part]
            else:
                keys = sorted(value)[:20] if isinstance(value, dict) else None
                raise BindingFailure(
                    param_path, ref,
                    f"{walked} has no field {part!r}"
                    + (f" (fields: {', '.join(map(str, keys))})" if keys is not None else
                       f" (it is {type(value).__name__})"),
                )
            walked += f".{part}"
    return value


def bind_value(value: Any, outputs: Mapping[str, Any], path: str,
               parsed: Mapping[str, ParsedText], only: str | None = None) -> Any:
    """``value`` with its references resolved against ``outputs`` (a copy where anything
    changed); raises :class:`BindingFailure`. ``only``: resolve only the references to
    that name (``"inputs"``), leaving the others as they are written."""
    if isinstance(value, str):
        if "{{" not in value:
            return value
        found = parsed.get(value)
        if found is None:
            found = ParsedText(value)
        whole = found.whole
        if whole is not None:
            if only is not None and whole.step_id != only:
                return value
            return resolve_reference(whole, outputs, path)
        refs = found.by_text

        def text_of(match: Any) -> str:
            ref = refs[match.group(0)]
            if only is not None and ref.step_id != only:
                return str(match.group(0))
            resolved = resolve_reference(ref, outputs, path)
            return resolved if isinstance(resolved, str) else json.dumps(resolved)

        return REFERENCE_RE.sub(text_of, value)
    if isinstance(value, dict):
        return {k: bind_value(v, outputs, f"{path}.{k}", parsed, only) for k, v in value.items()}
    if isinstance(value, list):
        return [bind_value(v, outputs, f"{path}[{i}]", parsed, only) for i, v in enumerate(value)]
    return value


def bind_params(params: dict[str, Any], outputs: Mapping[str, Any],
                parsed: Mapping[str, ParsedText] | None = None) -> dict[str, Any]:
    """A copy of ``params`` with every reference resolved; raises :class:`BindingFailure`.

    ``parsed``: the plan's parameter strings already parsed (``ValidatedPlan.parsed``);
    other strings are parsed here."""
    bound = bind_value(params, outputs, "$", parsed if parsed is not None else {})
    assert isinstance(bound, dict)
    return bound
