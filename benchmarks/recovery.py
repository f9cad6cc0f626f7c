"""Recovery ablation: how many runs end with the right answer as the layers are added.

40 multi-step scenarios over 10 in-process tools (:mod:`benchmarks.recovery_world`) are
planned by a seeded LLM simulator (:mod:`benchmarks.llm_sim`) that makes the mistakes
LLMs make at a stated rate, while tools fail transiently at a stated rate. Each scenario
runs ``--trials`` times (different seeds) under each configuration, the layers enabled
cumulatively: none, 1, 1+2, 1+2+3, 1+2+3+4 (and all four without resilience, to show
what transport retries contribute). Every configuration meets the same faults: the
draws depend only on the seed, the scenario and the fault site.

A run counts as **correct** only when it succeeded *and* every step's output equals the
ground truth (the scenario's correct plan run without faults): a layer that "fixes" a
value by guessing can turn a failure into a wrong answer, and that is counted as such.

Run: ``python -m benchmarks.recovery`` (``--quick`` for a few scenarios).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import itertools

from prometheus_client import CollectorRegistry

from benchmarks import common
from benchmarks.llm_sim import ALL_KINDS, FaultMix, PlannerSimulator, guidance_signature
from benchmarks.recovery_world import (
    Scenario,
    TransientFaults,
    TransientRates,
    build_catalog,
    scenarios,
)
from orchestration import Catalog, Orchestrator, OrchestratorConfig, RunResult, ScriptedLLM
from orchestration.clock import ManualClock
from orchestration.llm.base import LLMRequest

LAYERS_OFF = {"prompt_type_guidance": False, "type_coercion_enabled": False,
              "validation_feedback_enabled": False, "semantic_retry_enabled": False}
CONFIGS: list[tuple[str, dict[str, Any]]] = [
    ("none", LAYERS_OFF),
    ("1", {**LAYERS_OFF, "prompt_type_guidance": True}),
    ("1+2", {**LAYERS_OFF, "prompt_type_guidance": True, "type_coercion_enabled": True}),
    ("1+2+3", {**LAYERS_OFF, "prompt_type_guidance": True, "type_coercion_enabled": True,
               "validation_feedback_enabled": True}),
    ("1+2+3+4", {}),
    ("1+2+3+4, no resilience", {"retry_max_attempts": 1}),
    ("1+3, no coercion", {**LAYERS_OFF, "prompt_type_guidance": True,
                          "validation_feedback_enabled": True}),
]
"""Label and config overrides; every other setting is the default."""

GUIDE_CLAIMS = {"1": (70.0, 80.0), "1+2": (95.0, 95.0), "1+2+3": (99.0, 99.0)}
"""The reference guide's stated effectiveness of layers 1, 1+2 and 1+2+3 (percent)."""

CALL_TIMEOUT_S = 0.02


def base_config(**overrides: Any) -> OrchestratorConfig:
    """Synthesis and replanning off (they are not part of the ablation)."""
    return OrchestratorConfig(**{"llm_provider": "scripted", "synthesis_enabled": False, "store_url": "memory://",
                                 "replan_max": 0, **overrides})


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


@dataclass
class Truth:
    outputs: dict[str, Any]
    params: dict[str, dict[str, Any]]


async def ground_truth(items: list[Scenario]) -> dict[str, Truth]:
    """Each scenario's correct plan run once without faults: its outputs and bound params."""
    faults = TransientFaults(TransientRates(0.0, 0.0, 0.0), CALL_TIMEOUT_S)
    catalog = build_catalog(faults)
    orch = Orchestrator(catalog, ScriptedLLM([]), base_config(), registry=CollectorRegistry())
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


async def probe_prompts(catalog: Catalog, scenario: Scenario) -> tuple[str, str]:
    """The planner prompt with type guidance on and off, through the public API."""
    prompts: dict[bool, str] = {}
    for guidance in (True, False):
        seen: list[str] = []

        def capture(request: LLMRequest, seen: list[str] = seen) -> dict[str, Any]:
            seen.append(request.prompt_text)
            return scenario.plan

        orch = Orchestrator(catalog, ScriptedLLM(capture),
                            base_config(prompt_type_guidance=guidance), registry=CollectorRegistry())
        await orch.plan(scenario.query)
        prompts[guidance] = seen[0]
    return prompts[True], prompts[False]


