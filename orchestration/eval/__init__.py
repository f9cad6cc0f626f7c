"""``dagwright eval``: measure a deployment on its own model and tools, layer by layer,
and keep it from regressing.

A **dataset** of cases (a query and what its run must show) is run under one or more
**configurations** (layers on and off, two models, two prompt settings), ``repeat``
times, a bounded number at once, through the public facade — each run is recorded in
the run store like any run. Each run is graded by its checks, its faults are
**attributed** to the defense layer that recovered each, read from the run's own records
(see :mod:`orchestration.eval._attribution`), and the eval reports the pass rate of each
configuration with a 95% interval, the per-layer table, the worst cases, and whether it
**regressed** against a baseline. Tool and LLM calls can be recorded into **cassettes**
and replayed without the tools or the model.

    from orchestration.eval import Cassettes, run_eval

    report = run_eval("config/eval/demo.jsonl",
                      {"layers-on": config_from_env_file("layers-on", "config/eval/layers-on.env")},
                      cassettes=Cassettes("config/eval/cassettes", "replay"))
    print(report.summary())
    report.write("eval-report")

See docs/eval.md.
"""

from orchestration.eval._attribution import (
    LAYERS,
    Attribution,
    Fault,
    GroundingRefusal,
    LayerSpend,
    attribute,
)
from orchestration.eval._baseline import (
    BaselineComparison,
    CaseChange,
    RateChange,
    compare_with_baseline,
)
from orchestration.eval._cassette import CASSETTE_MISS, CassetteError, Cassettes
from orchestration.eval._checks import CheckResult, grade
from orchestration.eval._configs import EvalConfig, config_from_env_file, parse_config_option
from orchestration.eval._dataset import (
    AnswerCheck,
    CallExpectation,
    Case,
    Dataset,
    DatasetError,
    Expect,
    JudgeCheck,
    OutputCheck,
)
from orchestration.eval._judge import JudgeUsage
from orchestration.eval._report import CaseResult, ConfigSummary, EvalReport, LayerRow, Outcome
from orchestration.eval._runner import arun_eval, run_eval
from orchestration.eval._stats import wilson_interval

__all__ = [
    "CASSETTE_MISS",
    "LAYERS",
    "AnswerCheck",
    "Attribution",
    "BaselineComparison",
    "CallExpectation",
    "Case",
    "CaseChange",
    "CaseResult",
    "CassetteError",
    "Cassettes",
    "CheckResult",
    "ConfigSummary",
    "Dataset",
    "DatasetError",
    "EvalConfig",
    "EvalReport",
    "Expect",
    "Fault",
    "GroundingRefusal",
    "JudgeCheck",
    "JudgeUsage",
    "LayerRow",
    "LayerSpend",
    "Outcome",
    "OutputCheck",
    "RateChange",
    "arun_eval",
    "attribute",
    "compare_with_baseline",
    "config_from_env_file",
    "grade",
    "parse_config_option",
    "run_eval",
    "wilson_interval",
]
