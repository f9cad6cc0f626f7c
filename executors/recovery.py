"""The seam between a failed attempt and the defense layers.

After an attempt fails, the step runner asks an ordered chain of
:class:`RecoveryHandler` s what to do. The first handler that returns a
:class:`Decision` or a :class:`GiveUp` wins; when none does, the step fails with its whole
history. Resilience (same parameters after a transport fault), layer 3 (validation
feedback) and layer 4 (semantic retry) are handlers; a service can add its own.

A handler sees the step through a :class:`StepState`: the step, its capability, the
settings that apply to it, its attempts so far, and the run (its state and services).
It reports what it decided with :meth:`StepState.report` (a named fact the observer turns
into span events and metrics) and never touches telemetry itself.
"""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from orchestration.capability import Capability
from orchestration.layer_settings import LayerSettings
from orchestration.plan import Step, ValidatedPlan
from orchestration.protocol import StepError
from orchestration.result import Attempt, Layer
from orchestration.retry_policy import RetryPolicy
from orchestration.services import RunServices
from orchestration.state import RunState

if TYPE_CHECKING:
    from executors._prepare import PreparedCapability
    from orchestration.telemetry._observer import StepObservation

__all__ = ["Claim", "Decision", "GiveUp", "Grounding", "RecoveryHandler", "StepState",
           "ask_handlers"]


@dataclass(frozen=True, slots=True)
class Claim:
    """Where a corrected value is said to come from (checked before the call is sent).

    ``kind`` is ``query`` (``text`` quotes the user's request), ``tool_hint`` (``text``
    quotes the error the tool sent), ``upstream`` (``text`` is a path into an upstream
    step's output, ``geo.results[0].name``), ``derived`` (``text`` is arithmetic over
    such paths, ``100 * {{quote.price}}``), or ``none`` (no usable source; ``text`` says
    what was wrong with the one given, if any).
    """

    kind: str
    text: str | None = None


@dataclass(frozen=True, slots=True)
class Grounding:
    """What the engine must check before sending a decision's parameters.

    ``claims`` holds one :class:`Claim` per top-level parameter the decision changed (a
    changed parameter without a claim is ungrounded). ``enforce`` False records the
    verdicts but sends anyway (``grounded_corrections`` off).
    """

    claims: dict[str, Claim]
    enforce: bool = True


@dataclass(frozen=True, slots=True)
class Decision:
    """Try the step again with ``params`` (produced by ``layer``) after ``delay_s``.

    The runner passes a decision whole to the next attempt: the parameters go through
    coercion and validation again, then, when ``grounding`` is set, every claimed source
    is checked against the value that would be sent (an unverifiable value is not sent);
    the rest is recorded on the attempt.
    """

    params: dict[str, Any]
    layer: Layer
    delay_s: float = 0.0
    analysis: str | None = None
    note: str | None = None
    grounding: Grounding | None = None


@dataclass(frozen=True, slots=True)
class GiveUp:
    """Stop trying: the step fails, ``reason`` is added to the final error's details."""

    reason: str


@dataclass(slots=True)
class StepState:
    """What a handler may look at: the step, its capability and settings, its attempts
    so far, and the run it belongs to.

    ``params`` are the last parameters tried (after coercion); ``counters`` count uses
    per layer; ``notes`` is scratch space where a layer leaves its verdict for later ones.
    """

    step: Step
    capability: Capability
    plan: ValidatedPlan
    run: RunState
    services: RunServices
    settings: LayerSettings
    retry_policy: RetryPolicy
    observation: StepObservation | None = None
    prepared: PreparedCapability | None = None
    """The capability's compiled checks (coercer, validator), looked up once per step."""
    attempts: list[Attempt] = field(default_factory=list)
    params: dict[str, Any] | None = None
    counters: dict[str, int] = field(default_factory=dict)
    notes: dict[str, Any] = field(default_factory=dict)
    deadline: float | None = None
    """The step's deadline in event-loop time (a wait that ends after it is pointless)."""

    @property
    def last_attempt(self) -> Attempt | None:
        return self.attempts[-1] if self.attempts else None

    def count(self, key: str) -> int:
        return self.counters.get(key, 0)

    def bump(self, key: str) -> int:
        self.counters[key] = self.counters.get(key, 0) + 1
        return self.counters[key]

    @property
    def retry_key(self) -> str:
        """The jitter key of this step's waits: stable across runs of the same plan."""
        return f"{self.step.tool}.{self.step.capability}:{self.step.id}"

    def report(self, fact: str, attributes: Mapping[str, Any] | None = None) -> None:
        """Tell the observer what a layer decided (see ``LAYER_EVENT_METRICS``)."""
        if self.observation is not None:
            self.observation.report(fact, attributes or {})

    def annotate_last_attempt(self, text: str) -> None:
        """Record ``text`` on the latest attempt, so the history says why the step stopped."""
        last = self.last_attempt
        if last is not None:
            last.note = f"{last.note}; {text}" if last.note else text

    def dependency_outputs(self) -> dict[str, Any]:
        """Outputs of the steps this one depends on, direct and transitive, and of the
        earlier runs' steps it refers to (``run:N.step``: a session's follow-up)."""
        # ancestors() rather than the plan's own order: a repair plan's steps depend on
        # steps completed in an earlier round, which are not part of its order
        outputs = self.run.outputs
        found = {sid: outputs[sid] for sid in sorted(self.plan.ancestors(self.step.id))
                 if sid in outputs}
        earlier = self.services.earlier_outputs
        if earlier:
            for _, ref in self.step.references():
                if ref.earlier and ref.step_id in earlier:
                    found[ref.step_id] = earlier[ref.step_id]
        return found

    @property
    def outputs(self) -> Mapping[str, Any]:
        """What a reference of this step binds to: the run's outputs, and the session's
        earlier outputs (``run:N.step``) when the run has a session."""
        earlier = self.services.earlier_outputs
        return ChainMap(self.run.outputs, earlier) if earlier else self.run.outputs

    @property
    def is_independent(self) -> bool:
        return not self.plan.dependencies(self.step.id)


class RecoveryHandler(Protocol):
    """Looks at a failed attempt and returns a decision, a give-up, or None (not mine).

    A handler may also define ``observe(state, attempt) -> None`` (sync); the step runner
    calls it after every attempt, success included, so a layer can report whether the
    parameters it produced worked.
    """

    async def decide(self, state: StepState, error: StepError) -> Decision | GiveUp | None: ...


async def ask_handlers(
    handlers: list[RecoveryHandler], state: StepState, error: StepError
) -> Decision | GiveUp | None:
    """The decide stage: ask each handler in order; the first answer wins.

    Once a budget has stopped the run, no handler is asked: the step tries nothing more.
    """
    for handler in handlers:
        stopped = state.services.budget.stop_reason()
        if stopped is not None:
            return GiveUp(stopped)
        decision = await handler.decide(state, error)
        if decision is not None:
            return decision
    return None


def observe_attempt(handlers: list[RecoveryHandler], state: StepState, attempt: Attempt) -> None:
    """Tell every handler that has an ``observe`` hook about a finished attempt."""
    for handler in handlers:
        hook = getattr(handler, "observe", None)
        if hook is not None:
            hook(state, attempt)