@dataclass
class RunRecord:
    config: str
    scenario: str
    trial: int
    outcome: str  # correct | wrong | failed
    status: str
    kinds: list[str]
    transient: int
    guesses: int
    llm_calls: int
    input_tokens: int
    output_tokens: int
    by_purpose: dict[str, dict[str, int]] = field(default_factory=dict)


def classify(result: RunResult, truth: Truth) -> str:
    if result.status != "succeeded":
        return "failed"
    for sid, expected in truth.outputs.items():
        step = result.steps.get(sid)
        if step is None or step.status != "succeeded" or not _same(step.output, expected):
            return "wrong"
    return "correct"


async def run_ablation(
    items: list[Scenario], trials: int, mix: FaultMix, rates: TransientRates, seed: int,
    configs: list[tuple[str, dict[str, Any]]],
) -> tuple[list[RunRecord], dict[str, Any]]:
    truth = await ground_truth(items)
    faults = TransientFaults(rates, CALL_TIMEOUT_S)
    catalog = build_catalog(faults)
    prompt_on, prompt_off = await probe_prompts(catalog, items[0])
    signature = guidance_signature(prompt_on, prompt_off)
    sim = PlannerSimulator(catalog, items, {k: v.params for k, v in truth.items()}, mix, signature)
    info: dict[str, Any] = {"guidance_lines": len(signature.on_only), "guidance_distinguishes": signature.distinguishes,
            "guidance_detected_on": signature.guidance_in(prompt_on),
            "guidance_detected_off": signature.guidance_in(prompt_off)}
    records: list[RunRecord] = []
    for label, overrides in configs:
        orch = Orchestrator(catalog, ScriptedLLM(sim), base_config(**overrides),
                            registry=CollectorRegistry(), clock=ManualClock())
        started = time.perf_counter()
        for scenario in items:
            for trial in range(trials):
                run_seed = f"{seed}:{scenario.name}:{trial}"
                faults.start_run(run_seed)
                sim.start_run(scenario, run_seed)
                before = sum(faults.injected.values())
                result = await orch.arun(scenario.query)
                run = sim.run
                assert run is not None
                kinds = sorted({f.kind for f in run.faults}
                               | ({"malformed_json"} if run.had_malformed else set()))
                records.append(RunRecord(
                    config=label, scenario=scenario.name, trial=trial,
                    outcome=classify(result, truth[scenario.name]), status=result.status,
                    kinds=kinds,
                    transient=sum(faults.injected.values()) - before, guesses=run.guesses,
                    llm_calls=result.usage.llm_calls, input_tokens=result.usage.input_tokens,
                    output_tokens=result.usage.output_tokens,
                    by_purpose={k: dict(v) for k, v in result.usage.by_purpose.items()},
                ))
        await orch.aclose()
        done = [r for r in records if r.config == label]
        ok = sum(r.outcome == "correct" for r in done)
        print(f"{label:<24} correct {ok / len(done) * 100:5.1f}%  wrong "
              f"{sum(r.outcome == 'wrong' for r in done) / len(done) * 100:4.1f}%  "
              f"LLM calls/run {sum(r.llm_calls for r in done) / len(done):.2f}  "
              f"({time.perf_counter() - started:.1f} s)", flush=True)
    info["unknown_purposes"] = dict(sim.unknown_purposes)
    return records, info


# -------------------------------------------------------------------------------- report


def summarise(records: list[RunRecord], configs: list[str]) -> list[dict[str, Any]]:
    rows = []
    for label in configs:
        runs = [r for r in records if r.config == label]
        n = len(runs)
        purposes: dict[str, list[int]] = {}
        for r in runs:
            for purpose, usage in r.by_purpose.items():
                slot = purposes.setdefault(purpose, [0, 0, 0])
                slot[0] += usage.get("calls", 0)
                slot[1] += usage.get("input_tokens", 0)
                slot[2] += usage.get("output_tokens", 0)
        rows.append({
            "config": label, "runs": n,
            "correct": sum(r.outcome == "correct" for r in runs) / n * 100,
            "wrong": sum(r.outcome == "wrong" for r in runs) / n * 100,
            "failed": sum(r.outcome == "failed" for r in runs) / n * 100,
            "wrong_guessed": sum(r.outcome == "wrong" and r.guesses > 0 for r in runs) / n * 100,
            "wrong_placeholder": sum(r.outcome == "wrong" and r.guesses == 0
                                     and "placeholder" in r.kinds for r in runs) / n * 100,
            "llm_calls": sum(r.llm_calls for r in runs) / n,
            "input_tokens": sum(r.input_tokens for r in runs) / n,
            "output_tokens": sum(r.output_tokens for r in runs) / n,
            "by_purpose": {p: [v / n for v in vals] for p, vals in sorted(purposes.items())},
        })
    return rows


