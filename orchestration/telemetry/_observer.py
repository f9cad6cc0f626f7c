"""The one place where a run becomes telemetry: spans, span events, metrics, log records.

The engine's control flow (the step runner, the recovery layers, the planner, the LLM
gateway) does not touch tracers, metric objects or loggers. It tells the
:class:`Observer` what happened at the edges of its stages — a step started, parameters
were coerced, a call was sent and answered, a layer decided, a step finished — and the
observer decides how each fact is recorded. So the names of spans, attributes, events and
metrics live here and in :mod:`~orchestration.telemetry._tracing` /
:mod:`~orchestration.telemetry.metrics`, and changing how a fact is recorded never means
reading a layer's decision logic.

Layers report their decisions as named facts (``state.report("transient_override",
{...})``); :data:`LAYER_EVENT_METRICS` says which metric each one also counts.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from orchestration.errors import LLMError
from orchestration.logging_setup import get_logger, log_context
from orchestration.telemetry import _tracing as attr

if TYPE_CHECKING:
    from orchestration._transport import CallResult
    from orchestration.capability import Capability
    from orchestration.llm.base import LLMRequest, LLMResponse
    from orchestration.plan import Step
    from orchestration.protocol import StepError
    from orchestration.redaction import Redactor
    from orchestration.result import StepResult
    from orchestration.state import RunState
    from orchestration.telemetry import Telemetry
    from orchestration.telemetry.metrics import Metrics

__all__ = ["LAYER_EVENT_METRICS", "NullObserver", "NullStepObservation", "Observer",
           "PlanningObservation", "StepObservation"]

log = get_logger("dagwright.run")
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
}
"""Which metric each reported layer fact also counts (facts not listed: span event only)."""

_METRIC_ONLY = frozenset({"semantic_retry_success"})
"""Facts counted in metrics but not worth a span event of their own."""


class Observer:
    """Records runs, plans, steps, tool calls and LLM calls for one orchestrator.

    Thread-safe as far as its backends are (OTel and prometheus-client are); shared by
    every run of the orchestrator.
    """

    def __init__(self, telemetry: Telemetry, redactor: Redactor) -> None:
        self.telemetry = telemetry
        self.metrics = telemetry.metrics
        self.redactor = redactor

    # --- runs -----------------------------------------------------------------------------
    @contextmanager
    def run(self, state: RunState, *, planned_by: str) -> Iterator[RunObservation]:
        """The run's span (``invoke_agent dagwright``) and logging scope."""
        started = time.perf_counter()
        with (
            log_context(run_id=state.run_id, redactor=self.redactor),
            self.telemetry.tracer.start_as_current_span(
                "invoke_agent dagwright",
                attributes={attr.GEN_AI_OPERATION: "invoke_agent",
                            attr.GEN_AI_AGENT_NAME: "dagwright", attr.RUN_ID: state.run_id},
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
        """A planner conversation (span ``plan`` or ``replan``)."""
        with self.telemetry.tracer.start_as_current_span(
            purpose, attributes={attr.RUN_ID: run_id, **(attributes or {})}
        ) as span:
            yield PlanningObservation(self, span, purpose)

    # --- steps ------------------------------------------------------------------------
    @contextmanager
    def step(self, run_id: str, step: Step, capability: Capability) -> Iterator[StepObservation]:
        """A step's span (``execute_tool``), current while the step runs."""
        with self.telemetry.tracer.start_as_current_span(
            f"execute_tool {capability.key}",
            attributes={
                attr.GEN_AI_OPERATION: "execute_tool",
                attr.GEN_AI_TOOL_NAME: capability.key,
                attr.GEN_AI_TOOL_CALL_ID: f"{run_id}:{step.id}",
                attr.RUN_ID: run_id,
                attr.STEP_ID: step.id,
                attr.CAPABILITY: capability.key,
                attr.TOOL: capability.tool,
                attr.GEN_AI_TOOL_TYPE: "function" if capability.function is not None
                else "extension",
            },
        ) as span:
            yield StepObservation(self, span, run_id, step, capability)

    def step_skipped(self, step: Step) -> None:
        """A step that never ran (upstream failure, deadline)."""
        self.metrics.child(self.metrics.steps, step.tool, step.capability, "skipped").inc()

    # --- LLM calls --------------------------------------------------------------------
    @contextmanager
    def llm_call(
        self, request: LLMRequest, *, run_id: str, provider: str, model: str
    ) -> Iterator[LLMCallObservation]:
        """One request to the provider (span ``chat {model}``)."""
        span_attrs = attr.clean_attributes({
            attr.GEN_AI_OPERATION: "chat",
            attr.GEN_AI_SYSTEM: provider,
            attr.GEN_AI_PROVIDER: provider,
            attr.GEN_AI_REQUEST_MODEL: model,
            attr.GEN_AI_REQUEST_TEMPERATURE: request.temperature,
            attr.GEN_AI_REQUEST_MAX_TOKENS: request.max_output_tokens,
            attr.GEN_AI_OUTPUT_TYPE: "json" if request.response_schema else "text",
            attr.PURPOSE: request.purpose,
            attr.RUN_ID: run_id,
            attr.STEP_ID: request.step_id,
        })
        with self.telemetry.tracer.start_as_current_span(
            f"chat {model}", kind=SpanKind.CLIENT, attributes=span_attrs
        ) as span:
            yield LLMCallObservation(self, span, request.purpose)

    def llm_budget_exceeded(self, purpose: str) -> None:
        self.metrics.llm_calls.labels(purpose, "budget_exceeded").inc()


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
        span = self._span
        span.set_attribute(attr.RUN_STATUS, state.status)
        if state.status != "succeeded":
            span.set_status(Status(StatusCode.ERROR, state.error or state.status))
        duration = time.perf_counter() - self._started
        _log_run_end(state, duration)
        metrics = self._observer.metrics
        metrics.runs.labels(state.status).inc()
        metrics.run_duration.labels(state.status).observe(duration)


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
            "reason": kind, "error": error[:_EVENT_TEXT_LIMIT] if error else None,
            "finish_reason": finish_reason, "will_retry": will_retry,
        })
        if will_retry:
            self._observer.metrics.planner_retries.labels(kind).inc()

    def failed(self, description: str) -> None:
        self.span.set_status(Status(StatusCode.ERROR, description))


