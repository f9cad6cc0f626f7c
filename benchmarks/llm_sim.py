"""A seeded LLM simulator for the recovery ablation: plans with the mistakes real models make.

It is a :class:`~orchestration.ScriptedLLM` callable. For a plan request it takes the
scenario's ground-truth plan and injects mistakes per parameter at the rates of a
:class:`FaultMix`, in the *forms real models wrote them* (BFCL rejections, see
:mod:`benchmarks.bfcl_rates`), not as the inverse of dagwright's coercion rules — so some
of them layer 2 cannot fix (``"east, west"`` for an array, ``["TSLA"]`` for a string, a
call written where its result belongs, a required value left out):

======================  =================================================  ==================
kind                    what the planner writes                            what fixes it
======================  =================================================  ==================
``bool_as_text``        ``"True"``, ``"true"``, ``"false"``                 layer 2
``number_as_text``      ``"3"`` for 3                                      layer 2
``collection_as_text``  ``"['east', 'west']"`` (Python text), ``"east"``     layer 2; layer 3
                        for a one-item array, ``"east, west"``              for the joined form
``enum_case``           ``"eur"`` for ``"EUR"``                              layer 2
``list_for_scalar``     ``["TSLA"]`` for ``"TSLA"``                          layer 3
``null_value``          ``null`` for a value                               layer 2 drops an
                                                                           optional one (the
                                                                           default may be
                                                                           wrong); layer 4
``missing_required``    a required parameter left out                      layer 4 (grounded)
``unit_slip``           grams for kilograms, hours for minutes (out of     layer 3 (query)
                        range)
``name_typo``           ``"Microsfot"``: NOT_FOUND with a did-you-mean      layer 3 / 4 (hint)
``placeholder``         ``0``, ``null``, ``""``, ``"unknown"`` where a         layer 4 (upstream)
                        reference belongs
``wrong_field``         ``{{ship.cost}}`` for ``{{ship.cost_usd}}``           planner feedback,
                                                                           layer 4
``nested_call``         ``"quote(symbol='TSLA')['price']"`` for a           layer 4 (upstream)
                        reference
``malformed_json``      a plan that is not valid JSON                      planner feedback
======================  =================================================  ==================

**What the model knows comes from what the prompt says.** Layer 1's effect is read from
the planner prompt's content: for each parameter the simulator looks up the type the
capability's section states (a typed signature ``weight_kg: number`` or a raw schema
``"weight_kg":{..."type":"number"}``) — a value-form mistake is ``no_type_factor`` times
likelier when the prompt states no type for the parameter — and whether the prompt has
an explicit rule against that wrong form (a line such as "boolean values are true or
false, never "true"") — ``rule_factor`` times as likely then. A reference to a field is
``no_fields_factor`` times likelier wrong when the prompt lists no output fields of the
step it points at.

Layer 3 (purpose ``validation_feedback``) and layer 4 (``semantic_retry``) answers are
read off the request the same way: a mistake is fixed only when the request shows what a
model would need (the schema and an error naming the parameter for a form mistake, the
query for a unit slip, the tool's hint for a misspelt name, the upstream output for a
value that comes from it). Even then the model is wrong with probability
``answer_error_rate`` (for layer 4, half of those cite a real source that holds another
value — grounding cannot catch that — and half miscompute); without the information it
guesses with probability ``guess_rate`` and otherwise declines. Layer 4 answers carry the
provenance a model would give: the upstream path, the quote, the arithmetic.
"""

from __future__ import annotations

import json
import random
import re
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
from orchestration.plan import parse_references, whole_reference

FORM_KINDS = ("bool_as_text", "number_as_text", "collection_as_text", "enum_case",
              "list_for_scalar")
"""Mistakes in the form of a value the model knows: what layer 1's type text acts on."""
CONTENT_KINDS = ("null_value", "missing_required", "unit_slip", "name_typo", "placeholder",
                 "wrong_field", "nested_call")
ALL_KINDS = (*FORM_KINDS, *CONTENT_KINDS, "malformed_json")
TRANSIENT_MARKERS = (WRAPPED_TIMEOUT_CODE, "SERVICE_UNAVAILABLE", "timed out", "overloaded")
"""What tells a model that the error it is shown is an infrastructure hiccup."""

MISSING = object()
"""The "wrong value" of a parameter the planner left out."""


# ------------------------------------------------------------------------------ fault mixes