def by_kind(records: list[RunRecord], configs: list[str]) -> dict[str, dict[str, tuple[float, int]]]:
    """Per fault kind and configuration: % correct among runs that had that kind."""
    table: dict[str, dict[str, tuple[float, int]]] = {}
    kinds = [*ALL_KINDS, "transient"]
    for kind in kinds:
        row = {}
        for label in configs:
            runs = [r for r in records if r.config == label
                    and ((kind == "transient" and r.transient > 0) or kind in r.kinds)]
            if runs:
                row[label] = (sum(r.outcome == "correct" for r in runs) / len(runs) * 100, len(runs))
        if row:
            table[kind] = row
    clean = {label: [r for r in records if r.config == label and not r.kinds and not r.transient]
             for label in configs}
    if any(clean.values()):
        table["no fault at all"] = {
            label: (sum(r.outcome == "correct" for r in runs) / len(runs) * 100, len(runs))
            for label, runs in clean.items() if runs}
    return table


def plot(rows: list[dict[str, Any]], path: Path, caption: str) -> bool:
    """Success rate per configuration with the guide's claims, and LLM calls per run."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install -e '.[bench]'): no plot", flush=True)
        return False
    labels = [r["config"] for r in rows]
    x = list(range(len(rows)))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.6), gridspec_kw={"width_ratios": [3, 2]})
    correct = [r["correct"] for r in rows]
    wrong = [r["wrong"] for r in rows]
    ax1.bar(x, correct, color="#2b8a3e", label="correct answer")
    ax1.bar(x, wrong, bottom=correct, color="#f08c00", label="succeeded, wrong answer")
    for i, value in enumerate(correct):
        ax1.text(i, value - 6, f"{value:.1f}%", ha="center", color="white", fontsize=9,
                 fontweight="bold")
    first = True
    for i, label in enumerate(labels):
        if label in GUIDE_CLAIMS:
            low, high = GUIDE_CLAIMS[label]
            ax1.plot([i - 0.4, i + 0.4], [low, low], color="#c92a2a", lw=2,
                     label="reference guide's claim" if first else None)
            if high != low:
                ax1.add_patch(plt.Rectangle((i - 0.4, low), 0.8, high - low, color="#c92a2a",
                                            alpha=0.2))
            first = False
    ax1.set_xticks(x, [lbl.replace(", ", ",\n") for lbl in labels], fontsize=8)
    ax1.set_ylim(0, 105)
    ax1.set_ylabel("runs (%)")
    ax1.set_xlabel("layers enabled")
    ax1.set_title("Runs ending with the correct answer")
    ax1.legend(loc="lower right", fontsize=8)
    calls = [r["llm_calls"] for r in rows]
    ax2.bar(x, calls, color="#1c7ed6")
    ax2.set_xticks(x, [lbl.replace(", ", ",\n") for lbl in labels], fontsize=7, rotation=35,
                   ha="right")
    ax2.set_ylabel("LLM calls per run (mean)")
    ax2.set_title("Cost: LLM calls per run")
    ax3 = ax2.twinx()
    ax3.plot(x, [r["input_tokens"] + r["output_tokens"] for r in rows], color="#495057",
             marker="o")
    ax3.set_ylabel("tokens per run (mean, line)")
    ax3.set_ylim(0, max(r["input_tokens"] + r["output_tokens"] for r in rows) * 1.15)
    fig.suptitle(caption, fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def findings(rows: list[dict[str, Any]]) -> list[str]:
    """Headline results: each layer's gain and cost, and the silent wrong answers."""
    by = {r["config"]: r for r in rows}
    ladder = [c for c in ("none", "1", "1+2", "1+2+3", "1+2+3+4") if c in by]
    out = []
    steps = []
    for before, after in itertools.pairwise(ladder):
        gain = by[after]["correct"] - by[before]["correct"]
        calls = by[after]["llm_calls"] - by[before]["llm_calls"]
        layer = after.rsplit("+", 1)[-1]
        steps.append(f"layer {layer} {gain:+.1f} points ({calls:+.2f} LLM calls/run)")
    if steps:
        out.append(f"Correct answers go from {by[ladder[0]]['correct']:.1f}% with no layer to "
                   f"{by[ladder[-1]]['correct']:.1f}% with all four: " + "; ".join(steps) + ".")
    if "1+2+3+4" in by:
        top = by["1+2+3+4"]
        out.append(f"With all four layers {top['wrong']:.1f}% of runs succeed with a wrong answer "
                   f"— {top['wrong_guessed']:.1f}% after the model guessed a value it could not "
                   "know (layer 3 is shown neither the query nor the upstream outputs), "
                   f"{top['wrong_placeholder']:.1f}% from a 0 left where a reference belonged "
                   "that nothing can flag (latitude 0 is valid) — and "
                   f"{top['failed']:.1f}% fail.")
    if "1+3, no coercion" in by and "1+2+3" in by:
        a, b = by["1+3, no coercion"], by["1+2+3"]
        out.append(f"Layer 3 can do layer 2's job: without coercion it reaches {a['correct']:.1f}% "
                   f"(vs {b['correct']:.1f}% with it) but pays {a['llm_calls'] - b['llm_calls']:+.2f} "
                   "LLM calls per run for what coercion fixes for free.")
    if "1+2+3+4, no resilience" in by and "1+2+3+4" in by:
        a, b = by["1+2+3+4, no resilience"], by["1+2+3+4"]
        out.append(f"Without transport retries all four layers reach {a['correct']:.1f}% "
                   f"(vs {b['correct']:.1f}%): layer 4 declares some 503s transient, at "
                   f"{a['llm_calls'] - b['llm_calls']:+.2f} LLM calls per run, but timeouts stay fatal.")
    return out