class StepObservation:
    """One step while it runs: its span, its attempts' calls, its layers' facts."""

    def __init__(
        self, observer: Observer, span: Span, run_id: str, step: Step, capability: Capability
    ) -> None:
        self._observer = observer
        self._metrics = observer.metrics
        self.span = span
        self.run_id = run_id
        self.step = step
        self.capability = capability

    def report(self, name: str, attributes: Mapping[str, Any]) -> None:
        """A layer's decision or verdict, by name (see :data:`LAYER_EVENT_METRICS`)."""
        update = LAYER_EVENT_METRICS.get(name)
        if update is not None:
            update(self._metrics, self.capability, attributes)
        if name not in _METRIC_ONLY:
            attr.add_event(trace.get_current_span(), name, {
                attr.STEP_ID: self.step.id, attr.CAPABILITY: self.capability.key, **attributes})

    def rejected(self, error: StepError) -> None:
        """Pre-flight validation stopped an attempt (nothing was sent)."""
        cap = self.capability
        self._metrics.child(self._metrics.tool_errors, cap.tool, cap.name,
                            error.category.value).inc()

    @contextmanager
    def call(self, number: int, layer: str, headers: dict[str, str]) -> Iterator[CallObservation]:
        """A tool call (span ``tool_call``); trace context goes into ``headers``."""
        cap = self.capability
        with self._observer.telemetry.tracer.start_as_current_span(
            f"tool_call {cap.key}", kind=SpanKind.CLIENT,
            attributes={attr.GEN_AI_TOOL_NAME: cap.key, attr.RUN_ID: self.run_id,
                        attr.STEP_ID: self.step.id, attr.CAPABILITY: cap.key,
                        attr.LAYER: layer, attr.ATTEMPT: number,
                        **attr.endpoint_attributes(cap)},
        ) as span:
            if cap.function is None:
                propagate.inject(headers)
            observation = CallObservation(span)
            yield observation
            self._called(observation.result)

    def _called(self, result: CallResult | None) -> None:
        if result is None:
            return
        cap, metrics = self.capability, self._metrics
        metrics.child(metrics.tool_call_duration, cap.tool, cap.name).observe(result.latency_s)
        metrics.child(metrics.tool_calls, cap.tool, cap.name,
                      "succeeded" if result.error is None else "failed").inc()
        if result.error is not None:
            metrics.child(metrics.tool_errors, cap.tool, cap.name,
                          result.error.category.value).inc()

    def finished(self, result: StepResult) -> None:
        """The step ended: span status and the step metrics."""
        span, error = self.span, result.error
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, error.describe()))
            span.set_attribute(attr.ERROR_TYPE, error.category.value)
        span.set_attribute(attr.ATTEMPT, len(result.attempts))
        span.set_attribute(attr.STEP_STATUS, result.status)
        if result.attempts:
            span.set_attribute(attr.LAYER, result.attempts[-1].layer)
        cap, metrics = self.capability, self._metrics
        metrics.child(metrics.steps, self.step.tool, self.step.capability, result.status).inc()
        metrics.child(metrics.step_duration, cap.tool, cap.name).observe(result.duration_s)


class CallObservation:
    """A tool call's span; :meth:`answered` records what came back."""

    def __init__(self, span: Span) -> None:
        self.span = span
        self.result: CallResult | None = None

    def answered(self, result: CallResult) -> None:
        self.result = result
        error = result.error
        if error is not None:
            self.span.set_status(Status(StatusCode.ERROR, error.message[:200]))
            self.span.set_attribute(attr.ERROR_TYPE, error.category.value)
            if error.http_status is not None:
                self.span.set_attribute("http.response.status_code", error.http_status)