@dataclass
class FaultMix:
    """Probability per opportunity of each mistake, and how the model answers repairs.

    An opportunity is a parameter the kind applies to (a boolean for ``bool_as_text``, a
    reference for ``placeholder``...), a step for ``missing_required``, a plan for
    ``malformed_json``. ``sources`` says where each number comes from.
    """

    name: str
    rates: dict[str, float]
    answer_error_rate: float
    guess_rate: float
    sources: dict[str, str]
    no_type_factor: float = 4.0
    rule_factor: float = 0.5
    no_fields_factor: float = 3.0

    def rate(self, kind: str) -> float:
        return self.rates.get(kind, 0.0)

    def scaled(self, factor: float) -> FaultMix:
        return FaultMix(self.name, {k: min(1.0, v * factor) for k, v in self.rates.items()},
                        self.answer_error_rate, self.guess_rate, self.sources,
                        self.no_type_factor, self.rule_factor, self.no_fields_factor)

    def describe(self) -> str:
        return ", ".join(f"{k} {self.rates[k]:.3%}".replace(".000%", "%")
                         for k in ALL_KINDS if k in self.rates)


BFCL = ("BFCL (Berkeley Function Calling Leaderboard) AST rejections of 71 models, "
        "simple + multiple_function, 42,600 calls, 120,487 parameter slots "
        "(HuanzhiMao/BFCL-Result 2024-08-11/score; python -m benchmarks.bfcl_rates)")
ASSUMED = "assumed: no published measurement found"

REAL_MIX = FaultMix(
    name="real",
    rates={
        "bool_as_text": 0.0039,  # 21 / 5,396 boolean slots ('True' 10, 'true' 7, 'false' 4)
        "number_as_text": 0.00002,  # 1 / 45,866 number slots
        "collection_as_text": 0.0015,  # 13 / 8,520 array slots
        "enum_case": 0.001,
        "list_for_scalar": 0.00005,
        "null_value": 0.00039,  # 47 / 120,487 slots
        "missing_required": 0.0014,  # 61 / 42,600 calls, per step
        "unit_slip": 0.00015,  # 7 / 45,866 number slots off by 1000, 60 or 24
        "name_typo": 0.001,
        "placeholder": 0.00056,  # null, "", 0, "unknown": 67 / 120,487 slots
        "wrong_field": 0.002,
        "nested_call": 0.003,
        "malformed_json": 0.01,
    },
    answer_error_rate=0.025,
    guess_rate=0.35,
    sources={
        "bool_as_text": f"0.39% of boolean slots — {BFCL}",
        "number_as_text": "0.002% of number slots — BFCL, same data",
        "collection_as_text": "0.15% of array slots (7 as Python text, 3 as one bare item, "
                              "1 comma-joined, ...) — BFCL, same data",
        "enum_case": f"0.1% of enum slots — {ASSUMED} (BFCL compares strings case-"
                     "insensitively, so it cannot see these)",
        "list_for_scalar": "0.005% of scalar slots — BFCL: 3 such rejections in its "
                           "parallel categories, none in the single-call ones",
        "null_value": "0.039% of slots — BFCL, same data",
        "missing_required": "0.14% of calls, per step — BFCL, same data",
        "unit_slip": "0.015% of number slots (off by 1000, 60 or 24) — BFCL, same data",
        "name_typo": f"0.1% of entity slots — {ASSUMED} (BFCL's 1.6% of calls with a "
                     "different string mixes typos with ambiguous ground truth)",
        "placeholder": "0.056% of slots (null, \"\", 0, \"unknown\") — BFCL, same data",
        "wrong_field": f"0.2% of references — {ASSUMED}",
        "nested_call": "0.3% of references — BFCL: a call written as another call's "
                       "argument in 0.32% of parallel-multiple calls, where few tasks "
                       "need chaining; taken per reference",
        "malformed_json": f"1% of plans — {ASSUMED} (BFCL's 7.2% undecodable outputs are "
                          "mostly prose, code fences and Python call syntax from "
                          "prompt-format models, which a JSON-mode planner does not write)",
        "answer_error_rate": "2.5% — BFCL: a well-typed value other than the expected one "
                             "in 2.5% of calls whose request holds the information",
        "guess_rate": "35% — BFCL relevance category: models called a function for 35% of "
                      "the 240 requests none of the offered functions fits (71 models, "
                      "pooled)",
        "no_type_factor": f"×4 — {ASSUMED}",
        "rule_factor": f"×0.5 — {ASSUMED}",
        "no_fields_factor": f"×3 — {ASSUMED}",
    },
)
"""Rates from published measurements where they exist; every other one says so."""