def render(argv: list[str], facts: dict[str, Any], rows: list[dict[str, Any]],
           kinds: dict[str, dict[str, tuple[float, int]]], items: int, trials: int,
           mix: FaultMix, rates: TransientRates, seed: int, info: dict[str, Any],
           image: str | None) -> str:
    parts = [common.section_preamble("Recovery ablation: the four defense layers", "recovery",
                                     argv, facts)]
    parts.append(
        f"{items} multi-step scenarios (2–5 steps, 1–3 references between steps) over 10 "
        "in-process tools with strict JSON Schemas and business rules (stocks, currency, "
        "weather, portfolio, shipping, inventory, orders, calendar, notify; output schemas "
        "declared for the first three only, as in real catalogs), each run "
        f"{trials} times with different seeds (base seed {seed}) under each configuration: "
        f"{items * trials} runs per row. The planner is a seeded LLM simulator "
        "(`benchmarks/llm_sim.py`) that writes the scenario's correct plan with mistakes "
        "injected per parameter; it answers layer 3, layer 4 and planner feedback correctly "
        "only when the request carries what a model would need (the schema and the error "
        "for a type mistake, the query and the upstream outputs for a value left as 0/null, "
        "the tool's hint for a misspelt name, the query for a unit slip) and otherwise "
        f"declines, or guesses a wrong value {mix.guess_rate:.0%} of the time. Backoff waits "
        "are skipped with a manual clock; replanning and synthesis are off.\n")
    parts.append(f"**Fault mix** (per opportunity): {mix.describe()}. **Transient tool "
                 f"faults**: {rates.describe()}.\n")
    parts.append(
        "A run is **correct** when it succeeded and every step's output equals the ground "
        "truth; **wrong** when it succeeded with a different output (a silently wrong "
        "answer); **failed** otherwise. Layer 1 off is `prompt_type_guidance=False` — the "
        "simulator makes more type mistakes when the planner prompt lacks the type rules "
        "(it tells by comparing the prompt with ones rendered with guidance on and off: "
        f"{info['guidance_lines']} lines differ, detection "
        f"{'works' if info['guidance_detected_on'] and not info['guidance_detected_off'] else 'FAILED'}"
        "); layer 2 is `type_coercion_enabled`, 3 `validation_feedback_enabled`, 4 "
        "`semantic_retry_enabled`. Resilience (transport retries, `retry_max_attempts` 3) is "
        "on in every row except *no resilience* (`retry_max_attempts=1`). The last two rows "
        "are side experiments, not part of the cumulative ladder: all four layers without "
        "transport retries, and layer 3 doing layer 2's job (no coercion).\n")
    summary = findings(rows)
    if summary:
        parts.append("**Findings**\n\n" + "\n".join(f"- {line}" for line in summary) + "\n")
    if image:
        parts.append(f"![Recovery ablation]({image})\n")
    headers = ["layers", "runs", "correct", "wrong answer", "failed", "LLM calls / run",
               "input tokens / run", "output tokens / run", "calls by purpose / run"]
    table_rows = []
    for r in rows:
        purposes = ", ".join(f"{p} {v[0]:.2f}" for p, v in r["by_purpose"].items())
        table_rows.append([r["config"], r["runs"], f"**{r['correct']:.1f}%**",
                           f"{r['wrong']:.1f}% ({r['wrong_guessed']:.1f}% after a guess)",
                           f"{r['failed']:.1f}%", f"{r['llm_calls']:.2f}",
                           common.fmt(r["input_tokens"], 0), common.fmt(r["output_tokens"], 0),
                           purposes])
    parts.append(common.md_table(headers, table_rows) + "\n")
    parts.append("**Against the reference guide** (its figures are effectiveness claims "
                 "without a stated fault mix; ours are at the mix above):\n")
    guide_rows = []
    for r in rows:
        if r["config"] in GUIDE_CLAIMS:
            low, high = GUIDE_CLAIMS[r["config"]]
            claim = f"~{low:g}–{high:g}%" if low != high else f"~{low:g}%"
            guide_rows.append([r["config"], claim, f"{r['correct']:.1f}%"])
    all_four = next((r for r in rows if r["config"] == "1+2+3+4"), None)
    if all_four:
        guide_rows.append(["1+2+3+4", "(no claim)", f"{all_four['correct']:.1f}%"])
    parts.append(common.md_table(["layers", "guide claims", "dagwright, this mix"], guide_rows) + "\n")
    parts.append("**By fault kind**: % correct among the runs that had at least one fault of "
                 "that kind (runs often have several), with the number of such runs.\n")
    labels = [r["config"] for r in rows]
    kind_rows = []
    for kind, per in kinds.items():
        kind_rows.append([kind] + [f"{per[c][0]:.0f}% ({per[c][1]})" if c in per else "—"
                                   for c in labels])
    parts.append(common.md_table(["fault kind", *labels], kind_rows) + "\n")
    if info.get("unknown_purposes"):
        parts.append(f"LLM requests the simulator did not expect: {info['unknown_purposes']}.\n")
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m benchmarks.recovery", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_report_arguments(parser)
    parser.add_argument("--trials", type=int, help="runs per scenario and configuration (15)")
    parser.add_argument("--scenarios", type=int, help="use only the first N scenarios")
    parser.add_argument("--seed", type=int, default=1, help="base seed (1)")
    parser.add_argument("--transient-rate", type=float,
                        help="scale every transient fault rate by this factor (1.0)")
    parser.add_argument("--fault-scale", type=float,
                        help="scale every planner fault rate by this factor (1.0)")
    parser.add_argument("--plot", type=Path, help="PNG path (default docs/img/recovery_ablation.png "
                        "next to the report)")
    args = parser.parse_args(argv)

    all_items = scenarios()
    items = all_items[: args.scenarios] if args.scenarios else (
        all_items[::5] if args.quick else all_items)
    trials = args.trials or (1 if args.quick else 15)
    mix = FaultMix()
    if args.fault_scale:
        for name in ALL_KINDS:
            value = getattr(mix, name)
            setattr(mix, name, tuple(min(1.0, v * args.fault_scale) for v in value)
                    if isinstance(value, tuple) else min(1.0, value * args.fault_scale))
    rates = TransientRates()
    if args.transient_rate is not None:
        rates = TransientRates(rates.unavailable * args.transient_rate,
                               rates.timeout * args.transient_rate,
                               rates.wrapped_timeout * args.transient_rate)
    facts = common.machine_facts()
    records, info = asyncio.run(run_ablation(items, trials, mix, rates, args.seed, CONFIGS))
    labels = [c for c, _ in CONFIGS]
    rows = summarise(records, labels)
    kinds = by_kind(records, labels)
    if not args.no_report:
        image_path = args.plot or args.report.parent / "img" / "recovery_ablation.png"
        caption = (f"{len(items)} scenarios × {trials} seeds per configuration; fault mix and "
                   "transient rates as stated in docs/benchmarks.md")
        drawn = plot(rows, image_path, caption)
        try:
            image = image_path.resolve().relative_to(args.report.parent.resolve()).as_posix()
        except ValueError:
            image = str(image_path)
        body = render(argv, facts, rows, kinds, len(items), trials, mix, rates, args.seed, info,
                      image if drawn else None)
        common.write_section(args.report, "recovery", body)
        print(f"wrote the recovery section of {args.report}" + (f" and {image_path}" if drawn else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
