"""OpenTelemetry tracing: attribute names, the dagwright tracer, span events.

The library never installs a global tracer provider: it uses the one the service passes
in, else whatever the service installed globally (a no-op until it does). Span and
attribute names follow the OpenTelemetry GenAI semantic conventions (``invoke_agent``,
``plan``, ``chat {model}``, ``execute_tool {tool}``) and, for calls of HTTP tools, the
HTTP client conventions; the names come from ``opentelemetry-semantic-conventions``.
dagwright's own attributes are namespaced ``dagwright.*``.

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
from contextvars import ContextVar
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from opentelemetry import context as context_api
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv._incubating.attributes import http_attributes as http_incubating
from opentelemetry.semconv._incubating.attributes import url_attributes as url_incubating
from opentelemetry.semconv.attributes import (
    error_attributes,
    http_attributes,
    server_attributes,
    url_attributes,
)
from opentelemetry.trace import Link, Span, SpanContext, SpanKind, Status, StatusCode, Tracer
from opentelemetry.trace import TracerProvider as TracerProviderAPI
from opentelemetry.util.types import Attributes, AttributeValue

from orchestration.logging_setup import LogScope, current_redactor, get_logger, log_context
from orchestration.redaction import Redactor

TRACER_NAME = "dagwright"

# --- attribute names: the OpenTelemetry semantic conventions ----------------------------
# Taken from opentelemetry-semantic-conventions, never typed by hand. The GenAI ones are
# still "incubating" (Development status) there; HTTP, server, URL and error are stable.
GEN_AI_OPERATION = gen_ai.GEN_AI_OPERATION_NAME  # invoke_agent | plan | chat | execute_tool
GEN_AI_PROVIDER = gen_ai.GEN_AI_PROVIDER_NAME
GEN_AI_AGENT_NAME = gen_ai.GEN_AI_AGENT_NAME
GEN_AI_AGENT_VERSION = gen_ai.GEN_AI_AGENT_VERSION
GEN_AI_REQUEST_MODEL = gen_ai.GEN_AI_REQUEST_MODEL
GEN_AI_REQUEST_TEMPERATURE = gen_ai.GEN_AI_REQUEST_TEMPERATURE
GEN_AI_REQUEST_MAX_TOKENS = gen_ai.GEN_AI_REQUEST_MAX_TOKENS
GEN_AI_OUTPUT_TYPE = gen_ai.GEN_AI_OUTPUT_TYPE  # json | text
GEN_AI_RESPONSE_ID = gen_ai.GEN_AI_RESPONSE_ID
GEN_AI_RESPONSE_MODEL = gen_ai.GEN_AI_RESPONSE_MODEL
GEN_AI_RESPONSE_FINISH_REASONS = gen_ai.GEN_AI_RESPONSE_FINISH_REASONS
GEN_AI_INPUT_TOKENS = gen_ai.GEN_AI_USAGE_INPUT_TOKENS
GEN_AI_OUTPUT_TOKENS = gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS
GEN_AI_TOKEN_TYPE = gen_ai.GEN_AI_TOKEN_TYPE  # input | output (metrics)
GEN_AI_TOOL_NAME = gen_ai.GEN_AI_TOOL_NAME
GEN_AI_TOOL_DESCRIPTION = gen_ai.GEN_AI_TOOL_DESCRIPTION
GEN_AI_TOOL_CALL_ID = gen_ai.GEN_AI_TOOL_CALL_ID
GEN_AI_TOOL_TYPE = gen_ai.GEN_AI_TOOL_TYPE  # extension (HTTP service) | function (Python)
ERROR_TYPE = error_attributes.ERROR_TYPE
SERVER_ADDRESS = server_attributes.SERVER_ADDRESS
SERVER_PORT = server_attributes.SERVER_PORT
HTTP_REQUEST_METHOD = http_attributes.HTTP_REQUEST_METHOD
HTTP_RESPONSE_STATUS_CODE = http_attributes.HTTP_RESPONSE_STATUS_CODE
HTTP_REQUEST_RESEND_COUNT = http_incubating.HTTP_REQUEST_RESEND_COUNT
URL_FULL = url_attributes.URL_FULL
URL_TEMPLATE = url_incubating.URL_TEMPLATE

# values of gen_ai.operation.name (the package's enum of them is deprecated and lags the
# conventions: "plan" is in the GenAI conventions but not in its enum yet)
OP_INVOKE_AGENT = "invoke_agent"
OP_PLAN = "plan"
OP_CHAT = "chat"
OP_EXECUTE_TOOL = "execute_tool"
AGENT_NAME = "dagwright"

# --- dagwright's own -------------------------------------------------------------------
RUN_ID = "dagwright.run.id"
RUN_STATUS = "dagwright.run.status"
STEP_ID = "dagwright.step.id"
STEP_STATUS = "dagwright.step.status"
PLAN_SOURCE = "dagwright.plan.source"
TOOL = "dagwright.tool"
CAPABILITY = "dagwright.capability"
LAYER = "dagwright.layer"
ATTEMPT = "dagwright.attempt"
PURPOSE = "dagwright.llm.purpose"
PLAN_PURPOSE = "dagwright.plan.purpose"  # plan | replan
LAYER_EVENT = "dagwright.layer.event"
OUTCOME = "dagwright.outcome"
BUDGET = "dagwright.budget"

_events_log = get_logger("dagwright.events")
# layer events an operator wants in the logs at INFO; the rest (e.g. every coercion) at DEBUG
_INFO_EVENTS = frozenset({
    "validation_feedback_started", "validation_feedback_success", "validation_feedback_failed",
    "contextual_re_resolution.start", "contextual_re_resolution.complete",
    "transient_override", "resilience_retry", "plan_attempt", "plan_rejected",
})


_RUN_ATTRIBUTES: ContextVar[Mapping[str, Any]] = ContextVar("dagwright_run_attributes",
                                                            default=MappingProxyType({}))
"""The attributes every span of the current run carries (its context, redacted): set
once for the run's task by ``Observer.run``, read by every span started under it."""


