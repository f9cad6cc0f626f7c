"""Plans: the DAG of tool calls a planner produces, its references, and its validation.

A parameter value may refer to an upstream step's output with ``{{step_id.path}}``
(dots and ``[index]``, e.g. ``{{geo.results[0].lat}}``). A reference makes the step
depend on the step it names; ``depends_on`` adds pure ordering. A value that is exactly
one reference keeps the JSON type of what it points at; a reference inside a longer
string is interpolated as text.

In a session, ``{{run:N.step_id.path}}`` refers to step ``step_id`` of the session's
run ``N`` (see :mod:`orchestration.sessions`): its ``step_id`` is the key
``run:N.step_id`` of that earlier output, checked against the outputs the run may use
(``earlier``), and it makes no edge — the earlier run has finished.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Container, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from orchestration._json import DEFAULT_MAX_DEPTH, unencodable
from orchestration.catalog import Catalog
from orchestration.errors import CatalogError, ConfigError, PlanIssue, PlanValidationError
from orchestration.retry_policy import check_overrides

if TYPE_CHECKING:
    import networkx as nx

__all__ = [
    "EARLIER_RUN_PREFIX",
    "REFERENCE_RE",
    "STEP_ID_PATTERN",
    "CheckedSteps",
    "ParsedText",
    "Plan",
    "Reference",
    "Step",
    "ValidatedPlan",
    "find_references",
    "iter_strings",
    "parse_references",
    "path_index",
    "same_step",
    "step_issues",
    "validate_plan",
    "whole_reference"
]

STEP_ID_PATTERN = r"[A-Za-z_][A-Za-z0-9_-]*"
MAX_INDEX_DIGITS = 9
"""A list index in a reference has at most this many digits: a longer one names no list
anyone has, and turning thousands of digits into an int is refused by Python itself."""
_INDEX = "[0-9]{1," + str(MAX_INDEX_DIGITS) + "}"
_SEGMENT = r"(?:\.[A-Za-z0-9_-]+|\[" + _INDEX + r"\])"
EARLIER_RUN_PREFIX = r"run:[0-9]{1,6}\."
"""What names a step of an earlier run of the session: ``run:2.`` before the step id."""
REFERENCE_RE = re.compile(r"\{\{\s*((?:" + EARLIER_RUN_PREFIX + r")?" + STEP_ID_PATTERN + r")("
                          + _SEGMENT + r"*)\s*\}\}")
_WHOLE_REFERENCE_RE = re.compile(r"^\s*" + REFERENCE_RE.pattern + r"\s*$")
_PATH_PART_RE = re.compile(r"\.([A-Za-z0-9_-]+)|\[(" + _INDEX + r")\]")
_ANY_BRACES_RE = re.compile(r"\{\{(.*?)\}\}")
_LONG_INDEX_RE = re.compile(r"\[[0-9]{" + str(MAX_INDEX_DIGITS + 1) + "}")


@dataclass(frozen=True)
class Reference:
    """A parsed ``{{step_id.path}}``: the step it names and the path into its output."""

    step_id: str
    path: tuple[str | int, ...]
    text: str

    @property
    def earlier(self) -> bool:
        """It names an earlier run's output (``run:N.step``), not a step of this plan."""
        return self.step_id.startswith("run:")

    @property
    def dotted(self) -> str:
        out = self.step_id
        for part in self.path:
            out += f"[{part}]" if isinstance(part, int) else f".{part}"
        return out


def path_index(part: str | int) -> int | None:
    """The list index a path segment names — ``[3]``, or a field spelled with digits only
    (``.3``) — or None when it names none (too many digits included)."""
    if isinstance(part, int):
        return part
    if part.isascii() and part.isdigit() and len(part) <= MAX_INDEX_DIGITS:
        return int(part)
    return None


def _parse_path(text: str) -> tuple[str | int, ...]:
    return tuple(
        m.group(1) if m.group(1) is not None else int(m.group(2))
        for m in _PATH_PART_RE.finditer(text)
    )


