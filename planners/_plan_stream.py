"""Reading a plan while it streams: each step once it is complete and valid on its own.

The planner feeds the pieces of a streamed plan answer to a :class:`PlanStream`, which
hands back the steps that may be acted on now, in an order where every step comes after
the steps it depends on. A step is handed back when

* its JSON object has closed (:class:`~planners._step_scanner.StepScanner`) and it has
  the shape of a step;
* every step it depends on — ``depends_on`` and every ``{{step.path}}`` of its
  parameters — was handed back before it. A step that uses a step not yet seen (plan
  order is not significant) waits for it; one whose dependency never arrives, or that
  is part of a cycle, is never handed back (the final validation names the problem);
* it passes the per-step checks the whole plan will (:func:`~orchestration.plan.step_issues`,
  the code :func:`~orchestration.plan.validate_plan` runs for each step: known tool and
  capability, parameters JSON can carry, well-formed references to steps that exist,
  retry overrides; and, with ``check_references``, reference paths the upstream output
  schema has). Its dependencies were checked before it, so the cost is the step's own
  size, not the plan's.

A step that fails any check means the whole answer will be rejected: :attr:`doomed`
says why, and nothing more is handed back for this answer. Nothing here decides whether
the plan is accepted — the whole answer is parsed and validated at the end, as without
streaming; this only lets work start earlier.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from pydantic import ValidationError

from orchestration._json import UnreadableJSON, decode
from orchestration._text import describe_validation_error
from orchestration.catalog import Catalog
from orchestration.errors import PlanIssue, PlanValidationError
from orchestration.plan import CheckedSteps, Step, step_issues
from planners._references import check_reference_paths
from planners._step_scanner import ScannedStep, StepScanner

__all__ = ["PlanStream", "StepListener"]


_HOLD_MAX_CHARS = 4096
"""Held text past this is scanned anyway: the scanner's bounds (an element too long, too
deep) then act on an answer that never closes a brace, and memory stays bounded."""


class StepListener(Protocol):
    """Who acts on the steps of a plan while it streams (the engine starts them early).

    ``step_ready`` gets each step (and the steps it depends on) the moment it is complete
    and valid on its own, every
    step after those it depends on. ``discard`` says that the work done for this answer
    must be thrown away — the answer was rejected, failed, or cannot be accepted — with
    the reason; steps of the next attempt may follow it.
    """

    def step_ready(self, step: Step, dependencies: set[str]) -> None: ...

    async def discard(self, reason: str) -> None: ...


class PlanStream:
    """The steps of one streamed plan answer, each handed back once it may be acted on."""

    def __init__(self, catalog: Catalog, *, max_steps: int, max_depth: int,
                 check_references: bool, earlier: Mapping[str, Any] | None = None) -> None:
        self.catalog = catalog
        self.earlier: Mapping[str, Any] = earlier or {}
        """The session's earlier outputs a ``{{run:N.step}}`` reference may name."""
        self.max_depth = max_depth
        self.check_references = check_references
        self.scanner = StepScanner(max_depth=max_depth, max_steps=max_steps)
        self.doomed: str | None = None
        """Why the answer cannot be accepted, once a step showed it (None until then)."""
        self._accepted: dict[str, Step] = {}
        self.checked = CheckedSteps({}, {})
        """The steps handed back, with their edges: the final validation of the whole
        answer does not check them again (``validate_plan(checked=...)``)."""
        self._seen: set[str] = set()
        self._waiting: dict[str, tuple[Step, set[str]]] = {}  # with its dependencies
        self._held: list[str] = []  # pieces not scanned yet (no closing brace among them)
        self._held_chars = 0

    def feed(self, piece: str) -> list[Step]:
        """The steps that ``piece`` (the next text of the answer) made ready, in order.

        A step can only complete on a closing brace, so pieces without one are held and
        scanned together with the next piece that has one: a model's stream is a few
        characters a piece, and the scanner's cost is mostly per call, not per character.
        (Text still held when the answer ends is read by the final parse, which is what
        accepts or refuses the plan.)
        """
        ready: list[Step] = []
        if self.doomed is not None:
            return ready
        if "}" not in piece and self._held_chars + len(piece) <= _HOLD_MAX_CHARS:
            self._held.append(piece)
            self._held_chars += len(piece)
            return ready
        if self._held:
            self._held.append(piece)
            piece = "".join(self._held)
            self._held.clear()
            self._held_chars = 0
        for scanned in self.scanner.feed(piece):
            self._take(scanned, ready)
            if self.doomed is not None:
                return []
        return ready

    @property
    def accepted(self) -> list[str]:
        """The ids of the steps handed back so far."""
        return list(self._accepted)

    def dependencies(self, step_id: str) -> set[str]:
        """The steps a step handed back depends on (found when it was checked)."""
        return set(self.checked.steps[step_id][1])

    def _take(self, scanned: ScannedStep, ready: list[Step]) -> None:
        where = f"step {scanned.index + 1} of the plan"
        try:
            data = (scanned.value if scanned.decoded else
                    decode(scanned.text, max_depth=max(1, self.max_depth - scanned.enclosing)))
            step = Step.model_validate(data)
        except UnreadableJSON as exc:
            self.doomed = f"{where} cannot be read: {exc}"
            return
        except ValidationError as exc:
            self.doomed = (f"{where} does not have the shape of a step: "
                           + describe_validation_error(exc))
            return
        if step.id in self._seen:
            self.doomed = f"step id {step.id!r} is used twice"
            return
        self._seen.add(step.id)
        self._waiting[step.id] = (step, step.dependencies())
        self._release(ready)

    def _release(self, ready: list[Step]) -> None:
        """Hand back every waiting step whose dependencies have all been handed back."""
        progress = True
        while progress and self.doomed is None:
            progress = False
            for step_id, (step, dependencies) in list(self._waiting.items()):
                if step_id not in dependencies and not dependencies <= self._accepted.keys():
                    continue
                del self._waiting[step_id]
                problem = self._problem(step, dependencies)
                if problem is not None:
                    self.doomed = problem
                    return
                self._accepted[step_id] = step
                ready.append(step)
                progress = True

    def _problem(self, step: Step, dependencies: set[str]) -> str | None:
        """What is wrong with ``step`` given the steps accepted before it, or None: the
        per-step checks of :func:`~orchestration.plan.validate_plan` (the same code),
        and the reference paths its dependencies' output schemas allow."""
        issues: list[PlanIssue] = []
        edges = step_issues(step, _KnownIds(self._accepted, step.id), self.catalog, issues,
                            max_depth=self.max_depth, parsed=self.checked.parsed,
                            earlier=self.earlier)
        if not issues and self.check_references:
            upstream = {d: self._accepted[d] for d in dependencies if d in self._accepted}
            issues = check_reference_paths([step], self.catalog, known_steps=upstream,
                                           outputs=self.earlier)
        if issues:
            return str(PlanValidationError(issues))
        self.checked.steps[step.id] = (step, edges)
        return None


class _KnownIds:
    """The ids a step may name: the steps accepted before it, and its own (which the
    checks report as a self-reference). A view, not a copy: copying the accepted ids for
    every step made a streamed plan's checks grow with the square of its length."""

    __slots__ = ("_accepted", "_own")

    def __init__(self, accepted: Mapping[str, object], own: str) -> None:
        self._accepted = accepted
        self._own = own

    def __contains__(self, step_id: object) -> bool:
        return step_id == self._own or step_id in self._accepted
