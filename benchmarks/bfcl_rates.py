"""Parameter mistake rates of real models, measured on published leaderboard outputs.

The recovery ablation (:mod:`benchmarks.recovery`) injects planner mistakes at stated
rates. Its "real" mix takes them from here: the Berkeley Function Calling Leaderboard
(BFCL) publishes, per model and test category, every call its AST checker rejected with
the checker's verdict (``error_type``), the model's raw output and the expected answer
(repository ``HuanzhiMao/BFCL-Result``, directory ``2024-08-11/score``: 71 models). This
script reads those score files for the two single-call Python categories (``simple``: 400
calls, ``multiple_function``: 200), rebuilds each call's function schema from the
rejected entries (every prompt is rejected by at least one model, so all of them are
found), counts the parameter slots by JSON type, and sorts the rejections into the
mistake kinds the ablation simulates.

Caveat, stated in the report too: the checker stops at a call's *first* problem, so every
per-slot rate here is a lower bound; and "value" errors (a well-typed value that differs
from the expected one) include ground-truth ambiguity (``"Los Angeles"`` vs
``"Los Angeles, CA"``).

Run: ``python -m benchmarks.bfcl_rates PATH/TO/BFCL-Result/2024-08-11/score``
(prints a Markdown table; nothing is written).
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CATEGORIES = ("simple", "multiple_function")
_TYPE_RE = re.compile(r"Expected type (\w+), got (\w+)")
_VALUE_RE = re.compile(r"Invalid value for parameter '([^']+)': (.*)\. Expected one of (\[.*\])\.")
_NUMERIC = {"integer", "float", "number"}


@dataclass
class Tally:
    """Slots per JSON type, calls, and classified rejections."""

    calls: int = 0
    models: set[str] = field(default_factory=set)
    slots: Counter[str] = field(default_factory=Counter)
    kinds: Counter[str] = field(default_factory=Counter)


def _schema_types(function: dict[str, Any]) -> dict[str, str]:
    props = function.get("parameters", {}).get("properties", {})
    return {name: str(spec.get("type", "any")) for name, spec in props.items()}


def _count_slots(tally: Tally, prompt: dict[str, Any], answer: dict[str, Any]) -> None:
    """One slot per parameter the expected answer gives a value to (not only ``""``)."""
    functions = prompt["function"] if isinstance(prompt["function"], list) else [prompt["function"]]
    (name, params), = answer.items()
    schema = next((f for f in functions if f.get("name") == name), functions[0])
    types = _schema_types(schema)
    for param, allowed in params.items():
        if any(value != "" for value in allowed):
            kind = types.get(param, "any")
            tally.slots["number" if kind in _NUMERIC else kind] += 1


def classify(entry: dict[str, Any]) -> str:
    """The ablation's name for the mistake the checker rejected ``entry`` for."""
    kind = entry.get("error_type", "")
    message = entry["error"][0] if entry.get("error") else ""
    if kind == "type_error:simple":
        found = _TYPE_RE.search(message)
        expected, got = (found.group(1), found.group(2)) if found else ("?", "?")
        if got == "NoneType":
            return "null_value"
        if got == "str":
            if expected == "boolean":
                return "bool_as_text"
            if expected in _NUMERIC:
                return "number_as_text"
            return "collection_as_text"  # array or dict written as (Python/JSON) text
        if expected == "string" and got in ("int", "float"):
            return "number_for_string"
        if got == "list":
            return "list_for_scalar"
        return "other_type"
    if kind == "type_error:nested":
        if "None" in message:
            return "null_value"
        if "inner type <class 'float'>" in message:
            return "int_in_float_list (valid JSON)"
        return "other_type"
    if kind == "simple_function_checker:missing_required":
        return "missing_required"
    if kind == "value_error:others":
        found = _VALUE_RE.search(message)
        try:
            got = ast.literal_eval(found.group(2)) if found else None
            expected_values = ast.literal_eval(found.group(3)) if found else []
        except (ValueError, SyntaxError):
            return "value:other"
        numbers = [v for v in expected_values if isinstance(v, int | float) and not isinstance(v, bool)]
        if isinstance(got, int | float) and not isinstance(got, bool) and numbers:
            ratios = [got / v for v in numbers if v]
            if any(abs(r - 100) < 1e-6 or abs(r - 0.01) < 1e-9 for r in ratios):
                return "percent_scale"
            if got == 0:
                return "placeholder_zero"
            return "value:number"
        return "value:other"
    if kind == "value_error:string":
        return "value:empty_string" if re.search(r": ''\. Expected", message) else "value:string"
    if kind.startswith("value_error:"):
        return "value:list_or_dict"
    if kind.startswith("ast_decoder:"):
        return "malformed_output"
    if kind == "simple_function_checker:missing_optional":
        return "missing_optional (checker strictness)"
    return kind or "unknown"


def measure(score_dir: Path) -> Tally:
    tally = Tally()
    prompts: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
    for model_dir in sorted(p for p in score_dir.iterdir() if p.is_dir()):
        for category in CATEGORIES:
            path = model_dir / f"{category}_score.json"
            if not path.exists():
                continue
            lines = path.read_text(encoding="utf-8").splitlines()
            tally.calls += int(json.loads(lines[0])["total_count"])
            tally.models.add(model_dir.name)
            for line in lines[1:]:
                entry = json.loads(line)
                prompts[entry["prompt"]["id"]] = (entry["prompt"], entry["possible_answer"])
                tally.kinds[classify(entry)] += 1
    slots_once = Tally()
    for prompt, answer in prompts.values():
        _count_slots(slots_once, prompt, answer)
    # every model answered every prompt: slots over all calls = slots per prompt set × models
    factor = len(tally.models)
    tally.slots = Counter({k: v * factor for k, v in slots_once.slots.items()})
    return tally


SLOT_TYPE = {"bool_as_text": "boolean", "number_as_text": "number", "number_for_string": "string",
             "collection_as_text": "array+dict", "percent_scale": "number"}


def report(tally: Tally) -> str:
    total_slots = sum(tally.slots.values())
    rows = [f"{len(tally.models)} models, {tally.calls:,} calls, {total_slots:,} parameter slots "
            f"({', '.join(f'{k} {v:,}' for k, v in tally.slots.most_common())})", "",
            "| kind | rejections | per call | per slot of its type |", "|---|---|---|---|"]
    for kind, count in tally.kinds.most_common():
        slot_type = SLOT_TYPE.get(kind)
        if slot_type == "array+dict":
            denominator = tally.slots["array"] + tally.slots["dict"]
        elif slot_type:
            denominator = tally.slots[slot_type]
        else:
            denominator = total_slots
        rows.append(f"| {kind} | {count} | {count / tally.calls:.3%} | "
                    f"{count / denominator:.3%} ({slot_type or 'any'}) |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bfcl_rates", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("score_dir", type=Path,
                        help="BFCL-Result/<date>/score (one directory per model)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if not args.score_dir.is_dir():
        parser.error(f"{args.score_dir} is not a directory: give BFCL-Result/<date>/score")
    print(report(measure(args.score_dir)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
