"""Recovery ablation: how many runs end with the right answer as the layers are added.

40 multi-step scenarios over 10 in-process tools (:mod:`benchmarks.recovery_world`) are
planned by a seeded LLM simulator (:mod:`benchmarks.llm_sim`) that makes the mistakes real
models make, in the forms they write them, while tools fail transiently. Two fault mixes:
**real** (rates measured on published leaderboard outputs, each with its source, see
:data:`benchmarks.llm_sim.REAL_MIX`) and **stress** (10–100× higher, to exercise every
path). Each scenario runs ``--trials`` times per configuration, the layers enabled
cumulatively (none, 1, 1+2, 1+2+3, 1+2+3+4), plus side rows: all four with grounding only
recorded (``grounded_corrections=False``), without transport retries, and layer 3 doing
layer 2's job. Every configuration meets the same draws: they depend only on the seed,
the scenario and the fault site (the prompt only scales a threshold).

A run is **correct** only when it succeeded *and* every step's output equals the ground
truth (the scenario's correct plan run without faults); **wrong** when it succeeded with
another output — the silent failure; **failed** otherwise. Proportions carry 95% Wilson
intervals; LLM calls per recovered fault a 95% delta-method interval of the ratio.

Run: ``python -m benchmarks.recovery`` (``--quick`` for a few scenarios).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from prometheus_client import CollectorRegistry

from benchmarks import common
from benchmarks.llm_sim import ALL_KINDS, MIXES, FaultMix, PlannerSimulator
from benchmarks.recovery_world import (
    Scenario,
    TransientFaults,
    TransientRates,
    build_catalog,
    scenarios,
)
from orchestration import Orchestrator, OrchestratorConfig, RunResult, ScriptedLLM
from orchestration.clock import ManualClock

LAYERS_OFF = {"prompt_type_guidance": False, "type_coercion_enabled": False,
              "validation_feedback_enabled": False, "semantic_retry_enabled": False}
CONFIGS: list[tuple[str, dict[str, Any]]] = [
    ("none", LAYERS_OFF),
    ("1", {**LAYERS_OFF, "prompt_type_guidance": True}),
    ("1+2", {**LAYERS_OFF, "prompt_type_guidance": True, "type_coercion_enabled": True}),
    ("1+2+3", {**LAYERS_OFF, "prompt_type_guidance": True, "type_coercion_enabled": True,
               "validation_feedback_enabled": True}),
    ("1+2+3+4", {}),
    ("1+2+3+4, ungrounded", {"grounded_corrections": False}),
    ("1+2+3+4, no resilience", {"retry_max_attempts": 1}),
    ("1+3, no coercion", {**LAYERS_OFF, "prompt_type_guidance": True,
                          "validation_feedback_enabled": True}),
]
"""Label and config overrides; every other setting is the default."""
LADDER = ("none", "1", "1+2", "1+2+3", "1+2+3+4")

TARGETS = {"correct": 99.5, "wrong": 0.5, "calls_per_recovered": 1.2}
"""At the real mix with all four layers: ≥ 99.5% correct, ≤ 0.5% succeeded-but-wrong,
≤ 1.2 LLM calls per recovered fault."""

CALL_TIMEOUT_S = 0.02
Z95 = 1.959963984540054


def base_config(**overrides: Any) -> OrchestratorConfig:
    """Synthesis and replanning off (they are not part of the ablation)."""
    return OrchestratorConfig(**{"llm_provider": "scripted", "synthesis_enabled": False, "store_url": "memory://",
                                 "replan_max": 0, **overrides})


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


# ------------------------------------------------------------------------------ statistics


def wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a proportion, in percent."""
    if n == 0:
        return (0.0, 100.0)
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return (max(0.0, centre - half) * 100, min(1.0, centre + half) * 100)