_CACHED_TEXT_CHARS = 1024
"""Reference strings up to this long are parsed once per process (see
:func:`_references_in`); a longer one is parsed each time it is read."""


@functools.lru_cache(maxsize=4096)
def _cached_references(text: str) -> tuple[Reference, ...]:
    return tuple(Reference(m.group(1), _parse_path(m.group(2)), m.group(0))
                 for m in REFERENCE_RE.finditer(text))


def _references_in(text: str) -> tuple[Reference, ...]:
    """The references of ``text``, parsed once: a plan's steps are read for references by
    validation, by the streamed plan's checks, by the early start and by binding, and the
    same strings come back run after run (references are immutable, so they are shared)."""
    if "{{" not in text:
        return ()
    if len(text) > _CACHED_TEXT_CHARS:
        return _cached_references.__wrapped__(text)
    return _cached_references(text)


def parse_references(text: str) -> list[Reference]:
    """Every reference in a string, in order."""
    return list(_references_in(text))


def whole_reference(text: str) -> Reference | None:
    """The reference if ``text`` is exactly one reference (keeps its JSON type); parsed
    once per process, as :func:`_references_in` (a step's dependencies, its checks and
    its binding each ask)."""
    if "{{" not in text:
        return None
    if len(text) > _CACHED_TEXT_CHARS:
        return _whole_reference(text)
    return _cached_whole_reference(text)


def _whole_reference(text: str) -> Reference | None:
    m = _WHOLE_REFERENCE_RE.match(text)
    return Reference(m.group(1), _parse_path(m.group(2)), m.group(0).strip()) if m else None


_cached_whole_reference = functools.lru_cache(maxsize=4096)(_whole_reference)


def iter_strings(value: Any, path: str = "$") -> Iterator[tuple[str, str]]:
    """Every string inside a JSON value with its JSON path (where references can live)."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from iter_strings(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from iter_strings(item, f"{path}[{index}]")


def find_references(params: Any) -> list[tuple[str, Reference]]:
    """``(json_path, reference)`` for every reference in a parameter tree."""
    texts: list[tuple[str, str]] = []
    _reference_texts(params, "$", texts)  # only strings that may hold one get a path
    return [(path, ref) for path, text in texts for ref in _references_in(text)]


class Step(BaseModel):
    """One tool call in a plan."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    id: str = Field(pattern="^" + STEP_ID_PATTERN + "$", max_length=128)
    tool: str
    capability: str
    params: dict[str, Any] = Field(default_factory=dict)
    depends_on: list[str] = Field(default_factory=list)
    description: str | None = None
    retry: dict[str, Any] | None = Field(
        default=None,
        description="Per-call overrides of the retry policy (most specific wins over the "
        "capability's and the global settings), e.g. {'max_attempts': 5}.",
    )
    timeout_s: float | None = Field(
        default=None, gt=0,
        description="Timeout of each call of this step, instead of the capability's "
        "(still cut to the step's deadline).",
    )
    requires_approval: bool | None = Field(
        default=None,
        description="True: a person approves this step's call before it is sent, even if "
        "its capability does not ask for it (a step cannot waive a capability's approval).",
    )

    def references(self) -> list[tuple[str, Reference]]:
        return find_references(self.params)

    def dependencies(self) -> set[str]:
        """Steps this one waits for: explicit ``depends_on`` plus every step it references."""
        return set(self.depends_on) | {ref.step_id for _, ref in self.references()
                                       if not ref.earlier}