STRESS_MIX = FaultMix(
    name="stress",
    rates={"bool_as_text": 0.05, "number_as_text": 0.05, "collection_as_text": 0.06,
           "enum_case": 0.05, "list_for_scalar": 0.02, "null_value": 0.02,
           "missing_required": 0.03, "unit_slip": 0.2, "name_typo": 0.05,
           "placeholder": 0.05, "wrong_field": 0.05, "nested_call": 0.03,
           "malformed_json": 0.05},
    answer_error_rate=REAL_MIX.answer_error_rate,
    guess_rate=REAL_MIX.guess_rate,
    sources={"all": "chosen to exercise every path: 10–100× the real rates (2–20% per "
                    "opportunity); the model's answering (2.5% wrong with the "
                    "information, 35% guesses without) is the real mix's"},
)
MIXES = {"real": REAL_MIX, "stress": STRESS_MIX}


# --------------------------------------------------------------------------- prompt reading


_BLOCK_RE = re.compile(r"<<<([A-Z0-9_]+)\n(.*?)\n\1>>>", re.S)


def blocks(prompt: str) -> dict[str, str]:
    """Every ``<<<LABEL ... LABEL>>>`` data block of a prompt (the last one wins)."""
    return {m.group(1): m.group(2) for m in _BLOCK_RE.finditer(prompt)}


def capability_section(prompt: str, key: str) -> str:
    """What the planner prompt says about capability ``key`` (``### key`` to the next)."""
    start = prompt.find(f"### {key}\n")
    if start < 0:
        return ""
    end = prompt.find("\n### ", start + 4)
    return prompt[start:] if end < 0 else prompt[start:end]


def stated_type(section: str, param: str) -> str | None:
    """The JSON type the section states for ``param``: from a typed signature line
    (``- days: integer (...)``, ``- to: "EUR" | "USD"``) or a raw schema; None if none."""
    line = re.search(rf"^\s*-\s*{re.escape(param)}:\s*(.+)$", section, re.M)
    if line:
        text = line.group(1).strip()
        if text.startswith('"') or " | " in text.split("(")[0]:
            return "enum"
        word = re.match(r"(array|boolean|integer|number|string|object)\b", text)
        return word.group(1) if word else None
    raw = re.search(rf'"{re.escape(param)}":(\{{)', section)
    if raw:
        depth, i = 0, raw.start(1)
        for j in range(i, len(section)):
            depth += {"{": 1, "}": -1}.get(section[j], 0)
            if depth == 0:
                try:
                    spec = json.loads(section[i:j + 1])
                except ValueError:
                    return None
                if "enum" in spec:
                    return "enum"
                kind = spec.get("type")
                return kind if isinstance(kind, str) else None
    return None


_RULES = {
    # a sentence that names the type and says which written form is wrong
    "bool_as_text": r'\bboolean\b.{0,60}?\b(?:never|not)\b "(?:true|false)"',
    "number_as_text": r'\bnumbers?\b.{0,60}?\bnot "\d',
    "collection_as_text": r"\barray\b.{0,40}?\bJSON arrays?\b",
    "enum_case": r"(?:value list|one of)\b.{0,80}?\b(?:exactly|case included)\b",
    "list_for_scalar": r"\bevery value the JSON type\b|\bOnly string parameters take\b",
}


def rule_stated(prompt: str, kind: str) -> bool:
    """Whether the prompt states an explicit rule against this form of mistake."""
    pattern = _RULES.get(kind)
    return bool(pattern and re.search(pattern, re.sub(r"\s+", " ", prompt), re.I))


def fields_listed(prompt: str, upstream_key: str, field_name: str) -> bool:
    """Whether the prompt lists ``field_name`` among the outputs of ``upstream_key``."""
    section = capability_section(prompt, upstream_key)
    return bool(re.search(rf"(?:output[^\n]*\b{re.escape(field_name)}\b)", section))


# ------------------------------------------------------------------------------ faults