def run_attributes() -> Mapping[str, Any]:
    """The current run's attributes for a span (its context): empty outside a run."""
    return _RUN_ATTRIBUTES.get()


@contextmanager
def scoped_run_attributes(attributes: Mapping[str, Any]) -> Iterator[None]:
    """Every span started in this block (and in tasks it starts) carries ``attributes``."""
    token = _RUN_ATTRIBUTES.set(MappingProxyType(dict(attributes)))
    try:
        yield
    finally:
        _RUN_ATTRIBUTES.reset(token)


def get_tracer(provider: TracerProviderAPI | None = None) -> DagwrightTracer:
    """The dagwright tracer over ``provider``, or over the globally installed provider."""
    inner = provider.get_tracer(TRACER_NAME) if provider is not None else trace.get_tracer(TRACER_NAME)
    return DagwrightTracer(inner)


def context_attributes(context: Mapping[str, Any] | None) -> dict[str, Any]:
    """A run's context as span attributes: ``dagwright.context.<key>``."""
    if not context:
        return {}
    return {f"dagwright.context.{key}": value for key, value in context.items()}


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

    @property
    def inner(self) -> Tracer:
        """The provider's tracer this one wraps (for callers that redact themselves)."""
        return self._tracer

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
        own = _RUN_ATTRIBUTES.get()
        if own:
            span.set_attributes(own)  # the run's context, redacted once for the run
        if attributes:
            span.set_attributes(redact_attributes(attributes) or {})
        return RedactingSpan(span)

    def start_as_current_span(  # type: ignore[override]  # a plain context manager
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
    ) -> SpanScope:
        span = self.start_span(name, context, kind, attributes, links, start_time,
                               record_exception, set_status_on_exception)
        return SpanScope(span, log_context(run_id=_str_attr(attributes, RUN_ID),
                                           step_id=_str_attr(attributes, STEP_ID)),
                         end_on_exit, record_exception, set_status_on_exception)


class SpanScope:
    """A span current (and its ids in the logging context) for a ``with`` block: what
    ``trace.use_span`` inside ``log_context`` does, as one object.

    The run's, the plan's and each LLM call's span are current for as long as they last
    (hundreds of milliseconds of waiting on a model), so with thousands of runs in
    flight the generators and context managers of the general form are thousands of
    objects more for the garbage collector to walk, again and again."""

    __slots__ = ("_end", "_log", "_record", "_span", "_status", "_token")

    def __init__(self, span: Span, log: LogScope, end_on_exit: bool, record_exception: bool,
                 set_status_on_exception: bool) -> None:
        self._span = span
        self._log = log
        self._end = end_on_exit
        self._record = record_exception
        self._status = set_status_on_exception
        self._token: object = None

    def __enter__(self) -> Span:
        self._log.__enter__()
        self._token = context_api.attach(trace.set_span_in_context(self._span))
        return self._span

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: object) -> None:
        span = self._span
        try:
            context_api.detach(self._token)  # type: ignore[arg-type]
            # as trace.use_span: only errors (Exception) are recorded, not a cancellation
            if isinstance(exc, Exception) and isinstance(span, Span) and span.is_recording():
                if self._record:
                    span.record_exception(exc)
                if self._status:
                    span.set_status(Status(status_code=StatusCode.ERROR,
                                           description=f"{type(exc).__name__}: {exc}"))
        finally:
            if self._end:
                span.end()
            self._log.__exit__(kind, exc, tb)


def _str_attr(attributes: Attributes, key: str) -> str | None:
    value = attributes.get(key) if attributes else None
    return value if isinstance(value, str) else None


def endpoint_attributes(capability: Any) -> dict[str, Any]:
    """HTTP client attributes of a capability's endpoint, as the HTTP conventions name them.

    ``url.full`` is the catalog's URL with any credentials in it replaced by ``REDACTED``
    (as the conventions require) and without the query string a GET builds from the
    step's parameters (parameter values never go into spans); ``url.template`` is its
    path, a low-cardinality name of the endpoint.
    """
    url = getattr(capability, "url", None)
    if not url:
        return {}
    parts = urlsplit(url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:  # a malformed port; the call itself will say so
        port = 0
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "REDACTED:REDACTED@" + netloc.rsplit("@", 1)[1]
    query = "&".join(f"{k}=REDACTED" if v else k for k, _, v in
                     (pair.partition("=") for pair in parts.query.split("&") if pair))
    full = urlunsplit((parts.scheme, netloc, parts.path, query, ""))
    return {HTTP_REQUEST_METHOD: capability.method, SERVER_ADDRESS: parts.hostname or "",
            SERVER_PORT: port, URL_FULL: full, URL_TEMPLATE: parts.path or "/"}


def server_attributes_of(base_url: str | None) -> dict[str, Any]:
    """``server.address`` / ``server.port`` of an LLM endpoint (none for in-process LLMs)."""
    if not base_url:
        return {}
    parts = urlsplit(base_url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return {}
    return {SERVER_ADDRESS: parts.hostname or "", SERVER_PORT: port} if parts.hostname else {}
