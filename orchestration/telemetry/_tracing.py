"""OpenTelemetry tracing: attribute names, the dagwright tracer, span events.

The library never installs a global tracer provider: it uses the one the service passes
in, else whatever the service installed globally (a no-op until it does). Span and
attribute names follow the OpenTelemetry GenAI semantic conventions where they apply
(``invoke_agent``, ``chat {model}``, ``execute_tool {tool}``); dagwright's own attributes
are namespaced ``dagwright.*``.

The tracer handed to the engine (:class:`DagwrightTracer`) wraps the provider's tracer
for two reasons:

* every string that reaches a span through it — attributes, events, status
  descriptions, recorded exceptions — is redacted with the run's redactor, so a secret
  echoed by a tool or an LLM never lands in a trace backend;
* a span that carries a run or step id scopes the logging context to itself, so log
  records written while a step's span is current carry that step's id, even when many
  steps run concurrently.
"""

from __future__ import annotations

import traceback
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, Span, SpanContext, SpanKind, Status, StatusCode, Tracer
from opentelemetry.trace import TracerProvider as TracerProviderAPI
from opentelemetry.util.types import Attributes, AttributeValue

from orchestration.logging_setup import current_redactor, get_logger, log_context
from orchestration.redaction import Redactor

TRACER_NAME = "dagwright"

# --- attribute names: GenAI semantic conventions ---------------------------------------
GEN_AI_OPERATION = "gen_ai.operation.name"  # invoke_agent | chat | execute_tool
GEN_AI_PROVIDER = "gen_ai.provider.name"  # current name of the provider attribute
GEN_AI_SYSTEM = "gen_ai.system"  # its older name, still read by many backends
GEN_AI_AGENT_NAME = "gen_ai.agent.name"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_REQUEST_TEMPERATURE = "gen_ai.request.temperature"
GEN_AI_REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
GEN_AI_OUTPUT_TYPE = "gen_ai.output.type"  # json | text
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
GEN_AI_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID = "gen_ai.tool.call.id"
GEN_AI_TOOL_TYPE = "gen_ai.tool.type"  # extension (HTTP service) | function (Python)
ERROR_TYPE = "error.type"

# --- dagwright's own -------------------------------------------------------------------
RUN_ID = "dagwright.run.id"
RUN_STATUS = "dagwright.run.status"
STEP_ID = "dagwright.step.id"
STEP_STATUS = "dagwright.step.status"
TOOL = "dagwright.tool"
CAPABILITY = "dagwright.capability"
LAYER = "dagwright.layer"
ATTEMPT = "dagwright.attempt"
PURPOSE = "dagwright.llm.purpose"

_events_log = get_logger("dagwright.events")
# layer events an operator wants in the logs at INFO; the rest (e.g. every coercion) at DEBUG
_INFO_EVENTS = frozenset({
    "validation_feedback_started", "validation_feedback_success", "validation_feedback_failed",
    "contextual_re_resolution.start", "contextual_re_resolution.complete",
    "transient_override", "resilience_retry", "plan_attempt", "plan_rejected",
})


def get_tracer(provider: TracerProviderAPI | None = None) -> DagwrightTracer:
    """The dagwright tracer over ``provider``, or over the globally installed provider."""
    inner = provider.get_tracer(TRACER_NAME) if provider is not None else trace.get_tracer(TRACER_NAME)
    return DagwrightTracer(inner)