class Plan(BaseModel):
    """A plan as the planner wrote it: a list of steps (order is not significant)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    steps: list[Step]
    reasoning: str | None = None


class ParsedText:
    """The references of one parameter string, parsed once: the whole-value reference it
    is (if it is exactly one), else each reference it holds by its text."""

    __slots__ = ("by_text", "whole")

    def __init__(self, text: str) -> None:
        self.whole = whole_reference(text)
        self.by_text = {} if self.whole is not None else {
            r.text: r for r in _references_in(text)}


class ValidatedPlan:
    """A plan that passed :func:`validate_plan`, with its DAG ready for scheduling.

    The DAG is kept as two plain maps, ``upstream`` and ``downstream`` (each step's
    direct dependencies and dependents, in plan order), which is all that running a plan
    asks of it. Their values are tuples of ids, which the collector stops tracking the
    first time it meets them (and the maps at their first full collection): a plan's DAG
    adds next to nothing to the full collections that thousands of runs in flight cause.
    ``graph`` — the same DAG as a networkx ``DiGraph``, for the graph algorithms of a
    repair and the CLI's drawing — is built when first asked for: a ``DiGraph`` is about
    twenty objects per plan for the collector to walk again and again, and networkx
    itself tens of thousands more from the moment it is imported.

    ``parsed`` holds the parameter strings that carry references, parsed when the plan was
    validated, so binding a step does not parse them again (an unknown string is parsed
    where it is bound: a layer's new parameters).
    """

    def __init__(self, plan: Plan, graph: nx.DiGraph | None = None, *,
                 order: list[str] | None = None, parsed: dict[str, ParsedText] | None = None,
                 upstream: dict[str, tuple[str, ...]] | None = None) -> None:
        """The DAG is ``upstream`` (every step's dependencies, steps in plan order) or, for
        a plan made from a graph (a repair's), ``graph``'s edges."""
        self.plan = plan
        self._graph = graph
        if upstream is None:
            upstream = ({node: tuple(graph.pred[node]) for node in graph}
                        if graph is not None else {})
        self.upstream: dict[str, tuple[str, ...]] = upstream
        """Each step's direct dependencies."""
        self.downstream: dict[str, tuple[str, ...]] = (
            {node: tuple(graph.succ[node]) for node in graph} if graph is not None
            else _dependents(upstream))
        """Each step's direct dependents, in plan order."""
        self.steps: dict[str, Step] = {s.id: s for s in plan.steps}
        if order is None:
            order = _topological_order(upstream, self.downstream)
            if order is None:
                raise ValueError("the plan's steps depend on each other in a cycle")
        self.order: list[str] = order
        self.position: dict[str, int] = {sid: i for i, sid in enumerate(self.order)}
        """Each step's index in ``order``: sorts any set of steps into plan order."""
        self.parsed: dict[str, ParsedText] = parsed if parsed is not None else {}

    @property
    def graph(self) -> nx.DiGraph:
        """The DAG as a networkx ``DiGraph`` (built on first use, then kept up to date)."""
        if self._graph is None:
            import networkx as nx  # only a repair or a drawing needs it

            graph: nx.DiGraph = nx.DiGraph()
            graph.add_nodes_from(self.upstream)
            graph.add_edges_from((dep, node) for node, deps in self.upstream.items()
                                 for dep in deps)
            self._graph = graph
        return self._graph

    @classmethod
    def growing(cls) -> ValidatedPlan:
        """An empty plan that :meth:`add_step` grows (the early steps of a streamed plan)."""
        return cls(Plan(steps=[]), order=[], upstream={})

    def add_step(self, step: Step, dependencies: Iterable[str]) -> None:
        """Add ``step``, whose ``dependencies`` are all in the plan already: the graph stays
        acyclic and ``order`` stays a topological order without sorting again.

        For the steps of a plan that is still streaming, which start as they arrive (each
        after the steps it depends on): the runners of those steps share one plan that
        grows, rather than each getting the part of the plan it depends on made anew
        (work that grew with the plan for every step). ``plan`` — the plan as the planner
        wrote it — is not changed: a plan grown this way is run, never recorded (the
        whole answer is validated and recorded once it has arrived).
        """
        upstream = tuple(dict.fromkeys(dependencies))
        unknown = [d for d in upstream if d not in self.steps]
        if unknown:
            raise ValueError(f"step {step.id!r} depends on {', '.join(unknown)}, which the "
                             "plan does not have yet")
        self.steps[step.id] = step
        self.upstream[step.id] = upstream
        self.downstream[step.id] = ()
        for dep in upstream:
            self.downstream[dep] += (step.id,)  # a few dependents each: a new tuple is cheap
        if self._graph is not None:
            self._graph.add_node(step.id)
            self._graph.add_edges_from((d, step.id) for d in upstream)
        self.position[step.id] = len(self.order)
        self.order.append(step.id)

    def dependencies(self, step_id: str) -> list[str]:
        """Direct upstream steps."""
        return list(self.upstream[step_id])

    def ancestors(self, step_id: str) -> set[str]:
        """Direct and transitive upstream steps."""
        return _reachable(self.upstream, step_id)

    def descendants(self, step_id: str) -> set[str]:
        return _reachable(self.downstream, step_id)

    def critical_path_length(self, weight: dict[str, float]) -> float:
        """Longest weighted path through the DAG (the lower bound of any makespan)."""
        best: dict[str, float] = {}
        for node in self.order:
            preds = [best[p] for p in self.upstream[node]]
            best[node] = weight.get(node, 0.0) + (max(preds) if preds else 0.0)
        return max(best.values(), default=0.0)

    def to_dict(self) -> dict[str, Any]:
        return self.plan.model_dump(mode="json", exclude_none=True)


def _dependents(upstream: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
    """Each step's direct dependents, in the order of ``upstream``'s steps."""
    downstream: dict[str, list[str]] = {node: [] for node in upstream}
    for node, deps in upstream.items():
        for dep in deps:
            downstream[dep].append(node)
    return {node: tuple(found) for node, found in downstream.items()}


def _reachable(edges: dict[str, tuple[str, ...]], start: str) -> set[str]:
    """The steps reached from ``start`` (not itself) following ``edges``."""
    seen: set[str] = set()
    stack = list(edges[start])
    while stack:
        node = stack.pop()
        if node not in seen:
            seen.add(node)
            stack.extend(edges[node])
    return seen


def same_step(a: Step | None, b: Step | None) -> bool:
    """Whether two steps are the same call: every field equal (a step has no extra or
    private attributes, so its fields are its ``__dict__``; pydantic's ``==`` says the
    same at ten times the cost, which a 1,000-step streamed plan paid twice per step)."""
    if a is None or b is None:
        return a is b
    return a is b or (type(a) is type(b) and a.__dict__ == b.__dict__)


def _topological_order(upstream: dict[str, tuple[str, ...]],
                       downstream: dict[str, tuple[str, ...]]) -> list[str] | None:
    """The steps in a topological order, or None when they form a cycle.

    networkx's order (its ``topological_sort``: generation by generation, each in the
    order its steps were reached, the first in plan order), so a plan runs and is
    recorded in the same order it always was."""
    waiting = {node: len(deps) for node, deps in upstream.items() if deps}
    generation = [node for node, deps in upstream.items() if not deps]
    order: list[str] = []
    while generation:
        order.extend(generation)
        reached: list[str] = []
        for node in generation:
            for child in downstream[node]:
                waiting[child] -= 1
                if not waiting[child]:
                    reached.append(child)
                    del waiting[child]
        generation = reached
    return None if waiting else order


@dataclass
class CheckedSteps:
    """Steps that passed :func:`step_issues` before their plan was whole, each with the
    edges found then, and the reference strings parsed on the way (what
    :func:`validate_plan` need not do again for them)."""

    steps: dict[str, tuple[Step, list[str]]]
    parsed: dict[str, ParsedText]
    reused: set[str] = field(default_factory=set)
    """The ids :func:`validate_plan` found unchanged in the whole plan and did not check
    again."""

    def unchanged(self, step: Step) -> bool:
        """Whether ``step`` and every step it depends on were checked before and are
        unchanged in the plan :func:`validate_plan` last read (checks that look at a
        step's upstream steps need not run again for it)."""
        prior = self.steps.get(step.id)
        return (step.id in self.reused and prior is not None
                and all(d in self.reused for d in prior[1]))


def _unknown_braces(text: str) -> list[str]:
    """``{{...}}`` fragments that are not well-formed references."""
    return [
        m.group(0) for m in _ANY_BRACES_RE.finditer(text) if not REFERENCE_RE.fullmatch(m.group(0))
    ]


def _malformed_reference(path: str, fragment: str) -> str:
    shown = fragment if len(fragment) <= 80 else fragment[:60] + "…" + fragment[-10:]
    if _LONG_INDEX_RE.search(fragment):
        return (f"param {path}: malformed reference {shown!r}: a list index has at most "
                f"{MAX_INDEX_DIGITS} digits")
    return f"param {path}: malformed reference {shown!r} (expected {{{{step_id.field}}}})"


def _reference_texts(value: Any, path: str, out: list[tuple[str, str]]) -> None:
    """Append ``(json_path, text)`` for every string in ``value`` that may hold a reference
    (it contains ``{{``), as :func:`iter_strings` walks them; JSON paths are built only
    for those."""
    if isinstance(value, dict):
        for key, item in value.items():
            if type(item) is str:
                if "{{" in item:
                    out.append((f"{path}.{key}", item))
            elif isinstance(item, dict | list | str):
                _reference_texts(item, f"{path}.{key}", out)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            if type(item) is str:
                if "{{" in item:
                    out.append((f"{path}[{index}]", item))
            elif isinstance(item, dict | list | str):
                _reference_texts(item, f"{path}[{index}]", out)
    elif isinstance(value, str) and "{{" in value:
        out.append((path, value))


def step_issues(
    step: Step, ids: Container[str], catalog: Catalog, issues: list[PlanIssue], *,
    max_depth: int = DEFAULT_MAX_DEPTH, parsed: dict[str, ParsedText] | None = None,
    check_encoding: bool = True, earlier: Container[str] = (),
) -> list[str]:
    """The checks of one step given the ids of its plan's steps (``ids``): every issue is
    added to ``issues``; returns the steps it depends on that exist (its edges, references
    first, then ``depends_on``, in the order written).

    What :func:`validate_plan` checks per step — and all a streamed plan's step can be
    checked for before the rest of the plan has arrived (see ``planners._plan_stream``).
    ``parsed`` collects the reference strings parsed on the way (shared across a plan, so
    a string repeated in many steps is parsed once and binding reuses it);
    ``check_encoding=False`` skips the per-step encoder pass when the caller has already
    proved the whole plan encodable in one. ``earlier``: the ``run:N.step`` keys of the
    session's earlier outputs a reference may name.
    """
    upstream: list[str] = []
    if not catalog.has(step.tool, step.capability):
        try:
            catalog.get(step.tool, step.capability)
        except CatalogError as exc:
            issues.append(PlanIssue(step.id, str(exc)))
    if check_encoding:
        problem = unencodable(step.params, max_depth)
        if problem is not None:
            issues.append(PlanIssue(step.id, f"param {problem[0]}: {problem[1]}"))
            return upstream  # nothing else can be read safely from these parameters
    if parsed is None:
        parsed = {}
    texts: list[tuple[str, str]] = []
    _reference_texts(step.params, "$", texts)
    for path, text in texts:
        found = parsed.get(text)
        if found is None:
            found = parsed[text] = ParsedText(text)
        if found.whole is None:  # a text that is one reference has no other braces
            for bad in _unknown_braces(text):
                issues.append(PlanIssue(step.id, _malformed_reference(path, bad)))
        refs = (found.whole,) if found.whole is not None else _references_in(text)
        for ref in refs:
            if ref.earlier:
                if ref.step_id not in earlier:
                    issues.append(PlanIssue(step.id, _unknown_earlier(path, ref, earlier)))
            elif ref.step_id == step.id:
                issues.append(PlanIssue(step.id, f"param {path} refers to its own step"))
            elif ref.step_id not in ids:
                issues.append(
                    PlanIssue(step.id, f"param {path} refers to unknown step {ref.step_id!r}")
                )
            else:
                upstream.append(ref.step_id)
    if step.retry:
        try:
            check_overrides(step.retry, source="retry")
        except ConfigError as exc:
            issues.append(PlanIssue(step.id, str(exc)))
    for dep in step.depends_on:
        if dep == step.id:
            issues.append(PlanIssue(step.id, "depends_on names the step itself"))
        elif dep not in ids:
            issues.append(PlanIssue(step.id, f"depends_on names unknown step {dep!r}"))
        else:
            upstream.append(dep)
    return upstream


def _unknown_earlier(path: str, ref: Reference, earlier: Container[str]) -> str:
    known = sorted(k for k in earlier if isinstance(k, str)) if isinstance(
        earlier, Iterable) else []
    listed = f" (known: {', '.join(known[:20])})" if known else " (this run has none)"
    return (f"param {path} refers to {ref.step_id!r}, which is not an output of an earlier "
            f"run of this session{listed}")


def validate_plan(
    plan: Plan, catalog: Catalog, *, max_steps: int = 1000, max_depth: int = DEFAULT_MAX_DEPTH,
    earlier: Container[str] = (),
    checked: CheckedSteps | None = None,
) -> ValidatedPlan:
    """Check a plan against the catalog and build its DAG; raise with *every* issue found.

    Checks: non-empty and within ``max_steps``, unique ids, known tool/capability,
    parameters JSON can carry (finite numbers, valid text, at most ``max_depth`` levels),
    well-formed references to existing steps (not to itself), ``depends_on`` naming
    existing steps, and no cycle (the error names the cycle); a ``{{run:N.step}}``
    reference must name one of ``earlier`` (the session's earlier outputs).

    ``checked`` are steps that already passed :func:`step_issues` (a streamed plan's
    steps, checked as they arrived): a step of ``plan`` equal to one of them is not
    checked again — it passed with fewer steps known than the whole plan has, so it
    passes with all of them — and its edges are the ones found then. Everything about
    the plan as a whole (ids, size, encoding, cycles) is checked as always. (They were
    checked with the same ``earlier``: a streamed plan's reader is given it.)
    """
    issues: list[PlanIssue] = []
    steps = plan.steps
    if not steps:
        raise PlanValidationError([PlanIssue(None, "the plan has no steps")])
    if len(steps) > max_steps:
        raise PlanValidationError(
            [PlanIssue(None, f"the plan has {len(steps)} steps; the limit is {max_steps}")]
        )
    ids: set[str] = set()
    for step in steps:
        if step.id in ids:
            issues.append(PlanIssue(step.id, "duplicate step id"))
        ids.add(step.id)
    # every step's parameters as one JSON document: one encoder pass for the whole plan;
    # only when it refuses is each step checked, to name the step and the value
    all_encodable = unencodable([s.params for s in steps], max_depth + 1) is None
    edges: dict[str, tuple[str, ...]] = {}
    parsed: dict[str, ParsedText] = checked.parsed if checked is not None else {}
    before = checked.steps if checked is not None else {}
    for step in steps:
        prior = before.get(step.id)
        if prior is not None and same_step(prior[0], step):
            upstream = prior[1]
            checked.reused.add(step.id)  # type: ignore[union-attr]
        else:
            upstream = step_issues(step, ids, catalog, issues, max_depth=max_depth,
                                   parsed=parsed, check_encoding=not all_encodable,
                                   earlier=earlier)
        # a duplicate id's edges join the first one's, as a graph's node would
        known = edges.get(step.id, ())
        edges[step.id] = (*known, *(dep for dep in dict.fromkeys(upstream) if dep not in known))
    order: list[str] | None = None
    if not issues:
        # one topological sort both proves the plan acyclic and gives the order;
        # networkx runs only to name a cycle known to exist
        order = _topological_order(edges, _dependents(edges))
        if order is None:
            import networkx as nx  # only to name the cycle

            cycle = nx.find_cycle(ValidatedPlan(Plan(steps=[]), order=[], upstream=edges).graph)
            names = [edge[0] for edge in cycle] + [cycle[0][0]]
            issues.append(PlanIssue(None, "the plan has a cycle: " + " -> ".join(names)))
    if issues:
        raise PlanValidationError(issues)
    return ValidatedPlan(plan, order=order, parsed=parsed, upstream=edges)