class LLMCallObservation:
    """An LLM call's span, and its outcome in metrics."""

    def __init__(self, observer: Observer, span: Span, purpose: str) -> None:
        self._metrics = observer.metrics
        self.span = span
        self.purpose = purpose
        self._started = time.perf_counter()

    def _elapsed(self) -> float:
        elapsed = time.perf_counter() - self._started
        self._metrics.llm_latency.labels(self.purpose).observe(elapsed)
        if self.purpose == "semantic_retry":
            self._metrics.semantic_retry_llm_latency_ms.observe(elapsed * 1000)
        return elapsed

    def failed(self, exc: BaseException) -> float:
        """The call failed; returns its duration."""
        elapsed = self._elapsed()
        kind = exc.kind.value if isinstance(exc, LLMError) else "other"
        self._metrics.llm_calls.labels(self.purpose, kind).inc()
        self.span.set_status(Status(StatusCode.ERROR, str(exc) if isinstance(exc, LLMError)
                                    else repr(exc)))
        self.span.set_attribute(attr.ERROR_TYPE, kind if isinstance(exc, LLMError)
                                else type(exc).__name__)
        return elapsed

    def succeeded(self, response: LLMResponse) -> float:
        """The call answered; returns its duration."""
        elapsed = self._elapsed()
        usage, metrics = response.usage, self._metrics
        metrics.llm_calls.labels(self.purpose, "ok").inc()
        metrics.llm_tokens.labels(self.purpose, "input").inc(usage.input_tokens)
        metrics.llm_tokens.labels(self.purpose, "output").inc(usage.output_tokens)
        self.span.set_attribute(attr.GEN_AI_INPUT_TOKENS, usage.input_tokens)
        self.span.set_attribute(attr.GEN_AI_OUTPUT_TOKENS, usage.output_tokens)
        if response.model:
            self.span.set_attribute(attr.GEN_AI_RESPONSE_MODEL, response.model)
        if response.finish_reason:
            self.span.set_attribute(attr.GEN_AI_RESPONSE_FINISH_REASONS, [response.finish_reason])
        return elapsed


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

    @contextmanager
    def run(self, state: RunState, *, planned_by: str) -> Iterator[RunObservation]:
        yield _NULL_RUN

    @contextmanager
    def planning(
        self, run_id: str, purpose: str, attributes: Mapping[str, Any] | None = None
    ) -> Iterator[PlanningObservation]:
        yield _NullPlanning(purpose)

    @contextmanager
    def step(self, run_id: str, step: Step, capability: Capability) -> Iterator[StepObservation]:
        yield NullStepObservation(run_id, step, capability)

    def step_skipped(self, step: Step) -> None:
        pass

    @contextmanager
    def llm_call(
        self, request: LLMRequest, *, run_id: str, provider: str, model: str
    ) -> Iterator[LLMCallObservation]:
        yield _NULL_LLM_CALL

    def llm_budget_exceeded(self, purpose: str) -> None:
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

    def failed(self, description: str) -> None:
        pass


class NullStepObservation(StepObservation):
    def __init__(self, run_id: str, step: Step, capability: Capability) -> None:
        self.span = trace.INVALID_SPAN
        self.run_id = run_id
        self.step = step
        self.capability = capability

    def report(self, name: str, attributes: Mapping[str, Any]) -> None:
        pass

    def rejected(self, error: StepError) -> None:
        pass

    @contextmanager
    def call(self, number: int, layer: str, headers: dict[str, str]) -> Iterator[CallObservation]:
        yield CallObservation(trace.INVALID_SPAN)

    def finished(self, result: StepResult) -> None:
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


def _log_run_end(state: RunState, duration_s: float) -> None:
    """One line per failed step (its id on the record), then the run's outcome."""
    for step in state.steps.values():
        if step.status == "failed" and step.error is not None:
            error = step.error
            log.warning(
                "step %s failed: %s/%s after %d attempt(s): %s", step.id, error.category.value,
                error.code, len(step.attempts), error.message[:300],
                extra={"step_id": step.id, "capability": f"{step.tool}.{step.capability}",
                       "category": error.category.value, "code": error.code,
                       "attempts": len(step.attempts), "gave_up": error.details.get("gave_up")},
            )
    counts: dict[str, int] = {}
    for step in state.steps.values():
        counts[step.status] = counts.get(step.status, 0) + 1
    usage = state.usage
    log.log(
        20 if state.status == "succeeded" else 30,  # INFO / WARNING
        "run %s in %.0f ms: steps %s, %d LLM call(s)", state.status, duration_s * 1000,
        counts or "none", usage.llm_calls,
        extra={"status": state.status, "duration_ms": round(duration_s * 1000, 1),
               "steps": counts, "llm_calls": usage.llm_calls,
               "input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
               "error": (state.error or "")[:300] or None},
    )