def clean_attributes(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """Drop None values and turn anything that is not an OTel primitive into text."""
    out: dict[str, Any] = {}
    for key, value in attrs.items():
        if value is None:
            continue
        if isinstance(value, bool | int | float | str):
            out[key] = value
        elif isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
            out[key] = list(value)
        else:
            out[key] = str(value)
    return out


def redact_attributes(attrs: Attributes, redactor: Redactor | None = None) -> dict[str, Any] | None:
    """String attribute values (and string sequences) with secrets masked."""
    if attrs is None:
        return None
    red = redactor or current_redactor()
    out: dict[str, Any] = {}
    for key, value in attrs.items():
        if isinstance(value, str):
            out[key] = red.redact(value)
        elif isinstance(value, list | tuple) and any(isinstance(v, str) for v in value):
            out[key] = [red.redact(v) if isinstance(v, str) else v for v in value]
        else:
            out[key] = value
    return out


def add_event(span: Span, name: str, attrs: dict[str, Any]) -> None:
    """Add a span event (attributes cleaned and redacted) and log it as ``dagwright.events``.

    Layers use this for their decisions (``validation_feedback_success``,
    ``transient_override``...), so the same decision is in the trace and in the logs.
    """
    cleaned = redact_attributes(clean_attributes(attrs)) or {}
    span.add_event(name, cleaned)
    level = 20 if name in _INFO_EVENTS else 10  # logging.INFO / logging.DEBUG
    if _events_log.isEnabledFor(level):
        details = " ".join(f"{k}={v}" for k, v in cleaned.items()
                           if k not in (RUN_ID, STEP_ID))
        _events_log.log(level, "%s %s", name, details, extra={"event": name,
                                                              "attributes": cleaned})


class RedactingSpan(Span):
    """A span whose every string input is redacted before it reaches the real span."""

    def __init__(self, span: Span) -> None:
        self._span = span

    @property
    def wrapped(self) -> Span:
        """The provider's span (e.g. an SDK span whose recorded data tests can read)."""
        return self._span

    def get_span_context(self) -> SpanContext:
        return self._span.get_span_context()

    def is_recording(self) -> bool:
        return self._span.is_recording()

    def end(self, end_time: int | None = None) -> None:
        self._span.end(end_time)

    def update_name(self, name: str) -> None:
        self._span.update_name(current_redactor().redact(name))

    def set_attributes(self, attributes: Mapping[str, AttributeValue]) -> None:
        if self._span.is_recording():
            self._span.set_attributes(redact_attributes(attributes) or {})

    def set_attribute(self, key: str, value: AttributeValue) -> None:
        if self._span.is_recording():
            self._span.set_attributes(redact_attributes({key: value}) or {})

    def add_event(
        self, name: str, attributes: Attributes = None, timestamp: int | None = None
    ) -> None:
        if self._span.is_recording():
            self._span.add_event(name, redact_attributes(attributes), timestamp)

    def add_link(self, context: SpanContext, attributes: Attributes = None) -> None:
        self._span.add_link(context, redact_attributes(attributes))

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        if not self._span.is_recording():
            return
        red = current_redactor()
        if isinstance(status, Status):
            if status.description:
                status = Status(status.status_code, red.redact(status.description))
            self._span.set_status(status)
        else:
            self._span.set_status(status, red.redact(description) if description else None)

    def record_exception(
        self,
        exception: BaseException,
        attributes: Attributes = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        if not self._span.is_recording():
            return
        red = current_redactor()
        safe = {
            "exception.message": red.redact(str(exception)),
            "exception.stacktrace": red.redact(
                "".join(traceback.format_exception(type(exception), exception,
                                                   exception.__traceback__))),
            **(redact_attributes(attributes, red) or {}),
        }
        self._span.record_exception(exception, safe, timestamp, escaped)

    def __repr__(self) -> str:
        return f"RedactingSpan({self._span!r})"


class DagwrightTracer(Tracer):
    """Wraps a provider's tracer: redacted spans, logging context scoped to spans."""

    def __init__(self, tracer: Tracer) -> None:
        self._tracer = tracer

    def start_span(
        self,
        name: str,
        context: Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> Span:
        # Start without attributes and redact only when the span records: with no SDK
        # provider (a no-op tracer) redaction would be pure overhead on every step.
        span = self._tracer.start_span(
            name, context, kind, None, links, start_time, record_exception,
            set_status_on_exception,
        )
        if not span.is_recording():
            return span
        redacted_name = current_redactor().redact(name)
        if redacted_name != name:
            span.update_name(redacted_name)
        if attributes:
            span.set_attributes(redact_attributes(attributes) or {})
        return RedactingSpan(span)

    @contextmanager
    def start_as_current_span(  # type: ignore[override]  # a plain contextmanager
        self,
        name: str,
        context: Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
        end_on_exit: bool = True,
    ) -> Iterator[Span]:
        span = self.start_span(name, context, kind, attributes, links, start_time,
                               record_exception, set_status_on_exception)
        run_id = _str_attr(attributes, RUN_ID)
        step_id = _str_attr(attributes, STEP_ID)
        with log_context(run_id=run_id, step_id=step_id), trace.use_span(
            span, end_on_exit=end_on_exit, record_exception=record_exception,
            set_status_on_exception=set_status_on_exception,
        ) as current:
            yield current


def _str_attr(attributes: Attributes, key: str) -> str | None:
    value = attributes.get(key) if attributes else None
    return value if isinstance(value, str) else None


def endpoint_attributes(capability: Any) -> dict[str, Any]:
    """HTTP client attributes of a capability's endpoint: method, host and port only.

    Never the full URL: a catalog URL may carry credentials or query parameters.
    """
    url = getattr(capability, "url", None)
    if not url:
        return {}
    parts = urlsplit(url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:  # a malformed port; the call itself will say so
        port = 0
    return {"http.request.method": capability.method, "server.address": parts.hostname or "",
            "server.port": port}