@dataclass
class Fault:
    """One injected mistake: where, what was written, and what is right."""

    kind: str
    step_id: str
    param: str
    wrong: Any
    truth: Any  # the planner's correct value (a reference stays a reference)
    bound_truth: Any  # the value the correct parameter has once bound
    guess: Any = None  # the wrong value a guessing model writes
    plan_time_fix: list[str] = field(default_factory=list)  # what plan feedback must say


@dataclass
class RunScript:
    """What the simulated model decided for one run."""

    scenario: Scenario
    seed: str
    faults: list[Fault] = field(default_factory=list)
    malformed: bool = False
    had_malformed: bool = False
    fixed: set[tuple[str, str]] = field(default_factory=set)
    plan_fixed: set[tuple[str, str]] = field(default_factory=set)
    requests: int = 0
    guesses: int = 0  # values the model made up without the information
    slips: int = 0  # wrong answers although the information was there


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


# --------------------------------------------------------------------------- simulator


class PlannerSimulator:
    """The callable behind :class:`ScriptedLLM` in the ablation (one run at a time)."""

    def __init__(self, catalog: Catalog, scenarios: list[Scenario],
                 truth_params: dict[str, dict[str, dict[str, Any]]], mix: FaultMix) -> None:
        self.catalog = catalog
        self.by_query = {s.query: s for s in scenarios}
        self.truth_params = truth_params
        self.mix = mix
        self.run: RunScript | None = None
        self.unknown_purposes: dict[str, int] = {}

    def start_run(self, scenario: Scenario, seed: str) -> None:
        self.run = RunScript(scenario, seed)

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
        if request.purpose == "replan":
            return json.dumps({"steps": []})  # the ablation runs with replanning off
        attempt = sum(1 for m in request.messages if m.get("role") == "assistant") + 1
        if attempt == 1:
            query = blocks(request.prompt_text).get("QUERY", "").strip()
            run.scenario = self.by_query.get(query, run.scenario)
            run.faults = self._draw_faults(run, request.prompt_text)
            run.malformed = self._rng(run, "malformed", 1).random() < self.mix.rate("malformed_json")
        else:
            feedback = _squash(request.messages[-1].get("content", ""))
            for fault in run.faults:
                if fault.plan_time_fix and all(re.search(p, feedback) for p in fault.plan_time_fix):
                    run.plan_fixed.add((fault.step_id, fault.param))
            run.malformed = (self._rng(run, "malformed", attempt).random()
                             < self.mix.rate("malformed_json") / 4)
        run.had_malformed = run.had_malformed or run.malformed
        body = json.dumps(self._faulted_plan(run), ensure_ascii=False)
        return _break_json(body, self._rng(run, "break", attempt)) if run.malformed else body

    def _draw_faults(self, run: RunScript, prompt: str) -> list[Fault]:
        """One uniform draw per opportunity and kind, in a fixed order: every
        configuration meets the same draws; the prompt only scales the thresholds."""
        scenario = run.scenario
        truth = self.truth_params[scenario.name]
        steps = {s["id"]: s for s in scenario.plan["steps"]}
        faults: list[Fault] = []
        for step in scenario.plan["steps"]:
            cap = self.catalog.get(step["tool"], step["capability"])
            section = capability_section(prompt, cap.key)
            props = cap.input_schema.get("properties", {})
            required = list(cap.input_schema.get("required", []))
            if required and self._rng(run, step["id"], "missing").random() < \
                    self.mix.rate("missing_required"):
                param = self._rng(run, step["id"], "which").choice(required)
                value = step["params"][param]
                faults.append(Fault("missing_required", step["id"], param, MISSING, value,
                                    truth[step["id"]][param],
                                    guess=_guess_for(value, props.get(param, {}))))
                continue
            for param, value in step["params"].items():
                schema = props.get(param, {})
                for kind in self._kinds_for(step, param, value, schema):
                    rate = self._rate(kind, prompt, section, param, value, steps)
                    if self._rng(run, step["id"], param, kind).random() < rate:
                        faults.append(self._make_fault(kind, step, param, value,
                                                       truth[step["id"]][param], schema, run))
                        break
        return faults

    def _rate(self, kind: str, prompt: str, section: str, param: str, value: Any,
              steps: dict[str, dict[str, Any]]) -> float:
        rate = self.mix.rate(kind)
        if kind in FORM_KINDS:
            if stated_type(section, param) is None:
                rate *= self.mix.no_type_factor
            if rule_stated(prompt, kind):
                rate *= self.mix.rule_factor
        elif kind == "wrong_field":
            ref = whole_reference(value)
            assert ref is not None
            upstream = steps[ref.step_id]
            if not fields_listed(prompt, f"{upstream['tool']}.{upstream['capability']}",
                                 str(ref.path[0])):
                rate *= self.mix.no_fields_factor
        return min(1.0, rate)

    @staticmethod
    def _kinds_for(step: dict[str, Any], param: str, value: Any, schema: dict[str, Any]) -> list[str]:
        key = (step["tool"], step["capability"], param)
        if isinstance(value, str) and whole_reference(value) is not None:
            return ["placeholder", "wrong_field", "nested_call"]
        kinds: list[str] = []
        if key in UNIT_SLIPS:
            kinds.append("unit_slip")
        if key in ENTITY_PARAMS:
            kinds.append("name_typo")
        if isinstance(value, bool):
            kinds.append("bool_as_text")
        elif isinstance(value, int | float):
            kinds.append("number_as_text")
        elif isinstance(value, str) and "enum" in schema:
            kinds.append("enum_case")
        elif isinstance(value, list):
            kinds.append("collection_as_text")
        if isinstance(value, str | int | float) and not isinstance(value, bool) and "{{" not in str(value):
            kinds.append("list_for_scalar")
        kinds.append("null_value")
        return kinds

    def _make_fault(self, kind: str, step: dict[str, Any], param: str, value: Any, bound: Any,
                    schema: dict[str, Any], run: RunScript) -> Fault:
        sid = step["id"]
        rng = self._rng(run, sid, param, kind, "form")
        if kind == "bool_as_text":  # the forms BFCL saw: 'True' 10, 'true' 7, 'false' 4
            wrong = ("True" if rng.random() < 0.6 else "true") if value else \
                ("false" if rng.random() < 0.7 else "False")
            return Fault(kind, sid, param, wrong, value, bound)
        if kind == "number_as_text":
            return Fault(kind, sid, param, str(value), value, bound)
        if kind == "collection_as_text":  # Python text 7, one bare item 3, comma-joined 1
            u = rng.random()
            if len(value) == 1 and u < 0.3:
                wrong: Any = str(value[0])
            elif u < 0.85:
                wrong = str(value)
            else:
                wrong = ", ".join(map(str, value))
            return Fault(kind, sid, param, wrong, value, bound)
        if kind == "enum_case":
            wrong = value.lower() if value != value.lower() else value.title()
            return Fault(kind, sid, param, wrong, value, bound)
        if kind == "list_for_scalar":
            return Fault(kind, sid, param, [value], value, bound)
        if kind == "null_value":
            return Fault(kind, sid, param, None, value, bound, guess=_guess_for(value, schema))
        if kind == "unit_slip":
            factor, _ = UNIT_SLIPS[(step["tool"], step["capability"], param)]
            wrong = value * factor
            wrong = int(wrong) if schema.get("type") == "integer" else round(wrong, 3)
            bound_key = "maximum" if wrong > value else "minimum"
            return Fault(kind, sid, param, wrong, value, bound, guess=schema.get(bound_key, wrong))
        if kind == "name_typo":
            return Fault(kind, sid, param, _typo(value, rng), value, bound)
        ref = whole_reference(value)
        assert ref is not None
        if kind == "placeholder":  # null 47, "" 9, 0 3, "unknown" 8 in BFCL
            wrong = rng.choices([None, "", 0, "unknown"], weights=[47, 9, 3, 8])[0]
            return Fault(kind, sid, param, wrong, value, bound, guess=_guess_for(bound))
        if kind == "nested_call":
            upstream = next(s for s in run.scenario.plan["steps"] if s["id"] == ref.step_id)
            args = ", ".join(f"{k}={v!r}" for k, v in upstream["params"].items()
                             if "{{" not in str(v))
            path = "".join(f"[{p!r}]" for p in ref.path)
            return Fault(kind, sid, param, f"{upstream['capability']}({args}){path}", value,
                         bound, guess=_guess_for(bound))
        field_name = str(ref.path[-1])
        wrong_name = WRONG_FIELD_NAMES.get(field_name, field_name + "_value")
        wrong = value.replace("." + field_name + "}}", "." + wrong_name + "}}")
        return Fault(kind, sid, param, wrong, value, bound, guess=_guess_for(bound),
                     plan_time_fix=[re.escape(f"{ref.step_id}.{wrong_name}"),
                                    rf"fields:[^)]*\b{re.escape(field_name)}\b"])

    def _faulted_plan(self, run: RunScript) -> dict[str, Any]:
        steps = []
        faults = {(f.step_id, f.param): f for f in run.faults}
        for step in run.scenario.plan["steps"]:
            params = dict(step["params"])
            for param in list(params):
                fault = faults.get((step["id"], param))
                if fault is not None and (step["id"], param) not in run.plan_fixed:
                    if fault.wrong is MISSING:
                        del params[param]
                    else:
                        params[param] = fault.wrong
            steps.append({**step, "params": params})
        return {"steps": steps}

    # --- what a repair request shows -------------------------------------------------
    def _informed(self, run: RunScript, fault: Fault, shown: dict[str, str], layer: int) -> bool:
        """Whether the request holds what a model needs to fix ``fault``."""
        error = shown.get("VALIDATION_ERRORS", "") + shown.get("TOOL_ERROR", "") + shown.get("ERROR", "")
        schema = shown.get("INPUT_SCHEMA", "")
        query = shown.get("USER_QUERY", "")
        names_param = f"$.{fault.param}" in error or fault.param in error
        if fault.kind == "name_typo":
            return f"did you mean '{fault.truth}'" in error
        if fault.kind == "unit_slip":
            phrase = run.scenario.quantities.get(f"{fault.step_id}.{fault.param}", "")
            return bool(phrase) and phrase in query and names_param
        if fault.kind in FORM_KINDS:
            if f'"{fault.param}"' not in schema or not names_param:
                return False
            if fault.kind == "collection_as_text" and isinstance(fault.wrong, str) and \
                    "[" not in fault.wrong and len(fault.truth) > 1:
                return _claim_for(run, fault, query) is not None  # the items are in the query
            return True
        # the value itself: an upstream output, or the request — present only when the
        # model can point at it (a quote, a derivation, an upstream field)
        refs = _references_in(fault.truth)
        if refs:
            outputs = upstream_outputs(shown)
            return all(_lookup(outputs, ref) is not _NOT_SHOWN for ref in refs)
        return layer == 4 and _answer_for(run, fault, shown)[2]

    def _pending(self, run: RunScript, sid: str) -> list[Fault]:
        return [f for f in run.faults
                if f.step_id == sid and (sid, f.param) not in run.plan_fixed]

    # --- layer 3 ----------------------------------------------------------------------
    def _layer3_answer(self, run: RunScript, request: LLMRequest) -> dict[str, Any]:
        sid = request.step_id or ""
        shown = blocks(request.prompt_text)
        full = dict(self.truth_params[run.scenario.name].get(sid, {}))
        acted = False
        for fault in self._pending(run, sid):
            rng = self._rng(run, sid, fault.param, "l3", run.requests)
            if (sid, fault.param) in run.fixed:
                full[fault.param] = fault.bound_truth
            elif self._informed(run, fault, shown, 3):
                acted = True
                if rng.random() < self.mix.answer_error_rate:
                    run.slips += 1
                    full[fault.param] = _alternative(fault.bound_truth, rng)
                else:
                    run.fixed.add((sid, fault.param))
                    full[fault.param] = fault.bound_truth
            elif fault.guess is not None and rng.random() < self.mix.guess_rate:
                acted = True
                run.guesses += 1
                full[fault.param] = fault.guess
            else:
                _keep_wrong(full, fault)
        if not acted:
            return {"can_fix": False, "analysis": "the value cannot be known from the error alone",
                    "corrected_parameters": {}}
        return {"can_fix": True, "analysis": "corrected the parameter the error names",
                "corrected_parameters": full}

    # --- layer 4 ----------------------------------------------------------------------
    def _layer4_answer(self, run: RunScript, request: LLMRequest) -> dict[str, Any]:
        shown = blocks(request.prompt_text)
        error = shown.get("ERROR", "")
        if any(marker in error for marker in TRANSIENT_MARKERS):
            return {"should_retry": False, "is_transient_error": True, "corrected_parameters": {},
                    "provenance": {}, "analysis": "the upstream service timed out: temporary"}
        sid = request.step_id or ""
        query = shown.get("USER_QUERY", "")
        corrected: dict[str, Any] = {}
        provenance: dict[str, Any] = {}
        for fault in self._pending(run, sid):
            rng = self._rng(run, sid, fault.param, "l4", run.requests)
            if (sid, fault.param) in run.fixed or self._informed(run, fault, shown, 4):
                value, claim, _ = _answer_for(run, fault, shown)
                if (sid, fault.param) not in run.fixed and \
                        rng.random() < self.mix.answer_error_rate:
                    run.slips += 1
                    value, claim = self._slip(run, fault, shown, claim or _bare_claim(query), rng)
                else:
                    run.fixed.add((sid, fault.param))
                corrected[fault.param] = value
                if claim is not None:
                    provenance[fault.param] = claim
            elif fault.guess is not None and rng.random() < self.mix.guess_rate:
                run.guesses += 1
                corrected[fault.param] = fault.guess  # and a source that does not hold it
                provenance[fault.param] = _bare_claim(query)
        if not corrected:
            return {"should_retry": False, "is_transient_error": False, "corrected_parameters": {},
                    "provenance": {},
                    "analysis": "nothing in the request or the upstream outputs fixes this"}
        return {"should_retry": True, "is_transient_error": False, "corrected_parameters": corrected,
                "provenance": provenance,
                "analysis": "re-resolved from the request and the upstream outputs"}

    def _slip(self, run: RunScript, fault: Fault, shown: dict[str, str], claim: dict[str, Any],
              rng: random.Random) -> tuple[Any, dict[str, Any]]:
        """A wrong answer although the information was there: half the time another real
        value with its honest source (grounding cannot tell), else a miscomputation."""
        if rng.random() < 0.5:
            other = _other_source(run, fault, shown, rng)
            if other is not None:
                return other
        return _alternative(fault.bound_truth, rng), claim