def ratio_interval(numerators: list[float], denominators: list[float],
                   z: float = Z95) -> tuple[float, float, float]:
    """``Σy / Σx`` over runs with its delta-method (linearised) 95% interval."""
    n = len(numerators)
    total_x = sum(denominators)
    if n == 0 or total_x == 0:
        return (math.nan, math.nan, math.nan)
    ratio = sum(numerators) / total_x
    mean_x = total_x / n
    residuals = [y - ratio * x for y, x in zip(numerators, denominators, strict=True)]
    variance = sum(r * r for r in residuals) / (n - 1) if n > 1 else 0.0
    half = z * math.sqrt(variance / n) / mean_x
    return ratio, max(0.0, ratio - half), ratio + half


def fmt_ci(value: float, low: float, high: float, digits: int = 1, unit: str = "%") -> str:
    if math.isnan(value):
        return "—"
    return f"{value:.{digits}f}{unit} [{low:.{digits}f}–{high:.{digits}f}]"


# ------------------------------------------------------------------------------ the runs


@dataclass
class Truth:
    outputs: dict[str, Any]
    params: dict[str, dict[str, Any]]


async def ground_truth(items: list[Scenario]) -> dict[str, Truth]:
    """Each scenario's correct plan run once without faults: its outputs and bound params."""
    faults = TransientFaults(TransientRates(0.0, 0.0, 0.0), CALL_TIMEOUT_S)
    orch = Orchestrator(build_catalog(faults), ScriptedLLM([]), base_config(),
                        registry=CollectorRegistry())
    out: dict[str, Truth] = {}
    for scenario in items:
        result = await orch.arun(scenario.query, plan=scenario.plan)
        if result.status != "succeeded":
            raise RuntimeError(f"ground truth of {scenario.name} failed: {result.error}")
        out[scenario.name] = Truth(
            outputs={sid: s.output for sid, s in result.steps.items()},
            params={sid: s.attempts[-1].params for sid, s in result.steps.items()},
        )
    return out


@dataclass
class RunRecord:
    mix: str
    config: str
    scenario: str
    trial: int
    outcome: str  # correct | wrong | failed
    kinds: list[str]
    mistakes: int  # planner mistakes injected (malformed plans included)
    transient: int  # transient tool faults met
    guesses: int
    slips: int
    refused: int  # corrections not sent for want of a verified source
    llm_calls: int
    recovery_calls: int  # LLM calls beyond the first plan call
    tokens: int
    by_purpose: dict[str, int] = field(default_factory=dict)


def classify(result: RunResult, truth: Truth) -> str:
    if result.status != "succeeded":
        return "failed"
    for sid, expected in truth.outputs.items():
        step = result.steps.get(sid)
        if step is None or step.status != "succeeded" or not _same(step.output, expected):
            return "wrong"
    return "correct"


def refused_corrections(result: RunResult) -> int:
    return sum(1 for s in result.steps.values() for a in s.attempts
               if a.outcome == "not_sent" and a.error is not None
               and a.error.code == "UNGROUNDED_CORRECTION")


async def run_mix(
    items: list[Scenario], trials: int, mix: FaultMix, rates: TransientRates, seed: int,
    configs: list[tuple[str, dict[str, Any]]], truth: dict[str, Truth],
) -> tuple[list[RunRecord], dict[str, int]]:
    faults = TransientFaults(rates, CALL_TIMEOUT_S)
    catalog = build_catalog(faults)
    sim = PlannerSimulator(catalog, items, {k: v.params for k, v in truth.items()}, mix)
    records: list[RunRecord] = []
    for label, overrides in configs:
        orch = Orchestrator(catalog, ScriptedLLM(sim), base_config(**overrides),
                            registry=CollectorRegistry(), clock=ManualClock())
        started = time.perf_counter()
        for scenario in items:
            for trial in range(trials):
                run_seed = f"{seed}:{mix.name}:{scenario.name}:{trial}"
                faults.start_run(run_seed)
                sim.start_run(scenario, run_seed)
                before = sum(faults.injected.values())
                result = await orch.arun(scenario.query)
                run = sim.run
                assert run is not None
                kinds = sorted({f.kind for f in run.faults}
                               | ({"malformed_json"} if run.had_malformed else set()))
                usage = result.usage
                records.append(RunRecord(
                    mix=mix.name, config=label, scenario=scenario.name, trial=trial,
                    outcome=classify(result, truth[scenario.name]), kinds=kinds,
                    mistakes=len(run.faults) + (1 if run.had_malformed else 0),
                    transient=sum(faults.injected.values()) - before, guesses=run.guesses,
                    slips=run.slips, refused=refused_corrections(result),
                    llm_calls=usage.llm_calls, recovery_calls=max(0, usage.llm_calls - 1),
                    tokens=usage.input_tokens + usage.output_tokens,
                    by_purpose={k: v.get("calls", 0) for k, v in usage.by_purpose.items()},
                ))
        await orch.aclose()
        print(line(summarise([r for r in records if r.config == label], label, mix.name)) +
              f"  ({time.perf_counter() - started:.1f} s)", flush=True)
    return records, dict(sim.unknown_purposes)


