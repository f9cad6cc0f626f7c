"""The one place where a run becomes telemetry: spans, span events, metrics, log records.

Spans and OTel metrics follow the OpenTelemetry GenAI semantic conventions (the run is
an ``invoke_agent`` span, planning a ``plan`` span, LLM calls ``chat`` spans, steps
``execute_tool`` spans; ``gen_ai.client.token.usage`` and
``gen_ai.client.operation.duration``) and, for calls of HTTP tools, the HTTP client
conventions; Prometheus gets the ``orchestration_*`` metrics.

The engine's control flow (the step runner, the recovery layers, the planner, the LLM
gateway) does not touch tracers, metric objects or loggers. It tells the
:class:`Observer` what happened at the edges of its stages — a step started, parameters
were coerced, a call was sent and answered, a layer decided, a step finished — and the
observer decides how each fact is recorded. So the names of spans, attributes, events and
metrics live here and in :mod:`~orchestration.telemetry._tracing` /
:mod:`~orchestration.telemetry.metrics`, and changing how a fact is recorded never means
reading a layer's decision logic.

Layers report their decisions as named facts (``state.report("transient_override",
{...})``); :data:`LAYER_EVENT_METRICS` says which Prometheus metric each one also counts,
and every fact is counted in the OTel ``dagwright.layer.events`` under its layer
(:data:`FACT_LAYERS`).

Text the observer shortens is redacted *before* it is cut (:meth:`Observer.shown`): cut
first, a secret could lose the part a pattern or a known value needs to be recognised,
and its prefix would reach the span or the log.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer

from orchestration._text import clip
from orchestration._version import __version__
from orchestration.circuit import CIRCUIT_STATE_VALUES
from orchestration.errors import LLMError
from orchestration.logging_setup import enter_log_context, exit_log_context, get_logger, log_context
from orchestration.protocol import ErrorCategory
from orchestration.telemetry import _tracing as attr

if TYPE_CHECKING:
    from orchestration._transport import CallResult
    from orchestration.capability import Capability
    from orchestration.circuit import CircuitTransition
    from orchestration.llm.base import LLMRequest, LLMResponse
    from orchestration.plan import Step
    from orchestration.protocol import StepError
    from orchestration.redaction import Redactor
    from orchestration.result import BudgetExceeded, StepResult
    from orchestration.state import RunState
    from orchestration.telemetry import Telemetry
    from orchestration.telemetry.metrics import Metrics

__all__ = ["FACT_LAYERS", "LAYER_EVENT_METRICS", "NullCallObservation", "NullObserver", "NullStepObservation",
           "Observer", "PlanningObservation", "StepObservation"]

log = get_logger("dagwright.run")
circuit_log = get_logger("dagwright.circuit")
_EVENT_TEXT_LIMIT = 500


def _count(metric_name: str, *label_keys: str) -> Callable[[Metrics, Capability, Mapping[str, Any]], None]:
    """A metric update for a layer event: the capability's tool and name as the first
    labels, then the named event attributes."""

    def update(metrics: Metrics, cap: Capability, attrs: Mapping[str, Any]) -> None:
        metric = getattr(metrics, metric_name)
        labels = [str(attrs.get(k, "")) for k in label_keys]
        metrics.child(metric, cap.tool, cap.name, *labels).inc()

    return update


def _independent_step(metrics: Metrics, cap: Capability, attrs: Mapping[str, Any]) -> None:
    metrics.child(metrics.semantic_retry_attempts, cap.tool, cap.name).inc()
    if attrs.get("independent_step"):
        metrics.child(metrics.semantic_retry_independent_step, cap.name).inc()


LAYER_EVENT_METRICS: dict[str, Callable[[Metrics, Capability, Mapping[str, Any]], None]] = {
    "type_coercion_applied": _count("type_coercion_applied"),
    "validation_feedback_started": _count("validation_feedback_attempts"),
    "validation_feedback_success": _count("validation_feedback_success"),
    "validation_feedback_failed": _count("validation_feedback_failed"),
    "contextual_re_resolution.start": _independent_step,
    "semantic_retry_success": _count("semantic_retry_success"),
    "transient_override": _count("transient_overrides"),
    "resilience_retry": _count("resilience_retries", "error.category"),
    "correction_grounded": _count("corrections_grounded", "provenance.kind"),
    "correction_ungrounded": _count("corrections_ungrounded", "reason"),
}
"""Which metric each reported layer fact also counts (facts not listed: span event only)."""

_METRIC_ONLY = frozenset({"semantic_retry_success"})
"""Facts counted in metrics but not worth a span event of their own."""

FACT_LAYERS: dict[str, str] = {
    "type_coercion_applied": "type_coercion",
    "resilience_retry": "resilience",
    "transient_override": "semantic_retry",
    "semantic_retry_success": "semantic_retry",
}
"""The layer a reported fact belongs to, where its name does not say it (the OTel
``dagwright.layer.events`` counter's ``dagwright.layer`` attribute)."""


def _layer_of(fact: str) -> str:
    if fact in FACT_LAYERS:
        return FACT_LAYERS[fact]
    if fact.startswith("validation_feedback"):
        return "validation_feedback"
    if fact.startswith("contextual_re_resolution"):
        return "semantic_retry"
    return "other"


class Observer:
    """Records runs, plans, steps, tool calls and LLM calls for one orchestrator.

    Thread-safe as far as its backends are (OTel and prometheus-client are); shared by
    every run of the orchestrator.
    """

    def __init__(
        self, telemetry: Telemetry, redactor: Redactor, *, provider: str = "unknown",
        model: str | None = None,
    ) -> None:
        self.telemetry = telemetry
        self.metrics = telemetry.metrics
        self.instruments = telemetry.instruments
        self.redactor = redactor
        self.provider = provider
        self.model = model
        self._profiles: dict[str, CapabilityProfile] = {}
        self._shown_ids: dict[str, str] = {}
        self._shown_for: object = None

    @property
    def step_tracer(self) -> Tracer:
        """The provider's own tracer, for the step path: a step observation redacts what it
        records itself (static attributes once per capability), so the wrapper's
        per-attribute redaction and log scope per span are not paid on every step."""
        tracer = self.telemetry.tracer
        return tracer.inner if isinstance(tracer, attr.DagwrightTracer) else tracer

    def shown(self, text: str | None, limit: int) -> str | None:
        """``text`` as a sink may show it: redacted, then clipped to ``limit``."""
        return clip(self.redactor.redact(text), limit) if text else text

    # --- runs -----------------------------------------------------------------------------
    @contextmanager
    def run(self, state: RunState, *, planned_by: str) -> Iterator[RunObservation]:
        """The run's span (``invoke_agent dagwright``, the conventions' internal agent
        span: the agent runs in this process) and logging scope."""
        started = time.perf_counter()
        context = attr.redact_attributes(attr.clean_attributes(attr.context_attributes(state.context)),
                                         self.redactor) or {}
        with (
            log_context(run_id=state.run_id, redactor=self.redactor),
            attr.scoped_run_attributes(context),
            self.telemetry.tracer.start_as_current_span(
                f"{attr.OP_INVOKE_AGENT} {attr.AGENT_NAME}", kind=SpanKind.INTERNAL,
                attributes=attr.clean_attributes({
                    attr.GEN_AI_OPERATION: attr.OP_INVOKE_AGENT,
                    attr.GEN_AI_PROVIDER: self.provider,
                    attr.GEN_AI_AGENT_NAME: attr.AGENT_NAME,
                    attr.GEN_AI_AGENT_VERSION: __version__,
                    attr.GEN_AI_REQUEST_MODEL: self.model,
                    attr.RUN_ID: state.run_id}),
            ) as span,
        ):
            log.info("run started", extra={"planned_by": planned_by})
            observation = RunObservation(self, span, started)
            yield observation
            observation.close(state)

    # --- planning ---------------------------------------------------------------------
    @contextmanager
    def planning(
        self, run_id: str, purpose: str, attributes: Mapping[str, Any] | None = None
    ) -> Iterator[PlanningObservation]:
        """A planner conversation: the conventions' plan span (``plan dagwright``), for a
        first plan and a repair plan alike (``dagwright.plan.purpose`` tells them apart)."""
        with self.telemetry.tracer.start_as_current_span(
            f"{attr.OP_PLAN} {attr.AGENT_NAME}", kind=SpanKind.INTERNAL,
            attributes={attr.GEN_AI_OPERATION: attr.OP_PLAN,
                        attr.GEN_AI_AGENT_NAME: attr.AGENT_NAME, attr.PLAN_PURPOSE: purpose,
                        attr.RUN_ID: run_id, **(attributes or {})},
        ) as span:
            yield PlanningObservation(self, span, purpose)

    # --- steps ------------------------------------------------------------------------
    def step(self, run_id: str, step: Step, capability: Capability) -> StepObservation:
        """A step's span (``execute_tool``), current while the step runs (``with``)."""
        return StepObservation(self, run_id, step, capability)

    def profile(self, capability: Capability) -> CapabilityProfile:
        """What every step of ``capability`` records the same way, worked out once: span
        names and static attributes (redacted), metric children, metric attributes.

        Made again when the capability object or the redactor's known secrets change (a
        catalog refresh), so a secret added later is still masked.
        """
        secrets = self.redactor.known_secrets()
        found = self._profiles.get(capability.key)
        if found is None or found.capability is not capability or found.secrets is not secrets:
            found = CapabilityProfile(self, capability, secrets)
            self._profiles[capability.key] = found
        return found

    def shown_id(self, identifier: str) -> str:
        """A run or step id as a span may show it: redacted (a caller chooses run ids, a
        planner step ids), once per id and known secrets rather than once per span —
        the same plan's step ids come back run after run."""
        secrets = self.redactor.known_secrets()
        if secrets is not self._shown_for:
            self._shown_ids.clear()
            self._shown_for = secrets
        shown = self._shown_ids.get(identifier)
        if shown is None:
            if len(self._shown_ids) >= 8192:
                self._shown_ids.clear()
            shown = self._shown_ids[identifier] = self.redactor.redact(identifier)
        return shown

    def step_skipped(self, step: Step) -> None:
        """A step that never ran (upstream failure, deadline, budget)."""
        self.metrics.child(self.metrics.steps, step.tool, step.capability, "skipped").inc()
        self.instruments.steps.add(1, {attr.TOOL: step.tool,
                                       attr.CAPABILITY: f"{step.tool}.{step.capability}",
                                       attr.STEP_STATUS: "skipped"})

    # --- LLM calls --------------------------------------------------------------------
    @contextmanager
    def llm_call(
        self, request: LLMRequest, *, run_id: str, provider: str, model: str,
        base_url: str | None = None,
    ) -> Iterator[LLMCallObservation]:
        """One request to the provider (span ``chat {model}``)."""
        server = attr.server_attributes_of(base_url)
        span_attrs = attr.clean_attributes({
            attr.GEN_AI_OPERATION: attr.OP_CHAT,
            attr.GEN_AI_PROVIDER: provider,
            attr.GEN_AI_REQUEST_MODEL: model,
            attr.GEN_AI_REQUEST_TEMPERATURE: request.temperature,
            attr.GEN_AI_REQUEST_MAX_TOKENS: request.max_output_tokens,
            attr.GEN_AI_OUTPUT_TYPE: "json" if request.response_schema else "text",
            **server,
            attr.PURPOSE: request.purpose,
            attr.RUN_ID: run_id,
            attr.STEP_ID: request.step_id,
        })
        # what the GenAI client metrics are recorded with: bounded, no ids
        metric_attrs = {attr.GEN_AI_OPERATION: attr.OP_CHAT, attr.GEN_AI_PROVIDER: provider,
                        attr.GEN_AI_REQUEST_MODEL: model, **server,
                        attr.PURPOSE: request.purpose}
        with self.telemetry.tracer.start_as_current_span(
            f"{attr.OP_CHAT} {model}", kind=SpanKind.CLIENT, attributes=span_attrs
        ) as span:
            yield LLMCallObservation(self, span, request.purpose, metric_attrs)

    def llm_budget_exceeded(self, purpose: str) -> None:
        """An LLM call a budget refused."""
        self.metrics.llm_calls.labels(purpose, "budget_exceeded").inc()

    def budget_exceeded(self, report: BudgetExceeded) -> None:
        """A budget stopped a run (once per run: the first refusal)."""
        self.metrics.budget_exceeded.labels(report.budget).inc()
        self.instruments.budget_exceeded.add(1, {attr.BUDGET: report.budget})
        attr.add_event(trace.get_current_span(), "budget_exceeded", {
            "dagwright.budget": report.budget, "dagwright.budget.limit": report.limit,
            "dagwright.budget.used": report.used, attr.CAPABILITY: report.capability})

    def llm_cost(self, purpose: str, cost: float) -> None:
        """What an answered LLM call cost, priced with the configured table."""
        self.metrics.llm_cost.labels(purpose).inc(cost)
        self.instruments.llm_cost.add(cost, {attr.PURPOSE: purpose})

    # --- the plan cache -----------------------------------------------------------------
    def plan_cache(self, run_id: str, outcome: str, *, age_s: float | None = None) -> None:
        """A plan cache lookup (``hit``, ``miss``, ``invalid``, ``error``), a lookup not
        made (``skipped``: a follow-up in a session) or a plan kept (``stored``):
        ``orchestration_plan_cache_total`` by outcome, a ``plan_cache`` event
        on the run's span, and on a hit ``dagwright.plan.source=cache`` on the span."""
        self.metrics.plan_cache.labels(outcome).inc()
        span = trace.get_current_span()
        attr.add_event(span, "plan_cache", {"outcome": outcome, attr.RUN_ID: run_id,
                                            "plan_cache.age_s": age_s})
        if outcome == "hit":
            span.set_attribute(attr.PLAN_SOURCE, "cache")

    # --- circuit breakers -------------------------------------------------------------
    def circuit_changed(self, transition: CircuitTransition) -> None:
        """A tool's circuit breaker changed state (``before`` None: it was just made,
        closed): the ``orchestration_circuit_state`` gauge, the transition counter and a
        log line (WARNING when it opens). The span event is the call's that caused it
        (:meth:`StepObservation._called`)."""
        tool = transition.tool
        self.metrics.circuit_state.labels(tool).set(CIRCUIT_STATE_VALUES[transition.after])
        if transition.before is None:
            return
        self.metrics.circuit_transitions.labels(tool, transition.after).inc()
        circuit_log.log(
            30 if transition.after == "open" else 20,  # WARNING / INFO
            "circuit of tool %s: %s -> %s (%s)", tool, transition.before, transition.after,
            transition.reason,
            extra={"tool": tool, "circuit_state": transition.after,
                   "previous_state": transition.before, "failures": transition.failures,
                   "cool_down_s": transition.cool_down_s})


class RunObservation:
    """The run's span while it is open."""

    def __init__(self, observer: Observer, span: Span, started: float) -> None:
        self._observer = observer
        self._span = span
        self._started = started
        trace_id = span.get_span_context().trace_id
        self.trace_id = f"{trace_id:032x}" if trace_id else None

    def close(self, state: RunState) -> None:
        """The run ended: span status, the outcome log lines and the run metrics."""
        span, usage = self._span, state.usage
        span.set_attribute(attr.RUN_STATUS, state.status)
        span.set_attribute(attr.GEN_AI_INPUT_TOKENS, usage.input_tokens)
        span.set_attribute(attr.GEN_AI_OUTPUT_TOKENS, usage.output_tokens)
        if state.budget_exceeded is not None:
            span.set_attribute(attr.BUDGET, state.budget_exceeded.budget)
        if state.status != "succeeded":
            span.set_status(Status(StatusCode.ERROR, state.error or state.status))
            span.set_attribute(attr.ERROR_TYPE, _run_error_type(state))
        duration = time.perf_counter() - self._started
        _log_run_end(state, duration, self._observer)
        metrics = self._observer.metrics
        metrics.runs.labels(state.status).inc()
        metrics.run_duration.labels(state.status).observe(duration)
        instruments = self._observer.instruments
        instruments.runs.add(1, {attr.RUN_STATUS: state.status})
        instruments.run_duration.record(duration, {attr.RUN_STATUS: state.status})


class PlanningObservation:
    """A planner conversation: catalog selection, each attempt, the verdict."""

    def __init__(self, observer: Observer, span: Span, purpose: str) -> None:
        self._observer = observer
        self.span = span
        self.purpose = purpose

    def set(self, key: str, value: Any) -> None:
        self.span.set_attribute(key, value)

    def selection(self, attributes: Mapping[str, Any], prompt_chars: int) -> None:
        """Which capabilities the prompt offered (and which it left out for size)."""
        for key, value in attributes.items():
            self.span.set_attribute(f"dagwright.{key}", value)
        self.span.set_attribute("dagwright.prompt.chars", prompt_chars)
        attr.add_event(self.span, "catalog_selection", {**attributes, "prompt.chars": prompt_chars})

    def attempt(
        self, number: int, outcome: str, kind: str, error: str | None,
        finish_reason: str | None, will_retry: bool,
    ) -> None:
        """One planner call and what became of its answer."""
        attr.add_event(self.span, "plan_attempt", {
            attr.ATTEMPT: number, attr.PURPOSE: self.purpose, "outcome": outcome,
            "reason": kind, "error": self._observer.shown(error, _EVENT_TEXT_LIMIT),
            "finish_reason": finish_reason, "will_retry": will_retry,
        })
        if will_retry:
            self._observer.metrics.planner_retries.labels(kind).inc()

    def failed(self, description: str, error_type: str = "planning_failed") -> None:
        self.span.set_status(Status(StatusCode.ERROR, description))
        self.span.set_attribute(attr.ERROR_TYPE, error_type)


class CapabilityProfile:
    """What the steps of one capability record identically, prepared once (see
    :meth:`Observer.profile`): nothing here depends on a run, a step or a value."""

    __slots__ = (
        "_metrics",
        "_observer",
        "call_attributes",
        "call_kind",
        "call_name",
        "calls_by_outcome",
        "capability",
        "errors_by_category",
        "in_process",
        "labels",
        "remote",
        "secrets",
        "span_attributes",
        "span_name",
        "step_duration",
        "steps_by_status",
        "tool_call_duration",
    )

    def __init__(self, observer: Observer, capability: Capability, secrets: object) -> None:
        red = observer.redactor
        self.capability = capability
        self.secrets = secrets
        self._observer = observer
        self._metrics = metrics = observer.metrics
        key = capability.key
        self.span_name = red.redact(f"{attr.OP_EXECUTE_TOOL} {key}")
        self.span_attributes = attr.redact_attributes(attr.clean_attributes({
            attr.GEN_AI_OPERATION: attr.OP_EXECUTE_TOOL,
            attr.GEN_AI_TOOL_NAME: key,
            attr.GEN_AI_TOOL_DESCRIPTION: _first_line(capability.description),
            attr.CAPABILITY: key,
            attr.TOOL: capability.tool,
            attr.GEN_AI_TOOL_TYPE: "function" if capability.function is not None
            else "extension",
        }), red) or {}
        call_attributes: dict[str, Any] = {attr.GEN_AI_TOOL_NAME: key, attr.CAPABILITY: key}
        self.remote = capability.function is None
        self.in_process = capability.function is not None and capability.invoker is None
        if capability.url is not None:
            endpoint = attr.endpoint_attributes(capability)
            name, kind = f"{capability.method} {endpoint[attr.URL_TEMPLATE]}", SpanKind.CLIENT
            call_attributes.update(endpoint)
        elif capability.invoker is not None:  # an MCP server or an OpenAPI operation: remote
            name, kind = f"tool_call {key}", SpanKind.CLIENT
        else:  # a Python tool runs in this process
            name, kind = f"tool_call {key}", SpanKind.INTERNAL
        self.call_name, self.call_kind = red.redact(name), kind
        self.call_attributes = attr.redact_attributes(call_attributes, red) or {}
        # label values are the catalog's names, as every Prometheus update had them
        self.labels = {attr.TOOL: capability.tool, attr.CAPABILITY: key}
        self.tool_call_duration = metrics.child(metrics.tool_call_duration, capability.tool,
                                                capability.name)
        self.step_duration = metrics.child(metrics.step_duration, capability.tool,
                                           capability.name)
        self.calls_by_outcome: dict[str, tuple[Any, dict[str, Any]]] = {}
        self.steps_by_status: dict[str, tuple[Any, dict[str, Any]]] = {}
        self.errors_by_category: dict[str, Any] = {}

    def call_counted(self, outcome: str) -> tuple[Any, dict[str, Any]]:
        """The Prometheus child and OTel attributes of a tool call with ``outcome``."""
        return self.calls_by_outcome.get(outcome) or self._labelled(
            self.calls_by_outcome, self._metrics.tool_calls, attr.OUTCOME, outcome)

    def step_counted(self, status: str) -> tuple[Any, dict[str, Any]]:
        """The Prometheus child and OTel attributes of a step that ended ``status``."""
        return self.steps_by_status.get(status) or self._labelled(
            self.steps_by_status, self._metrics.steps, attr.STEP_STATUS, status)

    def _labelled(self, cache: dict[str, tuple[Any, dict[str, Any]]], metric: Any,
                  attribute: str, value: str) -> tuple[Any, dict[str, Any]]:
        """Made once per value: the metric's child for this capability and ``value``, and
        the OTel attributes with ``attribute`` set to it."""
        cap = self.capability
        found = cache[value] = (self._metrics.child(metric, cap.tool, cap.name, value),
                                {**self.labels, attribute: value})
        return found

    def error_counted(self, category: str) -> Any:
        found = self.errors_by_category.get(category)
        if found is None:
            cap, metrics = self.capability, self._metrics
            found = self.errors_by_category[category] = metrics.child(
                metrics.tool_errors, cap.tool, cap.name, category)
        return found


class StepObservation:
    """One step while it runs: its span, its attempts' calls, its layers' facts.

    Used as ``with observer.step(...) as observation``: the step's span (``execute_tool``)
    and its logging scope (the run and step ids on every record) last as long as the
    block. The span is started on the provider's tracer and is made current only when it
    records: a span the sampler dropped (or a no-op provider's) carries the same sampling
    decision as the run's span already in the context, so children decide alike.

    One span per step on the happy path: the first call of an in-process tool is recorded
    on the step's span; when the step makes another call, that first call gets its own
    ``tool_call`` span after the fact (with its real start and end), so a step that needed
    several attempts shows one span per call as before. An HTTP or remote tool's call is
    always an HTTP client span of its own (the trace context the tool receives names it).
    """

    __slots__ = ("_call_context", "_deferred", "_log_token", "_metrics", "_observer",
                 "_otel_token", "_profile", "_sent", "capability", "recording", "run_id",
                 "span", "step")

    def __init__(
        self, observer: Observer, run_id: str, step: Step, capability: Capability
    ) -> None:
        self._observer = observer
        self.run_id = run_id
        self.step = step
        self.capability = capability
        self._sent = 0  # calls sent so far: a later one is a re-send (http.request.resend_count)
        self._deferred: _DeferredCall | None = None
        self._otel_token: object = None
        self._call_context: Any = None
        self.span: Span = trace.INVALID_SPAN
        self.recording = False

    def __enter__(self) -> StepObservation:
        observer = self._observer
        self._profile = profile = observer.profile(self.capability)
        self._metrics = observer.metrics
        span = observer.step_tracer.start_span(profile.span_name, kind=SpanKind.INTERNAL)
        self.span = span
        if span.is_recording():
            self.recording = True
            run_shown = observer.shown_id(self.run_id)
            step_shown = observer.shown_id(self.step.id)
            # ids hold only letters, digits, '_', '-', '.', ':': the call id is the two
            # redacted ids joined, not a new text a secret could hide in
            span.set_attributes({
                **attr.run_attributes(), **profile.span_attributes,
                attr.GEN_AI_TOOL_CALL_ID: f"{run_shown}:{step_shown}",
                attr.RUN_ID: run_shown, attr.STEP_ID: step_shown})
            self._call_context = trace.set_span_in_context(span)
            self._otel_token = otel_context.attach(self._call_context)
        self._log_token = enter_log_context(self.run_id, self.step.id)
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        exit_log_context(self._log_token)
        if self._otel_token is not None:
            otel_context.detach(self._otel_token)  # type: ignore[arg-type]
        span = self.span
        if self.recording:
            if isinstance(exc, Exception):  # a bug in the step path: on the span, redacted
                safe = attr.RedactingSpan(span)
                safe.record_exception(exc)
                safe.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
            span.end()

    def report(self, name: str, attributes: Mapping[str, Any]) -> None:
        """A layer's decision or verdict, by name (see :data:`LAYER_EVENT_METRICS`): a
        span event on the step's span, and the metrics the fact counts."""
        update = LAYER_EVENT_METRICS.get(name)
        if update is not None:
            update(self._metrics, self.capability, attributes)
        self._observer.instruments.layer_events.add(1, {
            **self._profile.labels, attr.LAYER: _layer_of(name), attr.LAYER_EVENT: name})
        if name not in _METRIC_ONLY:  # the event's log line is written either way
            attr.add_event(self.span, name, {
                attr.STEP_ID: self.step.id, attr.CAPABILITY: self.capability.key, **attributes})

    def rejected(self, error: StepError) -> None:
        """Pre-flight validation stopped an attempt (nothing was sent)."""
        self._profile.error_counted(error.category.value).inc()

    def call(self, number: int, layer: str, headers: dict[str, str]) -> CallObservation:
        """One call of the step's tool (``with``); trace context goes into ``headers``.

        An HTTP tool's call is an HTTP client span as the HTTP conventions have it
        (``{method} {url.template}``, kind CLIENT, ``url.full``, ``server.*``,
        ``http.response.status_code``, ``http.request.resend_count``); a remote tool's
        (MCP, OpenAPI) a CLIENT span ``tool_call {tool.capability}``; a Python tool's runs
        in this process: its first call is recorded on the step's span, later ones (and
        then the first, after the fact) as INTERNAL spans ``tool_call {tool.capability}``.
        """
        resends = self._sent
        self._sent += 1
        return CallObservation(self, number, layer, headers, resends)

    def _call_span(self, number: int, layer: str, resends: int,
                   start_time: int | None = None) -> Span:
        profile = self._profile
        attributes = {**attr.run_attributes(), **profile.call_attributes,
                      attr.RUN_ID: self._observer.shown_id(self.run_id),
                      attr.STEP_ID: self._observer.shown_id(self.step.id),
                      attr.LAYER: layer, attr.ATTEMPT: number}
        if resends and self.capability.url is not None:
            attributes[attr.HTTP_REQUEST_RESEND_COUNT] = resends
        span = self._observer.step_tracer.start_span(
            profile.call_name, context=self._call_context, kind=profile.call_kind,
            start_time=start_time)
        if span.is_recording():
            span.set_attributes(attributes)
        return span

    def _flush_deferred(self) -> None:
        """Give the step's first in-process call the span it did without, now that the
        step makes another call."""
        deferred, self._deferred = self._deferred, None
        if deferred is None:
            return
        span = self._call_span(deferred.number, deferred.layer, 0, start_time=deferred.started)
        if deferred.result is not None:
            _answer(span, deferred.result, self._observer, http=False)
        span.end(end_time=deferred.ended)

    def _called(self, result: CallResult | None) -> None:
        if result is None:
            return
        profile = self._profile
        for transition in result.circuit:
            attr.add_event(self.span, f"circuit_{transition.after}", {
                attr.TOOL: transition.tool, "circuit.previous_state": transition.before,
                "circuit.failures": transition.failures,
                "circuit.cool_down_s": transition.cool_down_s,
                "circuit.reason": transition.reason})
        error = result.error
        if error is not None and error.category is ErrorCategory.CIRCUIT_OPEN:
            # refused before anything was sent: an error of the step, not a call made
            profile.error_counted(error.category.value).inc()
            attr.add_event(self.span, "circuit_refused", {
                attr.TOOL: self.capability.tool, "retry_after_s": error.retry_after_s})
            return
        outcome = "succeeded" if result.error is None else "failed"
        profile.tool_call_duration.observe(result.latency_s)
        counter, otel_attrs = profile.call_counted(outcome)
        counter.inc()
        instruments = self._observer.instruments
        instruments.tool_calls.add(1, otel_attrs)
        instruments.tool_call_duration.record(result.latency_s, profile.labels)
        if result.error is not None:
            profile.error_counted(result.error.category.value).inc()

    def finished(self, result: StepResult) -> None:
        """The step ended: span status and the step metrics."""
        if self.recording:
            span, error = self.span, result.error
            outcome: dict[str, Any] = {attr.ATTEMPT: len(result.attempts),
                                       attr.STEP_STATUS: result.status}
            if result.attempts:
                outcome[attr.LAYER] = result.attempts[-1].layer
            if error is not None:
                span.set_status(Status(StatusCode.ERROR,
                                       self._observer.redactor.redact(error.describe())))
                outcome[attr.ERROR_TYPE] = error.category.value
            span.set_attributes(outcome)  # one update of the span, not one per attribute
        profile = self._profile
        counter, otel_attrs = profile.step_counted(result.status)
        counter.inc()
        profile.step_duration.observe(result.duration_s)
        self._observer.instruments.steps.add(1, otel_attrs)


class _DeferredCall:
    """The first in-process call of a step, recorded on the step's span: enough to give
    it a span of its own after the fact if the step makes another call."""

    __slots__ = ("ended", "layer", "number", "result", "started")

    def __init__(self, number: int, layer: str, started: int) -> None:
        self.number = number
        self.layer = layer
        self.started = started
        self.ended: int | None = None
        self.result: CallResult | None = None


def _answer(span: Span, result: CallResult, observer: Observer, *, http: bool) -> None:
    """What came back, on a call's span: the status code of an HTTP answer (success
    included) and, for a failure, ``error.type`` — the status code of a 4xx/5xx answer as
    the HTTP conventions ask, else the error category (no answer, or an error envelope)."""
    if not span.is_recording():
        return
    error = result.error
    status = result.http_status if error is None else error.http_status
    if http and status is not None:
        span.set_attribute(attr.HTTP_RESPONSE_STATUS_CODE, status)
    if error is not None:
        span.set_status(Status(StatusCode.ERROR, observer.shown(error.message, 200)))
        http_error = http and status is not None and status >= 400
        span.set_attribute(attr.ERROR_TYPE, str(status) if http_error else error.category.value)


class CallObservation:
    """A tool call while it runs (``with``); :meth:`answered` records what came back."""

    __slots__ = ("_deferred", "_otel_token", "_resends", "_step", "headers", "http", "layer",
                 "number", "result", "span")

    def __init__(self, step: StepObservation, number: int, layer: str,
                 headers: dict[str, str], resends: int) -> None:
        self._step = step
        self.number = number
        self.layer = layer
        self.headers = headers
        self._resends = resends
        self.http = step.capability.url is not None
        self.result: CallResult | None = None
        self.span: Span = trace.INVALID_SPAN
        self._otel_token: object = None
        self._deferred: _DeferredCall | None = None

    def __enter__(self) -> CallObservation:
        step = self._step
        profile = step._profile
        if step.recording and profile.in_process and self._resends == 0:
            # the step's only call so far: on the step's span (a span of its own later,
            # if another call follows)
            self._deferred = step._deferred = _DeferredCall(self.number, self.layer,
                                                            time.time_ns())
        elif step.recording:
            step._flush_deferred()
            self.span = step._call_span(self.number, self.layer, self._resends)
            self._otel_token = otel_context.attach(trace.set_span_in_context(self.span))
        if profile.remote:
            propagate.inject(self.headers)
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        deferred = self._deferred
        if deferred is not None:
            deferred.ended = time.time_ns()
            deferred.result = self.result
        if self._otel_token is not None:
            otel_context.detach(self._otel_token)  # type: ignore[arg-type]
            span = self.span
            if isinstance(exc, Exception):
                safe = attr.RedactingSpan(span)
                safe.record_exception(exc)
                safe.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
            span.end()
        self._step._called(self.result)

    def answered(self, result: CallResult) -> None:
        """The call came back (see :func:`_answer` for what its span records)."""
        self.result = result
        if self._otel_token is not None:
            _answer(self.span, result, self._step._observer, http=self.http)


class LLMCallObservation:
    """An LLM call's span, and its outcome in metrics."""

    def __init__(
        self, observer: Observer, span: Span, purpose: str, metric_attrs: dict[str, Any]
    ) -> None:
        self._metrics = observer.metrics
        self._instruments = observer.instruments
        self.span = span
        self.purpose = purpose
        self._metric_attrs = metric_attrs
        self._started = time.perf_counter()

    def _elapsed(self) -> float:
        elapsed = time.perf_counter() - self._started
        self._metrics.llm_latency.labels(self.purpose).observe(elapsed)
        if self.purpose == "semantic_retry":
            self._metrics.semantic_retry_llm_latency.observe(elapsed)
        return elapsed

    def failed(self, exc: BaseException) -> float:
        """The call failed; returns its duration."""
        elapsed = self._elapsed()
        kind = exc.kind.value if isinstance(exc, LLMError) else "other"
        error_type = kind if isinstance(exc, LLMError) else type(exc).__name__
        self._metrics.llm_calls.labels(self.purpose, kind).inc()
        self._instruments.operation_duration.record(
            elapsed, {**self._metric_attrs, attr.ERROR_TYPE: error_type})
        self.span.set_status(Status(StatusCode.ERROR, str(exc) if isinstance(exc, LLMError)
                                    else repr(exc)))
        self.span.set_attribute(attr.ERROR_TYPE, error_type)
        return elapsed

    def succeeded(self, response: LLMResponse) -> float:
        """The call answered; returns its duration."""
        elapsed = self._elapsed()
        usage, metrics = response.usage, self._metrics
        metrics.llm_calls.labels(self.purpose, "ok").inc()
        metrics.llm_tokens.labels(self.purpose, "input").inc(usage.input_tokens)
        metrics.llm_tokens.labels(self.purpose, "output").inc(usage.output_tokens)
        labels = dict(self._metric_attrs)
        if response.model:
            labels[attr.GEN_AI_RESPONSE_MODEL] = response.model
        self._instruments.operation_duration.record(elapsed, labels)
        for token_type, count in (("input", usage.input_tokens), ("output", usage.output_tokens)):
            self._instruments.token_usage.record(count, {**labels, attr.GEN_AI_TOKEN_TYPE: token_type})
        self.span.set_attribute(attr.GEN_AI_INPUT_TOKENS, usage.input_tokens)
        self.span.set_attribute(attr.GEN_AI_OUTPUT_TOKENS, usage.output_tokens)
        if response.model:
            self.span.set_attribute(attr.GEN_AI_RESPONSE_MODEL, response.model)
        if response.response_id:
            self.span.set_attribute(attr.GEN_AI_RESPONSE_ID, response.response_id)
        if response.finish_reason:
            self.span.set_attribute(attr.GEN_AI_RESPONSE_FINISH_REASONS, [response.finish_reason])
        return elapsed


def _first_line(text: str, limit: int = 300) -> str | None:
    """A capability's description as a span attribute: its first line, bounded."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line[:limit] or None


def _run_error_type(state: RunState) -> str:
    """A low-cardinality ``error.type`` for a run that did not succeed."""
    if state.budget_exceeded is not None:
        return "budget_exceeded"
    if not state.steps:
        return "planning_failed"
    return "steps_failed" if state.status == "failed" else "partial"


class NullObserver(Observer):
    """Records nothing: no span, no metric, no log line, no clock read.

    For engine code that runs inside a Temporal workflow. A workflow is replayed from its
    history whenever a worker picks it up again, so anything it recorded would be
    recorded once per replay, with timings that mean nothing (workflow time stands still
    within a task). The Temporal activities record the real work instead — each tool and
    LLM call, on the worker that made it — with the worker's own :class:`Observer`.
    """

    def __init__(self) -> None:  # no telemetry: nothing is recorded
        pass

    def shown(self, text: str | None, limit: int) -> str | None:
        return text

    @contextmanager
    def run(self, state: RunState, *, planned_by: str) -> Iterator[RunObservation]:
        yield _NULL_RUN

    @contextmanager
    def planning(
        self, run_id: str, purpose: str, attributes: Mapping[str, Any] | None = None
    ) -> Iterator[PlanningObservation]:
        yield _NullPlanning(purpose)

    def step(self, run_id: str, step: Step, capability: Capability) -> StepObservation:
        return NullStepObservation(run_id, step, capability)

    def step_skipped(self, step: Step) -> None:
        pass

    @contextmanager
    def llm_call(
        self, request: LLMRequest, *, run_id: str, provider: str, model: str,
        base_url: str | None = None,
    ) -> Iterator[LLMCallObservation]:
        yield _NULL_LLM_CALL

    def llm_budget_exceeded(self, purpose: str) -> None:
        pass

    def budget_exceeded(self, report: BudgetExceeded) -> None:
        pass

    def llm_cost(self, purpose: str, cost: float) -> None:
        pass

    def circuit_changed(self, transition: CircuitTransition) -> None:
        pass

    def plan_cache(self, run_id: str, outcome: str, *, age_s: float | None = None) -> None:
        pass


class _NullRun(RunObservation):
    def __init__(self) -> None:
        self.trace_id = None

    def close(self, state: RunState) -> None:
        pass


class _NullPlanning(PlanningObservation):
    def __init__(self, purpose: str) -> None:
        self.span = trace.INVALID_SPAN
        self.purpose = purpose

    def set(self, key: str, value: Any) -> None:
        pass

    def selection(self, attributes: Mapping[str, Any], prompt_chars: int) -> None:
        pass

    def attempt(self, number: int, outcome: str, kind: str, error: str | None,
                finish_reason: str | None, will_retry: bool) -> None:
        pass

    def failed(self, description: str, error_type: str = "planning_failed") -> None:
        pass


class NullStepObservation(StepObservation):
    def __init__(self, run_id: str, step: Step, capability: Capability) -> None:
        self.span = trace.INVALID_SPAN
        self.recording = False
        self.run_id = run_id
        self.step = step
        self.capability = capability

    def __enter__(self) -> StepObservation:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        pass

    def report(self, name: str, attributes: Mapping[str, Any]) -> None:
        pass

    def rejected(self, error: StepError) -> None:
        pass

    def call(self, number: int, layer: str, headers: dict[str, str]) -> CallObservation:
        return NullCallObservation()

    def finished(self, result: StepResult) -> None:
        pass


class NullCallObservation(CallObservation):
    def __init__(self) -> None:
        self.span = trace.INVALID_SPAN
        self.http = False
        self.result = None

    def __enter__(self) -> CallObservation:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        pass

    def answered(self, result: CallResult) -> None:
        pass


class _NullLLMCall(LLMCallObservation):
    def __init__(self) -> None:
        self.span = trace.INVALID_SPAN
        self.purpose = ""

    def failed(self, exc: BaseException) -> float:
        return 0.0

    def succeeded(self, response: LLMResponse) -> float:
        return 0.0


_NULL_RUN = _NullRun()
_NULL_LLM_CALL = _NullLLMCall()


def _log_run_end(state: RunState, duration_s: float, observer: Observer) -> None:
    """One line per failed step (its id on the record), then the run's outcome."""
    for step in state.steps.values():
        if step.status == "failed" and step.error is not None:
            error = step.error
            log.warning(
                "step %s failed: %s/%s after %d attempt(s): %s", step.id, error.category.value,
                error.code, len(step.attempts), observer.shown(error.message, 300),
                extra={"step_id": step.id, "capability": f"{step.tool}.{step.capability}",
                       "category": error.category.value, "code": error.code,
                       "attempts": len(step.attempts), "gave_up": error.details.get("gave_up")},
            )
    counts: dict[str, int] = {}
    for step in state.steps.values():
        counts[step.status] = counts.get(step.status, 0) + 1
    usage = state.usage
    log.log(
        # INFO / WARNING: a run that waits for a person is where it was designed to be
        logging.INFO if state.status in ("succeeded", "awaiting_approval") else logging.WARNING,
        "run %s in %.0f ms: steps %s, %d LLM call(s)", state.status, duration_s * 1000,
        counts or "none", usage.llm_calls,
        extra={"status": state.status, "duration_ms": round(duration_s * 1000, 1),
               "steps": counts, "llm_calls": usage.llm_calls,
               "input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
               "error": observer.shown(state.error, 300) or None},
    )