# ------------------------------------------------------------------------------ helpers


def _keep_wrong(params: dict[str, Any], fault: Fault) -> None:
    if fault.wrong is MISSING:
        params.pop(fault.param, None)
    else:
        params[fault.param] = fault.wrong


def _guess_for(value: Any, schema: dict[str, Any] | None = None) -> Any:
    """The plausible wrong value a model makes up for one it cannot know."""
    members = (schema or {}).get("enum")
    if isinstance(members, list) and value in members and len(members) > 1:
        return next(m for m in members if m != value)
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return 1 if value != 1 else 2
    if isinstance(value, list):
        return value[:1] if len(value) > 1 else value + value
    if isinstance(value, str) and "{{" in value:
        return 1
    return None


def _alternative(value: Any, rng: random.Random) -> Any:
    """A wrong value of the same type (a slip)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + rng.choice((1, 2, 10))
    if isinstance(value, float):
        return round(value * rng.choice((1.1, 0.9, 10)), 4)
    if isinstance(value, list):
        return value[:-1] or value + value
    if isinstance(value, str):
        return value + "s"
    return value


def _number_text(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


_NOT_SHOWN = object()


def upstream_outputs(shown: dict[str, str]) -> dict[str, Any]:
    """The upstream outputs a layer-4 request shows, by step id."""
    outputs: dict[str, Any] = {}
    for match in re.finditer(r"^step (\S+) \([^)]*\) returned: (.*)$",
                             shown.get("UPSTREAM_OUTPUTS", ""), re.M):
        try:
            outputs[match.group(1)] = json.loads(match.group(2))
        except ValueError:
            continue
    return outputs


def _references_in(value: Any) -> list[Any]:
    return parse_references(value) if isinstance(value, str) else []


def _lookup(outputs: dict[str, Any], ref: Any) -> Any:
    """The value a reference points at in the shown outputs, or ``_NOT_SHOWN``."""
    if ref.step_id not in outputs:
        return _NOT_SHOWN
    value = outputs[ref.step_id]
    for part in ref.path:
        present = (isinstance(value, list) and isinstance(part, int) and part < len(value)) \
            or (isinstance(value, dict) and part in value)
        if not present:
            return _NOT_SHOWN
        value = value[part]
    return value


def _answer_for(run: RunScript, fault: Fault,
                shown: dict[str, str]) -> tuple[Any, dict[str, Any] | None, bool]:
    """The right value as a model reads it off the request, the source it cites, and
    whether the request really shows it.

    A value that comes from an upstream output is read there (what the model sees, which
    is the truth of this run); a text with references inside is answered as the template,
    which cites itself; a value of the request is quoted (or derived from a quantity in
    other units, or found in an upstream output). A value the request does not show is
    the model's own knowledge, cited as the request as a whole.
    """
    query = shown.get("USER_QUERY", "")
    truth = fault.truth
    ref = whole_reference(truth) if isinstance(truth, str) else None
    if ref is not None:
        found = _lookup(upstream_outputs(shown), ref)
        value = fault.bound_truth if found is _NOT_SHOWN else found
        return value, {"kind": "upstream", "path": ref.dotted}, found is not _NOT_SHOWN
    if _references_in(truth):
        return truth, None, True
    claim = _claim_for(run, fault, query)
    if claim is not None:
        return fault.bound_truth, claim, True
    for sid, output in upstream_outputs(shown).items():
        if isinstance(output, dict):
            for key, value in output.items():
                if value == truth and type(value) is type(truth):
                    return fault.bound_truth, {"kind": "upstream", "path": f"{sid}.{key}"}, True
    return fault.bound_truth, _bare_claim(query), False


def _claim_for(run: RunScript, fault: Fault, query: str) -> dict[str, Any] | None:
    """The provenance a model gives for the right value, when one exists."""
    truth = fault.truth
    ref = whole_reference(truth) if isinstance(truth, str) else None
    if ref is not None:
        return {"kind": "upstream", "path": ref.dotted}
    if fault.kind == "name_typo":
        return {"kind": "tool_hint", "quote": f"did you mean '{truth}'"}
    phrase = run.scenario.quantities.get(f"{fault.step_id}.{fault.param}", "")
    if phrase and phrase in query:  # a quantity the request gives in other units
        number = re.match(r"[\d.]+", phrase)
        if "hour" in phrase and number:
            return {"kind": "derived", "expression": f"{number.group(0)} * 60"}
        return {"kind": "query", "quote": phrase}
    if isinstance(truth, bool):  # the words of the request that name the flag
        names = [w for w in fault.param.split("_") if len(w) >= 4]
        words = query.split()
        for i, word in enumerate(words):
            if any(word.lower().strip("(),.;").startswith(n) for n in names):
                return {"kind": "query", "quote": " ".join(words[max(0, i - 1):i + 1])}
        return None
    if isinstance(truth, int | float):
        text = _number_text(truth)
        return {"kind": "query", "quote": text} if re.search(
            rf"(?<![\d.]){re.escape(text)}(?![\d])", query) else None
    if isinstance(truth, str):
        found = re.search(re.escape(truth), query, re.I)
        return {"kind": "query", "quote": found.group(0)} if found else None
    if isinstance(truth, list) and truth and all(isinstance(x, str) for x in truth):
        spans = [re.search(re.escape(x), query, re.I) for x in truth]
        if all(spans):
            start = min(s.start() for s in spans if s)
            end = max(s.end() for s in spans if s)
            return {"kind": "query", "quote": query[start:end]}
    return None


def _bare_claim(query: str) -> dict[str, Any]:
    """What a model cites when it has no real source: the request as a whole."""
    return {"kind": "query", "quote": query.strip()[:200] or "the request"}


def _other_source(run: RunScript, fault: Fault, shown: dict[str, str],
                  rng: random.Random) -> tuple[Any, dict[str, Any]] | None:
    """Another real value of the same type, cited honestly (a wrong field, a wrong number)."""
    truth = fault.truth
    ref = whole_reference(truth) if isinstance(truth, str) else None
    if ref is not None:
        upstream = shown.get("UPSTREAM_OUTPUTS", "")
        line = re.search(rf"step {re.escape(ref.step_id)} \([^)]*\) returned: (.*)", upstream)
        try:
            output = json.loads(line.group(1)) if line else None
        except ValueError:
            output = None
        if isinstance(output, dict):
            same_type = [k for k, v in output.items() if k != ref.path[0]
                         and type(v) is type(fault.bound_truth)]
            if same_type:
                other = rng.choice(sorted(same_type))
                return output[other], {"kind": "upstream", "path": f"{ref.step_id}.{other}"}
        return None
    if isinstance(truth, int | float) and not isinstance(truth, bool):
        query = shown.get("USER_QUERY", "")
        numbers = [n for n in re.findall(r"(?<![\w.])\d+(?:\.\d+)?", query)
                   if float(n) != float(truth)]
        if numbers:
            text = rng.choice(numbers)
            value: Any = float(text) if "." in text else int(text)
            return value, {"kind": "query", "quote": text}
    return None


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