# -------------------------------------------------------------------------------- summary


def summarise(runs: list[RunRecord], label: str, mix: str) -> dict[str, Any]:
    n = len(runs)
    counts = {o: sum(r.outcome == o for r in runs) for o in ("correct", "wrong", "failed")}
    row: dict[str, Any] = {"mix": mix, "config": label, "runs": n}
    for outcome, count in counts.items():
        low, high = wilson(count, n)
        row[outcome] = (count / n * 100 if n else math.nan, low, high)
    calls = [float(r.llm_calls) for r in runs]
    mean = sum(calls) / n if n else math.nan
    sd = math.sqrt(sum((c - mean) ** 2 for c in calls) / (n - 1)) if n > 1 else 0.0
    row["llm_calls"] = (mean, mean - Z95 * sd / math.sqrt(n) if n else math.nan,
                        mean + Z95 * sd / math.sqrt(n) if n else math.nan)
    # LLM calls spent on recovery (every call but the first plan call), per fault that
    # ended in a correct run: all faults (planner mistakes and transient tool faults), and
    # planner mistakes only
    recovered_all = [float(r.mistakes + r.transient) if r.outcome == "correct" else 0.0 for r in runs]
    spent = [float(r.recovery_calls) for r in runs]
    row["calls_per_recovered"] = ratio_interval(spent, recovered_all)
    # planner mistakes alone: over the runs without transient faults, so that no call spent
    # on a tool's hiccup is charged to them
    calm = [r for r in runs if r.transient == 0]
    row["calls_per_recovered_mistake"] = ratio_interval(
        [float(r.recovery_calls) for r in calm],
        [float(r.mistakes) if r.outcome == "correct" else 0.0 for r in calm])
    row["faulty_runs"] = sum(1 for r in runs if r.mistakes or r.transient)
    row["mistake_runs"] = sum(1 for r in runs if r.mistakes)
    wrong_runs = [r for r in runs if r.outcome == "wrong"]
    row["guessed_wrong"] = sum(r.guesses > 0 for r in wrong_runs)
    row["slipped_wrong"] = sum(r.slips > 0 and not r.guesses for r in wrong_runs)
    row["null_wrong"] = sum("null_value" in r.kinds and not r.slips and not r.guesses
                            for r in wrong_runs)
    row["wrong_runs"] = len(wrong_runs)
    row["refused"] = sum(r.refused for r in runs)
    row["tokens"] = sum(r.tokens for r in runs) / n if n else math.nan
    purposes: dict[str, int] = {}
    for r in runs:
        for purpose, count in r.by_purpose.items():
            purposes[purpose] = purposes.get(purpose, 0) + count
    row["by_purpose"] = {p: c / n for p, c in sorted(purposes.items())}
    return row


def line(row: dict[str, Any]) -> str:
    c, w = row["correct"], row["wrong"]
    return (f"{row['mix']:<6} {row['config']:<24} correct {c[0]:6.2f}% [{c[1]:.2f}–{c[2]:.2f}]  "
            f"wrong {w[0]:5.2f}%  LLM calls/run {row['llm_calls'][0]:.2f}")


