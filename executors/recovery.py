"""The seam between a failed attempt and the defense layers.

After an attempt fails, the step runner asks an ordered chain of
:class:`RecoveryHandler` s what to do. The first handler that returns a
:class:`Decision` wins; when none does, the step fails with its whole history. Resilience
(same parameters after a transport fault), layer 3 (validation feedback) and layer 4
(semantic retry) are handlers; a service can add its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from orchestration.catalog import Capability
from orchestration.context import RunContext
from orchestration.plan import Step, ValidatedPlan
from orchestration.protocol import StepError
from orchestration.result import Attempt, Layer


@dataclass
class Decision:
    """Try the step again with ``params`` (produced by ``layer``) after ``delay_s``."""

    params: dict[str, Any]
    layer: Layer
    delay_s: float = 0.0
    analysis: str | None = None
    note: str | None = None


@dataclass
class GiveUp:
    """Stop trying: the step fails, ``reason`` is added to the final error's details."""

    reason: str


@dataclass
class StepState:
    """What a handler may look at: the step, its capability, its attempts so far."""

    step: Step
    capability: Capability
    ctx: RunContext
    plan: ValidatedPlan
    attempts: list[Attempt] = field(default_factory=list)
    params: dict[str, Any] | None = None  # the last parameters tried (after coercion)
    counters: dict[str, int] = field(default_factory=dict)  # uses per layer/handler
    notes: dict[str, Any] = field(default_factory=dict)  # scratch space for handlers

    @property
    def last_attempt(self) -> Attempt | None:
        return self.attempts[-1] if self.attempts else None

    def count(self, key: str) -> int:
        return self.counters.get(key, 0)

    def bump(self, key: str) -> int:
        self.counters[key] = self.counters.get(key, 0) + 1
        return self.counters[key]

    def dependency_outputs(self) -> dict[str, Any]:
        """Outputs of the steps this one depends on, direct and transitive."""
        # ancestors() rather than the plan's own order: a repair plan's steps depend on
        # steps completed in an earlier round, which are not part of its order
        return {
            sid: self.ctx.outputs[sid]
            for sid in sorted(self.plan.ancestors(self.step.id))
            if sid in self.ctx.outputs
        }

    @property
    def is_independent(self) -> bool:
        return not self.plan.dependencies(self.step.id)


class RecoveryHandler(Protocol):
    """Looks at a failed attempt and returns a decision, a give-up, or None (not mine).

    A handler may also define ``observe(state, attempt) -> None`` (sync); the step runner
    calls it after every attempt, success included, so a layer can tell whether the
    parameters it produced worked (its success/failure metrics and events).
    """

    async def decide(self, state: StepState, error: StepError) -> Decision | GiveUp | None: ...


def observe_attempt(handlers: list[RecoveryHandler], state: StepState, attempt: Attempt) -> None:
    """Tell every handler that has an ``observe`` hook about a finished attempt."""
    for handler in handlers:
        hook = getattr(handler, "observe", None)
        if hook is not None:
            hook(state, attempt)
