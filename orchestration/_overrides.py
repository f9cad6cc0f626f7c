"""Partial overrides of a settings model, checked where they are written.

The catalog and plans may override the retry policy and the layer settings per tool,
capability or step. A misspelt key or a wrong type must be reported at load time, naming
where it was written, instead of being ignored until the layer it was meant for runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from orchestration._text import closest, describe_validation_error
from orchestration.errors import ConfigError

Settings = TypeVar("Settings", bound=BaseModel)


def apply_overrides(
    base: Settings, overrides: Mapping[str, Any], *, source: str, what: str
) -> Settings:
    """``base`` with ``overrides`` laid over it and validated as a whole.

    Raises :class:`ConfigError` naming ``source`` (e.g. "tool 'pay' capability 'send'"),
    the unknown key (with the closest known one) or the field and its problem.
    """
    fields = type(base).model_fields
    unknown = sorted(str(k) for k in overrides if k not in fields)
    if unknown:
        hints = []
        for key in unknown:
            near = closest(key, fields)
            hints.append(f"{key!r}" + (f" (did you mean {near!r}?)" if near else ""))
        raise ConfigError(
            f"{source}: unknown {what} setting(s) {', '.join(hints)}; "
            f"allowed: {', '.join(fields)}"
        )
    try:
        return type(base).model_validate({**base.model_dump(), **dict(overrides)})
    except ValidationError as exc:
        raise ConfigError(
            f"{source}: invalid {what} setting: {describe_validation_error(exc)}"
        ) from exc