def by_kind(records: list[RunRecord], labels: list[str]) -> dict[str, dict[str, tuple[float, int]]]:
    """Per fault kind and configuration: % correct among runs that had that kind."""
    table: dict[str, dict[str, tuple[float, int]]] = {}
    for kind in [*ALL_KINDS, "transient"]:
        row = {}
        for label in labels:
            runs = [r for r in records if r.config == label
                    and ((kind == "transient" and r.transient > 0) or kind in r.kinds)]
            if runs:
                row[label] = (sum(r.outcome == "correct" for r in runs) / len(runs) * 100, len(runs))
        if row:
            table[kind] = row
    return table


# ---------------------------------------------------------------------------------- report


def plot(rows: dict[str, list[dict[str, Any]]], path: Path, caption: str) -> bool:
    """Per mix: correct and wrong answers per configuration, with 95% intervals."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install -e '.[bench]'): no plot", flush=True)
        return False
    fig, axes = plt.subplots(1, len(rows), figsize=(6.5 * len(rows), 4.8), squeeze=False)
    for ax, (mix, mix_rows) in zip(axes[0], rows.items(), strict=True):
        labels = [r["config"] for r in mix_rows]
        x = list(range(len(mix_rows)))
        correct = [r["correct"][0] for r in mix_rows]
        wrong = [r["wrong"][0] for r in mix_rows]
        errors = [[r["correct"][0] - r["correct"][1] for r in mix_rows],
                  [r["correct"][2] - r["correct"][0] for r in mix_rows]]
        ax.bar(x, correct, color="#2b8a3e", label="correct answer", yerr=errors, capsize=3,
               error_kw={"lw": 1})
        ax.bar(x, wrong, bottom=correct, color="#f08c00", label="succeeded, wrong answer")
        if mix == "real":
            ax.axhline(TARGETS["correct"], color="#c92a2a", lw=1, ls="--",
                       label=f"target {TARGETS['correct']}% (all four layers)")
        ax.set_xticks(x, labels, fontsize=7, rotation=30, ha="right")
        low = min(correct) - 5
        low = 0 if low < 50 else low
        ax.set_ylim(low, 101)
        for i, value in enumerate(correct):  # inside the bar, above the axis floor
            ax.text(i, low + (value - low) * 0.35, f"{value:.1f}%", ha="center", color="white",
                    fontsize=8, fontweight="bold", rotation=90)
        ax.set_ylabel("runs (%)")
        ax.set_title(f"{mix} mix: runs ending with the correct answer (95% CI)", fontsize=9)
        ax.legend(loc="lower right", fontsize=7)
    fig.suptitle(caption, fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def findings(rows: dict[str, list[dict[str, Any]]]) -> list[str]:
    out = []
    for mix, mix_rows in rows.items():
        by = {r["config"]: r for r in mix_rows}
        ladder = [c for c in LADDER if c in by]
        steps = []
        for before, after in itertools.pairwise(ladder):
            gain = by[after]["correct"][0] - by[before]["correct"][0]
            calls = by[after]["llm_calls"][0] - by[before]["llm_calls"][0]
            steps.append(f"layer {after.rsplit('+', 1)[-1]} {gain:+.2f} points "
                         f"({calls:+.3f} LLM calls/run)")
        if steps:
            out.append(f"**{mix}**: correct answers go from {by[ladder[0]]['correct'][0]:.2f}% "
                       f"with no layer to {by[ladder[-1]]['correct'][0]:.2f}% with all four: "
                       + "; ".join(steps) + ".")
        if "1+2+3+4" in by and "1+2+3+4, ungrounded" in by:
            g, u = by["1+2+3+4"], by["1+2+3+4, ungrounded"]
            out.append(
                f"**{mix}**: with grounding enforced {g['wrong'][0]:.2f}% of runs end wrong, "
                f"{u['wrong'][0]:.2f}% when it is only recorded ({g['refused']} correction(s) "
                f"refused in {g['runs']} runs). Of the {g['wrong_runs']} wrong run(s) left: "
                f"{g['slipped_wrong']} after a model slip with the information in front of it "
                "(a wrong value, or an honest citation of the wrong source — grounding checks "
                f"the claim, not that it is the right one), {g['null_wrong']} after layer 2 "
                "dropped a `null` written for an optional parameter so the tool's default "
                f"applied, {g['guessed_wrong']} after a guess.")
    return out


def target_rows(rows: dict[str, list[dict[str, Any]]]) -> list[list[str]]:
    real = {r["config"]: r for r in rows.get("real", [])}
    top = real.get("1+2+3+4")
    if top is None:
        return []
    correct, wrong = top["correct"], top["wrong"]
    calls = top["calls_per_recovered"]
    mistake_calls = top["calls_per_recovered_mistake"]

    def verdict(ok_point: bool, ok_interval: bool) -> str:
        if ok_point and ok_interval:
            return "met (whole interval)"
        return "met (point estimate; the interval crosses the target)" if ok_point else "**missed**"

    return [
        ["correct answers", f"≥ {TARGETS['correct']}%", fmt_ci(*correct, digits=2),
         verdict(correct[0] >= TARGETS["correct"], correct[1] >= TARGETS["correct"])],
        ["succeeded but wrong", f"≤ {TARGETS['wrong']}%", fmt_ci(*wrong, digits=2),
         verdict(wrong[0] <= TARGETS["wrong"], wrong[2] <= TARGETS["wrong"])],
        ["LLM calls per recovered fault", f"≤ {TARGETS['calls_per_recovered']}",
         fmt_ci(*calls, digits=3, unit=""),
         verdict(calls[0] <= TARGETS["calls_per_recovered"],
                 calls[2] <= TARGETS["calls_per_recovered"])],
        ["… per recovered planner mistake, runs without tool faults (stricter)",
         f"≤ {TARGETS['calls_per_recovered']}",
         fmt_ci(*mistake_calls, digits=3, unit=""),
         verdict(mistake_calls[0] <= TARGETS["calls_per_recovered"],
                 mistake_calls[2] <= TARGETS["calls_per_recovered"])],
    ]


def render(argv: list[str], facts: dict[str, Any], rows: dict[str, list[dict[str, Any]]],
           kinds: dict[str, dict[str, dict[str, tuple[float, int]]]], items: int,
           trials: dict[str, int], rates: TransientRates, seed: int, image: str | None,
           unknown: dict[str, int]) -> str:
    parts = [common.section_preamble("Recovery ablation: the four defense layers", "recovery",
                                     argv, facts)]
    parts.append(
        f"{items} multi-step scenarios (2–5 steps, 1–3 references between steps) over 10 "
        "in-process tools with strict JSON Schemas and business rules (output schemas "
        "declared for 4 of them, as in real catalogs), run "
        + " and ".join(f"{t} times per scenario at the *{m}* mix" for m, t in trials.items())
        + f" (base seed {seed}) under each configuration. The planner is a seeded LLM "
        "simulator (`benchmarks/llm_sim.py`) that writes each scenario's correct plan with "
        "mistakes injected per parameter in the forms real models wrote them (`\"True\"`, "
        "`\"['a', 'b']\"`, `\"east, west\"`, `[\"TSLA\"]` for a string, a call written where "
        "its result belongs, a required value left out) — not as the inverse of layer 2's "
        "rules, so some of them layer 2 cannot fix. It answers layers 3 and 4 from what the "
        "request shows, is wrong 2.5% of the time even when the information is there (half "
        "of those with an honest citation of the wrong source, which grounding cannot "
        "catch), and guesses 35% of the time when it is not. Layer 1's effect comes from the "
        "planner prompt's content: the simulator reads the type the prompt states for each "
        "parameter and whether it states a rule against the wrong form. Backoff waits are "
        "skipped with a manual clock; replanning and synthesis are off.\n")
    parts.append("**Where the rates come from.** The *real* mix (per opportunity):\n")
    real = MIXES["real"]
    source_rows = [[k, f"{real.rates[k]:.4%}".rstrip("0").rstrip("."), real.sources.get(k, "")]
                   for k in ALL_KINDS if k in real.rates]
    for key in ("answer_error_rate", "guess_rate", "no_type_factor", "rule_factor",
                "no_fields_factor"):
        source_rows.append([key, "", real.sources[key]])
    parts.append(common.md_table(["kind", "rate", "source"], source_rows) + "\n")
    parts.append(
        "BFCL's checker stops at a call's first problem, so its rates are lower bounds. "
        "Two measured mistakes are **outside** the simulation because no layer can see "
        "them: a well-typed value that differs from the right one (BFCL: 2.5% of calls; "
        "partly ground-truth ambiguity) and a percentage written as a fraction or the "
        "reverse (0.41% of calls, `5` for `0.05`). A service should expect those on top of "
        "the figures below. The *stress* mix: "
        f"{MIXES['stress'].describe()}; {MIXES['stress'].sources['all']}. **Transient tool "
        f"faults** (both mixes, assumed): {rates.describe()}.\n")
    parts.append(
        "A run is **correct** when it succeeded and every step's output equals the ground "
        "truth; **wrong** when it succeeded with a different output (the silent failure); "
        "**failed** otherwise. Layer 1 off is `prompt_type_guidance=False` (raw JSON "
        "schemas, no type rules); 2 `type_coercion_enabled`, 3 `validation_feedback_enabled`, "
        "4 `semantic_retry_enabled` with `grounded_corrections` (a changed value is sent "
        "only when its claimed source checks out); *ungrounded* records the verdicts but "
        "sends anyway. *LLM calls per recovered fault*: the LLM calls beyond each run's "
        "first plan call, over the faults (planner mistakes and transient tool faults) of "
        "the runs that ended correct; *… / recovered mistake* counts planner mistakes only, "
        "over the runs that met no transient tool fault. *Refused*: corrections not sent "
        "for want of a verified source. Brackets: 95% intervals (Wilson for proportions, "
        "normal for the mean, delta method for the ratios).\n")
    summary = findings(rows)
    if summary:
        parts.append("**Findings**\n\n" + "\n".join(f"- {s}" for s in summary) + "\n")
    targets = target_rows(rows)
    if targets:
        parts.append("**Targets** (real mix, all four layers):\n")
        parts.append(common.md_table(["target", "wanted", "measured [95% CI]", "verdict"],
                                     targets) + "\n")
    parts.append(
        "**What this cannot show.** The planner and its repairs are simulated: the rates "
        "are real models' where a measurement exists, the model's behaviour around them is "
        "a stated model (the assumed factors above, the split of slips). Layer 1 is credited "
        "only with what its prompt text can plausibly change (form mistakes, fields of "
        "references), at an assumed factor, so its gain here is a consequence of that "
        "assumption, not a measurement. The transient fault rates are assumed. Layer 4's "
        "big step at the real mix is mostly the transient override of 503s that wrap a "
        "timeout with `retryable: false`, not parameter repair: real planner mistakes are "
        "rare enough (a few per hundred runs) that the targets are met mostly by handling "
        "tool faults.\n")
    if image:
        parts.append(f"![Recovery ablation]({image})\n")
    headers = ["mix", "layers", "runs", "correct", "wrong answer", "failed", "LLM calls / run",
               "LLM calls / recovered fault", "… / recovered mistake", "refused",
               "calls by purpose / run"]
    table = []
    for mix_rows in rows.values():
        for r in mix_rows:
            table.append([
                r["mix"], r["config"], r["runs"], f"**{fmt_ci(*r['correct'], digits=2)}**",
                fmt_ci(*r["wrong"], digits=2), fmt_ci(*r["failed"], digits=2),
                fmt_ci(*r["llm_calls"], digits=3, unit=""),
                fmt_ci(*r["calls_per_recovered"], digits=3, unit=""),
                fmt_ci(*r["calls_per_recovered_mistake"], digits=3, unit=""), r["refused"],
                ", ".join(f"{p} {v:.3f}" for p, v in r["by_purpose"].items()),
            ])
    parts.append(common.md_table(headers, table) + "\n")
    for mix, table_kinds in kinds.items():
        labels = [r["config"] for r in rows[mix]]
        parts.append(f"**By fault kind, {mix} mix**: % correct among the runs that had at "
                     "least one fault of that kind (runs may have several), with the number of "
                     "such runs.\n")
        kind_rows = [[kind] + [f"{per[c][0]:.0f}% ({per[c][1]})" if c in per else "—"
                               for c in labels] for kind, per in table_kinds.items()]
        parts.append(common.md_table(["fault kind", *labels], kind_rows) + "\n")
    if unknown:
        parts.append(f"LLM requests the simulator did not expect: {unknown}.\n")
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m benchmarks.recovery", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_report_arguments(parser)
    parser.add_argument("--trials", type=int,
                        help="runs per scenario and configuration, both mixes (real 100, stress 15)")
    parser.add_argument("--real-trials", type=int, help="runs per scenario at the real mix")
    parser.add_argument("--stress-trials", type=int, help="runs per scenario at the stress mix")
    parser.add_argument("--mixes", default="real,stress", help="which mixes (real,stress)")
    parser.add_argument("--scenarios", type=int, help="use only the first N scenarios")
    parser.add_argument("--seed", type=int, default=1, help="base seed (1)")
    parser.add_argument("--transient-rate", type=float,
                        help="scale every transient fault rate by this factor (1.0)")
    parser.add_argument("--plot", type=Path, help="PNG path (default docs/img/recovery_ablation.png "
                        "next to the report)")
    args = common.parse_args(parser, argv)

    all_items = scenarios()
    items = all_items[: args.scenarios] if args.scenarios else (
        all_items[::5] if args.quick else all_items)
    mixes = [m.strip() for m in args.mixes.split(",") if m.strip()]
    unknown_mixes = [m for m in mixes if m not in MIXES]
    if unknown_mixes:
        parser.error(f"unknown mix {unknown_mixes[0]!r}; choose from {', '.join(MIXES)}")
    defaults = {"real": 2 if args.quick else 100, "stress": 1 if args.quick else 15}
    trials = {m: (getattr(args, f"{m}_trials") or args.trials or defaults[m]) for m in mixes}
    rates = TransientRates()
    if args.transient_rate is not None:
        rates = TransientRates(rates.unavailable * args.transient_rate,
                               rates.timeout * args.transient_rate,
                               rates.wrapped_timeout * args.transient_rate)
    facts = common.machine_facts()

    async def everything() -> tuple[dict[str, list[RunRecord]], dict[str, int]]:
        truth = await ground_truth(items)
        out: dict[str, list[RunRecord]] = {}
        unknown: dict[str, int] = {}
        for mix in mixes:
            out[mix], seen = await run_mix(items, trials[mix], MIXES[mix], rates, args.seed,
                                           CONFIGS, truth)
            for key, value in seen.items():
                unknown[key] = unknown.get(key, 0) + value
        return out, unknown

    records, unknown = asyncio.run(everything())
    labels = [c for c, _ in CONFIGS]
    rows = {mix: [summarise([r for r in recs if r.config == label], label, mix) for label in labels]
            for mix, recs in records.items()}
    kinds = {mix: by_kind(recs, labels) for mix, recs in records.items()}
    for target in target_rows(rows):
        print(" | ".join(target))
    if not args.no_report:
        image_path = args.plot or args.report.parent / "img" / "recovery_ablation.png"
        caption = (f"{len(items)} scenarios; "
                   + ", ".join(f"{m} mix {t} seeds" for m, t in trials.items())
                   + " per configuration; rates and sources in docs/benchmarks.md")
        drawn = plot(rows, image_path, caption)
        try:
            image = image_path.resolve().relative_to(args.report.parent.resolve()).as_posix()
        except ValueError:
            image = str(image_path)
        body = render(argv, facts, rows, kinds, len(items), trials, rates, args.seed,
                      image if drawn else None, unknown)
        common.write_section(args.report, "recovery", body)
        print(f"wrote the recovery section of {args.report}" + (f" and {image_path}" if drawn else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
