"""The prepare stage: coerce the bound parameters (layer 2), then validate them.

What leaves this stage is either parameters the capability's schema accepts, with every
change layer 2 made, or the validation error that says exactly what is still wrong —
nothing is sent in that case. Parameters must also be JSON a tool can receive (finite
numbers, valid text, at most ``ORCH_MAX_JSON_DEPTH`` deep): whoever wrote them — planner,
layer 3 or 4, a binding — a value JSON cannot carry is a validation error here, not an
exception in the HTTP client. A validation message never quotes the value of a field
whose name marks a secret (``password``, ``api_key``...): messages reach prompts and
telemetry, the caller's own parameters do not. Building a validator and a coercer costs far more than
using them, so both are made once per capability (:class:`CapabilityCache`) and reused
by every call of every run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from executors.coercion import Coercer
from orchestration import _schema
from orchestration._json import (
    DEFAULT_MAX_DEPTH,
    depth_problem,
    json_safe,
    nesting_exceeds,
    unencodable,
)
from orchestration.capability import Capability
from orchestration.config import OrchestratorConfig
from orchestration.layer_settings import LayerSettings
from orchestration.protocol import ErrorCategory, ErrorSource, StepError
from orchestration.redaction import MASK, SENSITIVE_NAME
from orchestration.result import CoercionRecord
from orchestration.retry_policy import RetryPolicy


@dataclass(frozen=True, slots=True)
class ValidationIssue:
    """One schema violation: the JSON path of the bad value and what is wrong."""

    path: str
    message: str
    validator: str

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "message": self.message, "validator": self.validator}


@dataclass(frozen=True, slots=True)
class PreparedCall:
    """The outcome of the prepare stage: ``params`` to send (``error`` is None), or the
    validation ``error`` that stops the attempt; ``coercions`` either way."""

    params: dict[str, Any]
    coercions: list[CoercionRecord]
    error: StepError | None = None
    issues: tuple[ValidationIssue, ...] = ()


class PreparedSchema:
    """A JSON Schema with its coercer and validator built: what the prepare stage checks
    values against (a capability's input schema; a workflow's inputs)."""

    def __init__(self, schema: dict[str, Any]) -> None:
        self.validator = _schema.validator(schema)
        # the coercer's "already valid" must mean what validation means, formats included
        checker = _schema.format_checker(schema)
        self.coercer = Coercer(schema, format_checker=checker)
        self._accept = _schema.accept_check(schema, checker)

    def validate(self, params: Any) -> list[ValidationIssue]:
        """Every violation of the input schema (not just the first), sorted by path."""
        if self._accept is not None and self._accept(params):
            return []
        issues = [
            ValidationIssue(_schema.json_path(err.absolute_path),
                            _unquoted_if_secret(err.message, err.absolute_path, err.instance),
                            str(err.validator))
            for err in self.validator.iter_errors(params)
        ]
        return sorted(issues, key=lambda i: (i.path, i.message))

    def prepare(
        self, params: dict[str, Any], *, coerce: bool, max_depth: int = DEFAULT_MAX_DEPTH
    ) -> PreparedCall:
        """Check that ``params`` are JSON a tool can receive, coerce them (when layer 2 is
        on for this capability), then validate them against the schema.

        The JSON check comes first: the coercer and the validator then never meet a
        value nested deep enough to exhaust the stack, and no schema message quotes a
        value no sink can encode. Refused parameters are recorded JSON-safe.
        """
        problem = unencodable(params, max_depth)
        if problem is not None:
            return self._not_json(params, [], problem, max_depth)
        coercions: list[CoercionRecord] = []
        known_valid = False
        if coerce:
            coerced = self.coercer.coerce(params)
            known_valid = coerced.known_valid  # same validator: no need to check twice
            if coerced.changes:
                params = coerced.value
                coercions = [CoercionRecord(path=c.path, old=c.old, new=c.new, rule=c.rule)
                             for c in coerced.changes]
                if nesting_exceeds(params, max_depth):  # a JSON string decoded into depth
                    problem = unencodable(params, max_depth) or ("$", depth_problem(max_depth))
                    return self._not_json(params, coercions, problem, max_depth)
        issues = () if known_valid else tuple(self.validate(params))
        if not issues:
            return PreparedCall(params, coercions)
        return self._invalid(params, coercions, issues)

    def _not_json(
        self, params: dict[str, Any], coercions: list[CoercionRecord],
        problem: tuple[str, str], max_depth: int,
    ) -> PreparedCall:
        issue = ValidationIssue(problem[0], problem[1], "json")
        return self._invalid(json_safe(params, max_depth), coercions, (issue,))

    @staticmethod
    def _invalid(
        params: dict[str, Any], coercions: list[CoercionRecord],
        issues: tuple[ValidationIssue, ...],
    ) -> PreparedCall:
        error = StepError(
            category=ErrorCategory.VALIDATION_ERROR,
            code="INVALID_PARAMETERS",
            message="; ".join(f"{i.path}: {i.message}" for i in issues[:10]),
            source=ErrorSource.VALIDATION,
            retryable=True,
            request_sent=False,
            details={"errors": [i.to_dict() for i in issues]},
        )
        return PreparedCall(params, coercions, error, issues)


class PreparedCapability(PreparedSchema):
    """A capability with its coercer and validator built, and the layer settings and
    retry policy its calls run with (the global ones with the capability's overrides,
    worked out once rather than on every step)."""

    def __init__(self, capability: Capability) -> None:
        super().__init__(capability.input_schema)
        self.capability = capability
        self._settings: tuple[LayerSettings, LayerSettings] | None = None
        self._policy: tuple[OrchestratorConfig, RetryPolicy] | None = None

    def layer_settings(self, layers: LayerSettings) -> LayerSettings:
        """``layers`` with the capability's ``layers:`` overrides (validated when the
        catalog loaded, so this cannot fail for a capability of a loaded catalog)."""
        cached = self._settings
        if cached is None or cached[0] is not layers:
            cap = self.capability
            merged = layers.with_overrides(cap.layers, source=f"capability {cap.key!r} layers")
            self._settings = cached = (layers, merged)
        return cached[1]

    def retry_policy(self, config: OrchestratorConfig) -> RetryPolicy:
        """The global retry policy of ``config`` with the capability's ``retry:``
        overrides (a step's own overrides go on top of this)."""
        cached = self._policy
        if cached is None or cached[0] is not config:
            cap = self.capability
            policy = RetryPolicy.for_call(
                config, (cap.retry, f"capability {cap.key!r} retry overrides"))
            self._policy = cached = (config, policy)
        return cached[1]


def _unquoted_if_secret(message: str, path: Any, instance: Any) -> str:
    """``message`` with the offending value masked when a field on its path has a
    secret's name (``'hunter2...' is too long`` quotes the password itself)."""
    if not any(isinstance(part, str) and SENSITIVE_NAME.search(part) for part in path):
        return message
    for form in (repr(instance), str(instance)):
        if form and form in message:
            message = message.replace(form, repr(MASK) if form.startswith(("'", '"')) else MASK)
    return message


class CapabilityCache:
    """Prepared capabilities by key (and other schemas by their text); shared by every run
    of one orchestrator."""

    _MAX_SCHEMAS = 256

    def __init__(self) -> None:
        self._prepared: dict[str, PreparedCapability] = {}
        self._schemas: dict[str, PreparedSchema] = {}

    def for_schema(self, schema: dict[str, Any]) -> PreparedSchema:
        """``schema`` prepared (a workflow's inputs), made once per distinct schema."""
        key = json.dumps(schema, sort_keys=True, default=str)
        found = self._schemas.get(key)
        if found is None:
            if len(self._schemas) >= self._MAX_SCHEMAS:
                self._schemas.clear()
            found = self._schemas[key] = PreparedSchema(schema)
        return found

    def get(self, capability: Capability) -> PreparedCapability:
        prepared = self._prepared.get(capability.key)
        if prepared is None or prepared.capability is not capability:
            prepared = PreparedCapability(capability)
            self._prepared[capability.key] = prepared
        return prepared
