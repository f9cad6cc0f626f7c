"""Per-capability work done once: the schema coercer and the pre-flight validator.

Building a validator and resolving ``$ref``s costs far more than using them, so both are
prepared the first time a capability is called and reused for every later call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jsonschema
from jsonschema.validators import validator_for

from executors.coercion import Coercer
from orchestration.catalog import Capability


@dataclass(frozen=True)
class ValidationIssue:
    """One schema violation: the JSON path of the bad value and what is wrong."""

    path: str
    message: str
    validator: str

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "message": self.message, "validator": self.validator}


def _json_path(parts: Any) -> str:
    out = "$"
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


class PreparedCapability:
    """A capability with its coercer and validator built."""

    def __init__(self, capability: Capability) -> None:
        self.capability = capability
        schema = capability.input_schema
        cls = validator_for(schema, default=jsonschema.Draft202012Validator)
        self.validator = cls(schema, format_checker=cls.FORMAT_CHECKER)
        self.coercer = Coercer(schema, format_checker=cls.FORMAT_CHECKER)

    def validate(self, params: Any) -> list[ValidationIssue]:
        """Every violation of the input schema (not just the first), sorted by path."""
        issues = [
            ValidationIssue(_json_path(err.absolute_path), err.message, str(err.validator))
            for err in self.validator.iter_errors(params)
        ]
        return sorted(issues, key=lambda i: (i.path, i.message))


class CapabilityCache:
    """Prepared capabilities by key; shared by every run of one orchestrator."""

    def __init__(self) -> None:
        self._prepared: dict[str, PreparedCapability] = {}

    def get(self, capability: Capability) -> PreparedCapability:
        prepared = self._prepared.get(capability.key)
        if prepared is None or prepared.capability is not capability:
            prepared = PreparedCapability(capability)
            self._prepared[capability.key] = prepared
        return prepared
