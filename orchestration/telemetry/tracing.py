"""OpenTelemetry tracing helpers.

The library never installs a global tracer provider: it uses the one the service passes
in, else whatever the service installed globally (a no-op until it does). Span and
attribute names follow the GenAI semantic conventions where they apply.
"""

from __future__ import annotations

from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, Tracer, TracerProvider

TRACER_NAME = "dagwright"

# attribute names (GenAI semantic conventions + dagwright's own)
GEN_AI_OPERATION = "gen_ai.operation.name"
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID = "gen_ai.tool.call.id"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_SYSTEM = "gen_ai.system"
GEN_AI_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
RUN_ID = "dagwright.run.id"
STEP_ID = "dagwright.step.id"
CAPABILITY = "dagwright.capability"
LAYER = "dagwright.layer"
ATTEMPT = "dagwright.attempt"
PURPOSE = "dagwright.llm.purpose"


def get_tracer(provider: TracerProvider | None = None) -> Tracer:
    """A tracer from ``provider``, or from the globally installed provider."""
    if provider is not None:
        return provider.get_tracer(TRACER_NAME)
    return trace.get_tracer(TRACER_NAME)


def clean_attributes(attrs: dict[str, Any]) -> dict[str, Any]:
    """Drop None values and turn anything that is not an OTel primitive into text."""
    out: dict[str, Any] = {}
    for key, value in attrs.items():
        if value is None:
            continue
        if isinstance(value, bool | int | float | str):
            out[key] = value
        else:
            out[key] = str(value)
    return out


def add_event(span: Span, name: str, attrs: dict[str, Any]) -> None:
    """Add a span event with cleaned attributes."""
    span.add_event(name, clean_attributes(attrs))
