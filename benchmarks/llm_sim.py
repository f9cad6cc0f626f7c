"""A seeded LLM simulator for the recovery ablation: plans with the mistakes LLMs make.

It is a :class:`~orchestration.ScriptedLLM` callable. For a plan request it takes the
scenario's ground-truth plan and injects, at configurable rates, the error classes LLMs
make when they fill in parameters:

==================  ===============================================  ====================
kind                what the planner writes                          the fix needs
==================  ===============================================  ====================
``str_number``      ``"10"`` for 10, ``"2.5"`` for 2.5               schema + error
``str_bool``        ``"true"`` for true                              schema + error
``enum_case``       ``"eur"`` for ``"EUR"``, ``"Monday"``             schema + error
``json_array``      ``'["east", "west"]'`` (a string) for the array  schema + error
``placeholder``     0 or null where a reference to an upstream       query + upstream
                    output (a computed value) belongs                 outputs
``wrong_field``     ``{{ship.cost}}`` for ``{{ship.cost_usd}}``        upstream outputs (or
                                                                     a field list)
``unit_slip``       grams for kilograms, hours for minutes:          query + error
                    out of range
``name_typo``       ``"Microsfot"``: the tool answers NOT_FOUND        the tool's hint
                    with a did-you-mean hint
``malformed_json``  a plan that is not valid JSON                    the parse error
==================  ===============================================  ====================

The type-level kinds (the first four) happen more often when the planner prompt lacks
layer 1's type guidance; the simulator tells by comparing the prompt with prompts
rendered with guidance on and off (:func:`guidance_signature`).

It answers layer 3 (purpose ``validation_feedback``), layer 4 (``semantic_retry``) and
planner feedback correctly *only when the request contains what a model would need*
(the right-hand column, searched in ``request.prompt_text``). When that information is
missing it declines — or, with probability ``guess_rate``, guesses a plausible but wrong
value, as models do, which can turn a failure into a silently wrong answer.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from benchmarks.recovery_world import (
    ENTITY_PARAMS,
    UNIT_SLIPS,
    WRAPPED_TIMEOUT_CODE,
    WRONG_FIELD_NAMES,
    Scenario,
)
from orchestration import Catalog
from orchestration.llm.base import LLMRequest
from orchestration.plan import whole_reference

TYPE_KINDS = ("str_number", "str_bool", "enum_case", "json_array")
SEMANTIC_KINDS = ("placeholder", "wrong_field", "unit_slip", "name_typo")
ALL_KINDS = (*TYPE_KINDS, *SEMANTIC_KINDS, "malformed_json")
TRANSIENT_MARKERS = (WRAPPED_TIMEOUT_CODE, "SERVICE_UNAVAILABLE", "timed out", "overloaded")
"""What tells a model that the error it is shown is an infrastructure hiccup."""


@dataclass
class FaultMix:
    """Probabilities per opportunity (a parameter the kind applies to; per plan for JSON).

    Type-level kinds have two rates: with layer 1's type guidance in the prompt, and
    without it.
    """

    str_number: tuple[float, float] = (0.05, 0.20)
    str_bool: tuple[float, float] = (0.05, 0.20)
    enum_case: tuple[float, float] = (0.05, 0.20)
    json_array: tuple[float, float] = (0.06, 0.25)
    placeholder: float = 0.05
    wrong_field: float = 0.05
    unit_slip: float = 0.20
    name_typo: float = 0.05
    malformed_json: float = 0.05
    guess_rate: float = 0.2
    """When the information to fix a fault is missing, how often the model guesses."""

    def rate(self, kind: str, guidance: bool) -> float:
        value = getattr(self, kind)
        if isinstance(value, tuple):
            return value[0] if guidance else value[1]
        return float(value)

    def describe(self) -> str:
        parts = []
        for kind in ALL_KINDS:
            value = getattr(self, kind)
            if isinstance(value, tuple):
                parts.append(f"{kind} {value[0]:.0%} (without layer 1: {value[1]:.0%})")
            else:
                parts.append(f"{kind} {value:.0%}")
        return ", ".join(parts) + f"; guesses instead of declining {self.guess_rate:.0%}"


# --------------------------------------------------------------------------- evidence


def _squash(text: str) -> str:
    """Text without whitespace, so JSON printed compactly or pretty compares equal."""
    return re.sub(r"\s+", "", text)


@dataclass
class Evidence:
    """One piece of information a fix needs: any of ``needles`` (plain text) or
    ``patterns`` (regular expressions) found in the whitespace-free prompt."""

    what: str
    needles: list[str] = field(default_factory=list)
    patterns: list[str] = field(default_factory=list)

    def found(self, prompt_squashed: str) -> bool:
        return any(_squash(n) in prompt_squashed for n in self.needles) or any(
            re.search(p, prompt_squashed) for p in self.patterns)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


@dataclass
class Fault:
    """One injected mistake: where, what was written, what is right, what fixes it."""

    kind: str
    step_id: str
    param: str
    wrong: Any
    truth: Any  # the planner's correct value (a reference stays a reference)
    bound_truth: Any  # the value the correct parameter has once bound
    evidence: list[Evidence]
    guess: Any = None  # the wrong value a guessing model writes
    plan_time_fix: list[Evidence] | None = None  # what planner feedback must say to fix it

    def fixable(self, prompt_squashed: str) -> bool:
        return all(e.found(prompt_squashed) for e in self.evidence)


@dataclass
class RunScript:
    """What the simulated model decided for one run."""

    scenario: Scenario
    seed: str
    guidance: bool | None = None
    faults: list[Fault] = field(default_factory=list)
    malformed: bool = False
    had_malformed: bool = False  # any plan answer of the run was broken JSON
    fixed: set[tuple[str, str]] = field(default_factory=set)  # (step, param) fixed already
    plan_fixed: set[tuple[str, str]] = field(default_factory=set)  # fixed by plan feedback
    requests: int = 0
    guesses: int = 0  # wrong values the model made up when the information was missing


# ------------------------------------------------------------------------ guidance probe


@dataclass
class GuidanceSignature:
    """Lines only the prompt with type guidance has, and lines only the one without has."""

    on_only: list[str]
    off_only: list[str]

    @property
    def distinguishes(self) -> bool:
        return bool(self.on_only or self.off_only)

    def guidance_in(self, prompt: str) -> bool:
        """True when ``prompt`` looks like the prompt rendered with guidance on."""
        if not self.distinguishes:
            return True  # cannot tell: assume the default (on)
        on = sum(1 for line in self.on_only if line in prompt)
        off = sum(1 for line in self.off_only if line in prompt)
        on_share = on / len(self.on_only) if self.on_only else 0.0
        off_share = off / len(self.off_only) if self.off_only else 0.0
        return on_share >= off_share if self.on_only else off_share == 0.0


def guidance_signature(prompt_on: str, prompt_off: str) -> GuidanceSignature:
    def lines(text: str) -> set[str]:
        return {ln.strip() for ln in text.splitlines() if len(ln.strip()) >= 12}

    on, off = lines(prompt_on), lines(prompt_off)
    return GuidanceSignature(sorted(on - off), sorted(off - on))


# --------------------------------------------------------------------------- simulator

_QUERY_RE = re.compile(r"<<<QUERY\n(.*?)\nQUERY>>>", re.S)


class PlannerSimulator:
    """The callable behind :class:`ScriptedLLM` in the ablation (one run at a time).

    ``truth_params`` holds, per scenario and step, the ground-truth parameters once
    bound (what a model that understood everything would send).
    """

    def __init__(
        self,
        catalog: Catalog,
        scenarios: list[Scenario],
        truth_params: dict[str, dict[str, dict[str, Any]]],
        mix: FaultMix,
        signature: GuidanceSignature,
    ) -> None:
        self.catalog = catalog
        self.by_query = {s.query: s for s in scenarios}
        self.truth_params = truth_params
        self.mix = mix
        self.signature = signature
        self.run: RunScript | None = None
        self.unknown_purposes: dict[str, int] = {}

    def start_run(self, scenario: Scenario, seed: str) -> None:
        self.run = RunScript(scenario, seed)

    # --- entry point ------------------------------------------------------------------
    def __call__(self, request: LLMRequest) -> str | dict[str, Any]:
        run = self.run
        if run is None:
            raise RuntimeError("start_run() was not called")
        run.requests += 1
        if request.purpose in ("plan", "replan"):
            return self._plan_answer(run, request)
        if request.purpose == "validation_feedback":
            return self._layer3_answer(run, request)
        if request.purpose == "semantic_retry":
            return self._layer4_answer(run, request)
        self.unknown_purposes[request.purpose] = self.unknown_purposes.get(request.purpose, 0) + 1
        return {"answer": "n/a"}

    def _rng(self, run: RunScript, *parts: Any) -> random.Random:
        return random.Random("|".join(map(str, (run.seed, *parts))))

    # --- planning ---------------------------------------------------------------------
    def _plan_answer(self, run: RunScript, request: LLMRequest) -> str:
        text = request.prompt_text
        if request.purpose == "replan":
            return json.dumps({"steps": []})  # the ablation runs with replanning off
        attempt = sum(1 for m in request.messages if m.get("role") == "assistant") + 1
        if attempt == 1:
            match = _QUERY_RE.search(text)
            query = match.group(1).strip() if match else None
            scenario = self.by_query.get(query or "", run.scenario)
            run.scenario = scenario
            run.guidance = self.signature.guidance_in(text)
            run.faults = self._draw_faults(run)
            run.malformed = self._rng(run, "malformed", 1).random() < self.mix.malformed_json
        else:
            feedback = _squash(request.messages[-1].get("content", ""))
            for fault in run.faults:
                if fault.plan_time_fix and all(e.found(feedback) for e in fault.plan_time_fix):
                    run.plan_fixed.add((fault.step_id, fault.param))
            # a model told its JSON is broken usually fixes it; sometimes it breaks it again
            run.malformed = (self._rng(run, "malformed", attempt).random()
                             < self.mix.malformed_json / 4)
        run.had_malformed = run.had_malformed or run.malformed
        plan = self._faulted_plan(run)
        body = json.dumps(plan, ensure_ascii=False)
        return _break_json(body, self._rng(run, "break", attempt)) if run.malformed else body

    def _draw_faults(self, run: RunScript) -> list[Fault]:
        """One uniform draw per opportunity, in a fixed order: every configuration of the
        ablation meets the same draws, so a fault present with guidance is also present
        without it (its rate there is higher)."""
        scenario = run.scenario
        guidance = bool(run.guidance)
        truth = self.truth_params[scenario.name]
        faults: list[Fault] = []
        for step in scenario.plan["steps"]:
            cap = self.catalog.get(step["tool"], step["capability"])
            props = cap.input_schema.get("properties", {})
            for param, value in step["params"].items():
                schema = props.get(param, {})
                bound = truth[step["id"]][param]
                for kind in self._kinds_for(step, param, value, schema):
                    u = self._rng(run, step["id"], param, kind).random()
                    if u < self.mix.rate(kind, guidance):
                        faults.append(self._make_fault(kind, step, param, value, bound, schema,
                                                       scenario, run))
                        break
        return faults

    @staticmethod
    def _kinds_for(step: dict[str, Any], param: str, value: Any, schema: dict[str, Any]) -> list[str]:
        key = (step["tool"], step["capability"], param)
        kinds: list[str] = []
        if isinstance(value, str) and whole_reference(value) is not None:
            return ["placeholder", "wrong_field"]
        if key in UNIT_SLIPS:
            kinds.append("unit_slip")
        if key in ENTITY_PARAMS:
            kinds.append("name_typo")
        if isinstance(value, bool):
            kinds.append("str_bool")
        elif isinstance(value, int | float):
            kinds.append("str_number")
        elif isinstance(value, str) and "enum" in schema:
            kinds.append("enum_case")
        elif isinstance(value, list):
            kinds.append("json_array")
        return kinds

    def _make_fault(
        self, kind: str, step: dict[str, Any], param: str, value: Any, bound: Any,
        schema: dict[str, Any], scenario: Scenario, run: RunScript,
    ) -> Fault:
        sid = step["id"]
        # the schema is in the prompt: the parameter as a key of a JSON object, and its type
        schema_ev = Evidence("schema", [f'"{param}":{{'])
        type_ev = Evidence("schema type", [f'"type":{_json(schema.get("type", "string"))}'])
        query_ev = Evidence("query", [scenario.query])
        if kind == "str_number":
            return Fault(kind, sid, param, str(value), value, bound,
                         [schema_ev, type_ev, Evidence("type error", ["is not of type"])])
        if kind == "str_bool":
            return Fault(kind, sid, param, "true" if value else "false", value, bound,
                         [schema_ev, type_ev, Evidence("type error", ["is not of type"])])
        if kind == "enum_case":
            wrong = value.lower() if value != value.lower() else value.title()
            return Fault(kind, sid, param, wrong, value, bound,
                         [Evidence("enum values", [_json(schema["enum"])]),
                          Evidence("enum error", ["is not one of"])])
        if kind == "json_array":
            return Fault(kind, sid, param, json.dumps(value), value, bound,
                         [schema_ev, type_ev, Evidence("type error", ["is not of type"])])
        if kind == "unit_slip":
            factor, _ = UNIT_SLIPS[(step["tool"], step["capability"], param)]
            wrong = value * factor
            wrong = int(wrong) if schema.get("type") == "integer" else round(wrong, 3)
            bound_key = "maximum" if wrong > value else "minimum"
            phrase = scenario.quantities.get(f"{sid}.{param}", scenario.query)
            return Fault(kind, sid, param, wrong, value, bound,
                         [Evidence("the quantity in the query", [phrase]),
                          Evidence("range error", [f"{bound_key} of", "greater than", "less than"])],
                         guess=schema.get(bound_key, wrong))
        if kind == "name_typo":
            wrong = _typo(value, self._rng(run, sid, param, "typo"))
            return Fault(kind, sid, param, wrong, value, bound,
                         [Evidence("the tool's did-you-mean hint",
                                   [f"did you mean '{value}'", f"did you mean {_json(value)}"])])
        ref = whole_reference(value)
        assert ref is not None
        if kind == "placeholder":
            wrong = 0 if self._rng(run, sid, param, "zero").random() < 0.5 else None
            return Fault(kind, sid, param, wrong, value, bound,
                         [query_ev, Evidence("the upstream value", [_json(bound)])],
                         guess=1)
        # wrong_field
        field_name = str(ref.path[-1])
        wrong_name = WRONG_FIELD_NAMES.get(field_name, field_name + "_value")
        wrong = value.replace("." + field_name + "}}", "." + wrong_name + "}}")
        field_list = rf"fields:[^)]*\b{re.escape(field_name)}\b"
        return Fault(kind, sid, param, wrong, value, bound,
                     [Evidence("the upstream value or the field list", [_json(bound)], [field_list])],
                     plan_time_fix=[Evidence("the wrong path", [f"{ref.step_id}.{wrong_name}"]),
                                    Evidence("the field list", patterns=[field_list])])

    def _faulted_plan(self, run: RunScript) -> dict[str, Any]:
        steps = []
        faults = {(f.step_id, f.param): f for f in run.faults}
        for step in run.scenario.plan["steps"]:
            params = dict(step["params"])
            for param in params:
                fault = faults.get((step["id"], param))
                if fault is not None and (step["id"], param) not in run.plan_fixed:
                    params[param] = fault.wrong
            steps.append({**step, "params": params})
        return {"steps": steps}

    # --- layers 3 and 4 ---------------------------------------------------------------
    def _resolve(self, run: RunScript, request: LLMRequest, purpose: str) -> tuple[dict[str, Any], int, int]:
        """Parameters the model proposes for the request's step, fixed and guessed counts.

        Every fault of the step that was fixed before stays fixed; one whose information
        is in the prompt is fixed now; the others keep their wrong value, or get a guess.
        """
        sid = request.step_id or ""
        prompt = _squash(request.prompt_text)
        proposal: dict[str, Any] = {}
        fixed_now = guessed = 0
        for fault in run.faults:
            if fault.step_id != sid or (sid, fault.param) in run.plan_fixed:
                continue
            if (sid, fault.param) in run.fixed:
                proposal[fault.param] = fault.bound_truth
            elif fault.fixable(prompt):
                run.fixed.add((sid, fault.param))
                proposal[fault.param] = fault.bound_truth
                fixed_now += 1
            elif fault.guess is not None and \
                    self._rng(run, sid, fault.param, purpose, run.requests).random() < self.mix.guess_rate:
                proposal[fault.param] = fault.guess
                guessed += 1
                run.guesses += 1
        return proposal, fixed_now, guessed

    def _layer3_answer(self, run: RunScript, request: LLMRequest) -> dict[str, Any]:
        proposal, fixed_now, guessed = self._resolve(run, request, "l3")
        if not (fixed_now or guessed):
            return {"can_fix": False, "analysis": "the value cannot be known from the error alone",
                    "corrected_parameters": {}}
        sid = request.step_id or ""
        full = dict(self.truth_params[run.scenario.name].get(sid, {}))
        for fault in run.faults:  # unfixed faults keep the value the model was shown
            if fault.step_id == sid and fault.param not in proposal:
                full[fault.param] = fault.wrong
        full.update(proposal)
        return {"can_fix": True, "analysis": "corrected the parameter the error names",
                "corrected_parameters": full}

    def _layer4_answer(self, run: RunScript, request: LLMRequest) -> dict[str, Any]:
        prompt = request.prompt_text
        last_error = _last_error_block(prompt)
        if any(marker in last_error for marker in TRANSIENT_MARKERS):
            return {"should_retry": False, "is_transient_error": True, "corrected_parameters": {},
                    "analysis": "the upstream service timed out: a temporary failure"}
        proposal, fixed_now, guessed = self._resolve(run, request, "l4")
        if not (fixed_now or guessed):
            return {"should_retry": False, "is_transient_error": False, "corrected_parameters": {},
                    "analysis": "nothing in the request or the upstream outputs fixes this"}
        return {"should_retry": True, "is_transient_error": False,
                "corrected_parameters": proposal,
                "analysis": "re-resolved from the request and the upstream outputs"}


def _last_error_block(prompt: str) -> str:
    """The error the request is about: the last ``<<<ERROR ... ERROR>>>`` block, or all."""
    blocks = re.findall(r"<<<(?:[A-Z_]*ERROR[A-Z_]*)\n(.*?)\n[A-Z_]*ERROR[A-Z_]*>>>", prompt, re.S)
    return blocks[-1] if blocks else prompt


def _typo(word: str, rng: random.Random) -> str:
    """Swap two adjacent inner letters (``Microsoft`` -> ``Micorsoft``)."""
    if len(word) < 4:
        return word + word[-1]
    i = rng.randrange(1, len(word) - 2)
    return word[:i] + word[i + 1] + word[i] + word[i + 2:]


def _break_json(body: str, rng: random.Random) -> str:
    """Plan JSON broken the ways models break it: cut off, trailing comma, single quotes."""
    how = rng.choice(("truncated", "trailing_comma", "single_quotes"))
    if how == "truncated":
        return body[: max(1, int(len(body) * rng.uniform(0.5, 0.95)))]
    if how == "trailing_comma":
        return body[:-2] + ",]}"
    return body.replace('"', "'")


EvidenceCheck = Callable[[str], bool]
