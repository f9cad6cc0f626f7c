"""The settings the defense layers read, one model for defaults and per-capability overrides.

The global values come from :class:`~orchestration.config.OrchestratorConfig`
(``ORCH_TYPE_COERCION_ENABLED``, ``ORCH_MAX_VALIDATION_RETRIES``, ...); a capability may
override any of them in the catalog::

    capabilities:
      - name: send
        layers: {validation_feedback_enabled: false, semantic_retry_max_attempts: 1}

The overrides are checked when the catalog loads (an unknown key or a wrong type is a
:class:`~orchestration.errors.CatalogError` naming the tool, capability and key), and the
layers read the merged :class:`LayerSettings` as typed attributes, never by string name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from orchestration._overrides import apply_overrides

if TYPE_CHECKING:
    from orchestration.config import OrchestratorConfig

__all__ = ["DEFAULT_VALIDATION_ERROR_PATTERNS", "LayerSettings"]

DEFAULT_VALIDATION_ERROR_PATTERNS: tuple[str, ...] = (
    "cannot unmarshal",
    "type mismatch",
    "is not of type",
    "must be greater than",
    "must be less than",
    "must be positive",
    "must be a number",
    "is required",
    "cannot be empty",
    "invalid value",
    "is not one of",
)


class LayerSettings(BaseModel):
    """On/off switches and budgets of layers 2-4 for one capability.

    Strict types: ``"false"`` is not a boolean here, so a quoted YAML value is reported
    instead of silently meaning ``True``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    type_coercion_enabled: bool = True
    validation_feedback_enabled: bool = True
    max_validation_retries: int = Field(2, ge=0)
    validation_error_patterns: list[str] = Field(
        default_factory=lambda: list(DEFAULT_VALIDATION_ERROR_PATTERNS))
    semantic_retry_enabled: bool = True
    semantic_retry_max_attempts: int = Field(2, ge=0)
    semantic_retry_independent_steps: bool = True
    grounded_corrections: bool = True

    @classmethod
    def from_config(cls, config: OrchestratorConfig) -> LayerSettings:
        """The global settings: each field is read from the config field of the same name."""
        return cls.model_validate({name: getattr(config, name) for name in cls.model_fields})

    def with_overrides(self, overrides: Mapping[str, Any], *, source: str) -> LayerSettings:
        """These settings with a capability's ``layers:`` overrides applied; raises
        :class:`~orchestration.errors.ConfigError` naming ``source`` and the key."""
        if not overrides:
            return self
        return apply_overrides(self, overrides, source=source, what="layer")


def check_layer_overrides(overrides: Mapping[str, Any], *, source: str) -> None:
    """Raise :class:`~orchestration.errors.ConfigError` if ``overrides`` is not a valid
    partial :class:`LayerSettings` (the catalog calls this when it loads)."""
    LayerSettings().with_overrides(overrides, source=source)
