"""``dagwright eval``: run a dataset of cases under one or more configurations, report the
pass rate and what each defense layer recovered, and gate on a baseline (docs/eval.md)."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from typing import TextIO

from orchestration._extras import needs_extra
from orchestration.cli._errors import UsageError
from orchestration.cli._exit_codes import EXIT_EVAL_GATE, EXIT_OK
from orchestration.cli._parser import Commands, log_level, quiet
from orchestration.config import OrchestratorConfig
from orchestration.errors import DagwrightError
from orchestration.eval import (
    CaseResult,
    Cassettes,
    EvalConfig,
    config_from_env_file,
    parse_config_option,
    run_eval,
)


def register(commands: Commands) -> None:
    run = commands.add_parser(
        "eval", help="measure a deployment on a dataset of cases, layer by layer, per "
        "configuration; compare with a baseline (docs/eval.md)")
    run.add_argument("dataset", help="the cases: a .jsonl file (one case a line) or .yaml")
    run.add_argument("--config", action="append", default=[], metavar="NAME=ENV_FILE",
                     help="a configuration to run every case under: the ORCH_* settings of "
                     "ENV_FILE over the environment's (repeat it to compare several; default: "
                     "one configuration, 'default', from the environment)")
    run.add_argument("--catalog", help="tool catalog file for every configuration (default: "
                     "each configuration's ORCH_CATALOG)")
    run.add_argument("--repeat", type=int, default=1, metavar="N",
                     help="runs of each case under each configuration (default 1)")
    run.add_argument("--concurrency", type=int, default=4, metavar="N",
                     help="runs at once, over all configurations (default 4)")
    run.add_argument("--report", metavar="DIR", help="write report.json, report.md and its "
                     "plots into DIR")
    run.add_argument("--plots", choices=("svg", "png"), default="svg",
                     help="plot format of the Markdown report: svg (no dependency, default) or "
                     "png (matplotlib, the 'eval' extra)")
    cassettes = run.add_mutually_exclusive_group()
    cassettes.add_argument("--record", metavar="DIR", help="make every tool and LLM call for "
                           "real and write them down in cassettes in DIR (one file per "
                           "configuration)")
    cassettes.add_argument("--replay", metavar="DIR", help="answer every tool and LLM call from "
                           "the cassettes in DIR: no tool and no model is reached; a call that "
                           "was not recorded fails the case as an error")
    run.add_argument("--live-tools", action="store_true", help="with --record/--replay: "
                     "cassettes hold LLM calls only, tools are called live")
    run.add_argument("--judge", metavar="ENV_FILE", help="grade the answers' rubrics with the "
                     "LLM this env file describes (ORCH_LLM_*); off by default, and counted "
                     "apart from the pass rate")
    run.add_argument("--baseline", metavar="REPORT", help="an earlier report.json (or its "
                     "directory): exit 6 when a pass rate drops below the baseline's 95%% "
                     "interval or a case that passed now fails")
    run.add_argument("--min-pass-rate", type=float, metavar="RATE", help="exit 6 when a "
                     "configuration's pass rate is below RATE (0 to 1)")
    run.add_argument("--worst", type=int, default=5, metavar="N",
                     help="worst cases the summary lists (default 5)")
    run.add_argument("--json", action="store_true", help="print the report as JSON instead of "
                     "the summary")
    run.set_defaults(fn=cmd_eval)


def cmd_eval(args: argparse.Namespace, out: TextIO) -> int:
    from orchestration.llm._factory import client_from_config
    from orchestration.logging_setup import configure_logging

    if args.repeat < 1 or args.concurrency < 1:
        raise UsageError("--repeat and --concurrency must be at least 1",
                         "`dagwright eval --help` lists the options")
    if args.min_pass_rate is not None and not 0 <= args.min_pass_rate <= 1:
        raise UsageError(f"--min-pass-rate {args.min_pass_rate:g} is not a rate",
                         "give a rate from 0 to 1, e.g. --min-pass-rate 0.8")
    if args.baseline is not None:
        baseline = Path(args.baseline)
        earlier = baseline / "report.json" if baseline.is_dir() else baseline
        if not earlier.is_file():  # said before the cases run (and a model is paid)
            raise UsageError(f"no eval report at {earlier}",
                             "make a baseline first: `dagwright eval DATASET --report DIR` "
                             "writes DIR/report.json, then give --baseline DIR "
                             "(docs/eval.md)")
    if args.report and args.plots == "png" and importlib.util.find_spec("matplotlib") is None:
        # said before the cases run (and a model is paid), not when the report is drawn
        raise DagwrightError(needs_extra("PNG plots (--plots png)", "eval", "matplotlib"))
    if args.live_tools and not (args.record or args.replay):
        raise UsageError("--live-tools says what cassettes hold, and no cassettes are used",
                         "add --record DIR or --replay DIR (docs/eval.md#record-and-replay)")
    configure_logging(OrchestratorConfig(), level=log_level(args, OrchestratorConfig()))
    configs: list[EvalConfig] | None = None
    if args.config:
        configs = [config_from_env_file(*parse_config_option(text)) for text in args.config]
    cassettes = None
    if args.record or args.replay:
        cassettes = Cassettes(args.record or args.replay, "record" if args.record else "replay",
                              scope=("llm",) if args.live_tools else ("llm", "tools"))
    judge = None
    if args.judge:
        judge = client_from_config(config_from_env_file("judge", args.judge).config)
    total: list[int] = [0]

    def progress(result: CaseResult) -> None:
        total[0] += 1
        outcome = result.outcome.replace("_", " ")
        print(f"  [{total[0]}] {result.config}  {result.case}#{result.repeat}  {outcome}  "
              f"{result.duration_s:.1f}s", file=sys.stderr, flush=True)

    report = run_eval(args.dataset, configs, catalog=args.catalog, repeat=args.repeat,
                      concurrency=args.concurrency, cassettes=cassettes, judge=judge,
                      baseline=args.baseline, on_result=None if quiet(args) else progress)
    if args.json:
        out.write(report.to_json() + "\n")
    else:
        out.write(report.summary(worst=args.worst))
    if args.report:
        files = report.write(Path(args.report), plots=args.plots)
        if not args.json:
            out.write(f"report: {files[1]} (JSON: {files[0]})\n")
    code = EXIT_OK
    if report.regressed:
        code = EXIT_EVAL_GATE
    if args.min_pass_rate is not None:
        low = [c for c in report.configs if c.pass_rate < args.min_pass_rate]
        for summary in low:
            print(f"dagwright eval: {summary.name}: pass rate {summary.pass_rate:.1%} is under "
                  f"--min-pass-rate {args.min_pass_rate:.1%}", file=sys.stderr)
        if low:
            code = EXIT_EVAL_GATE
    if report.regressed:
        print("dagwright eval: regression against the baseline (see above)", file=sys.stderr)
    return code
