"""Running an eval: every case under every configuration, ``repeat`` times, at most
``concurrency`` runs at once, each through the public facade.

Each configuration gets one :class:`~orchestration.orchestrator.Orchestrator` (its own
settings, LLM client and run store), so every run is recorded in the run store like any
run — ``dagwright runs show RUN_ID`` and the viewer show it — under the id
``eval-<eval id>-<config>-<case>-<repeat>``. With cassettes, the orchestrator's tool
transport and LLM client are wrapped to record or replay (:mod:`._cassette`), and each run
plays its own track. After a run: its checks (:mod:`._checks`), the judge when there is
one (:mod:`._judge`), its attribution (:mod:`._attribution`), its outcome class.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestration._version import __version__
from orchestration.catalog import Catalog
from orchestration.config import OrchestratorConfig
from orchestration.errors import ConfigError, DagwrightError, StoreError
from orchestration.eval._attribution import attribute
from orchestration.eval._baseline import compare_with_baseline
from orchestration.eval._cassette import (
    CassetteBook,
    CassetteError,
    Cassettes,
    CassetteTransport,
    cassette_llm,
    playing,
)
from orchestration.eval._checks import CheckResult, grade
from orchestration.eval._configs import EvalConfig
from orchestration.eval._dataset import Case, Dataset
from orchestration.eval._judge import JudgeUsage, judge_answer
from orchestration.eval._report import CaseResult, EvalReport, Outcome, summarise
from orchestration.llm._factory import client_from_config
from orchestration.llm.base import LLMClient
from orchestration.orchestrator import Orchestrator
from orchestration.result import RunResult

__all__ = ["ConfigsArgument", "arun_eval", "outcome_of", "run_eval"]

log = logging.getLogger("dagwright.eval")

ConfigsArgument = (Mapping[str, OrchestratorConfig | EvalConfig] | Sequence[EvalConfig] | None)
"""Configurations as a mapping name → settings (or :class:`EvalConfig`), a list of
:class:`EvalConfig`, or None: one configuration, ``default``, from the environment."""

def outcome_of(status: str | None, checks: Iterable[CheckResult], error: str | None) -> Outcome:
    """The class of a graded run (see :mod:`orchestration.eval._report`); the judge's
    verdict never changes it."""
    if error is not None:
        return "error"
    if not any(c.passed is False for c in checks if c.kind != "judge"):
        return "passed"
    return "succeeded_but_wrong" if status == "succeeded" else "failed"


@dataclass
class _Deployment:
    """One configuration, ready to run cases."""

    spec: EvalConfig
    orchestrator: Orchestrator
    book: CassetteBook | None


def run_eval(
    dataset: Dataset | str | os.PathLike[str],
    configs: ConfigsArgument = None,
    *,
    catalog: Catalog | str | os.PathLike[str] | None = None,
    repeat: int = 1,
    concurrency: int = 4,
    cassettes: Cassettes | None = None,
    judge: LLMClient | None = None,
    baseline: EvalReport | str | os.PathLike[str] | None = None,
    on_result: Callable[[CaseResult], None] | None = None,
) -> EvalReport:
    """Run every case of ``dataset`` under every configuration and grade it.

    ``dataset``: a :class:`Dataset` or a file (JSONL, YAML). ``configs``: see
    :data:`ConfigsArgument`. ``catalog``: the tools (default: each configuration's
    ``ORCH_CATALOG``). ``repeat``: runs per case and configuration (a real model answers
    differently each time). ``concurrency``: runs at once, over all configurations.
    ``cassettes``: record or replay tool and LLM calls. ``judge``: an LLM client grading
    answers against the cases' rubrics (off without it; counted apart). ``baseline``: an
    earlier report to compare with (``report.regressed``). ``on_result`` is called with
    each graded run as it finishes.

    Synchronous; inside an event loop use :func:`arun_eval`. Raises
    :class:`~orchestration.errors.ConfigError` (a dataset, configuration or cassette that
    cannot be used) before anything runs; a case that fails to run is an ``error`` result,
    never an exception.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise RuntimeError("run_eval() was called inside a running event loop; "
                           "use 'await arun_eval(...)' there")
    return asyncio.run(arun_eval(dataset, configs, catalog=catalog, repeat=repeat,
                                 concurrency=concurrency, cassettes=cassettes, judge=judge,
                                 baseline=baseline, on_result=on_result))


async def arun_eval(
    dataset: Dataset | str | os.PathLike[str],
    configs: ConfigsArgument = None,
    *,
    catalog: Catalog | str | os.PathLike[str] | None = None,
    repeat: int = 1,
    concurrency: int = 4,
    cassettes: Cassettes | None = None,
    judge: LLMClient | None = None,
    baseline: EvalReport | str | os.PathLike[str] | None = None,
    on_result: Callable[[CaseResult], None] | None = None,
) -> EvalReport:
    """:func:`run_eval` for code in an event loop."""
    if repeat < 1 or concurrency < 1:
        raise ConfigError(f"repeat ({repeat}) and concurrency ({concurrency}) must be at least 1")
    data = dataset if isinstance(dataset, Dataset) else Dataset.from_file(dataset)
    specs = _configs(configs)
    earlier = baseline if isinstance(baseline, EvalReport) or baseline is None \
        else EvalReport.load(baseline)
    started = time.time()
    eval_id = time.strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:6]
    judge_usage = JudgeUsage() if judge is not None else None
    async with contextlib.AsyncExitStack() as stack:
        if judge is not None:  # its pools belong to this loop, as the orchestrators' do
            stack.push_async_callback(judge.aclose)
        deployments = []
        catalogs: dict[str, Catalog] = {}
        for spec in specs:
            deployment = _deploy(spec, _catalog_for(spec, catalog, catalogs), cassettes)
            stack.push_async_callback(deployment.orchestrator.llm.aclose)
            stack.push_async_callback(deployment.orchestrator.aclose)
            deployments.append(deployment)
        semaphore = asyncio.Semaphore(concurrency)

        async def one(deployment: _Deployment, case: Case, number: int) -> CaseResult:
            async with semaphore:
                result = await _run_case(deployment, case, number, eval_id, judge, judge_usage)
            if on_result is not None:
                on_result(result)
            return result

        results = list(await asyncio.gather(*(
            one(d, case, n) for d in deployments for case in data.cases for n in range(repeat))))
        if cassettes is not None and cassettes.mode == "record":
            for deployment in deployments:
                assert deployment.book is not None
                deployment.book.save(deployment.orchestrator.redactor.known_secrets())
    report = EvalReport(
        dagwright_version=__version__,
        dataset={"name": data.name, "path": data.path, "sha256": data.sha256,
                 "cases": len(data.cases)},
        started_at=started, finished_at=time.time(), repeat=repeat, concurrency=concurrency,
        cassettes=None if cassettes is None else {
            "directory": str(cassettes.directory), "mode": cassettes.mode,
            "scope": sorted(cassettes.scope)},
        judge=judge_usage,
        configs=[summarise(d.spec.name, [r for r in results if r.config == d.spec.name],
                           source=d.spec.source, settings=d.spec.settings,
                           judged=judge is not None) for d in deployments],
        results=results)
    if earlier is not None:
        report.baseline = compare_with_baseline(
            report, earlier, source=str(baseline) if not isinstance(baseline, EvalReport)
            else "baseline")
    return report


def _configs(configs: ConfigsArgument) -> list[EvalConfig]:
    if configs is None:
        specs = [EvalConfig(name="default")]
    elif isinstance(configs, Mapping):
        specs = [EvalConfig(name=name, config=value) if isinstance(value, OrchestratorConfig)
                 else dataclasses.replace(value, name=name) for name, value in configs.items()]
    else:
        specs = list(configs)
    if not specs:
        raise ConfigError("no configuration to run: give at least one")
    names = [s.name for s in specs]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError(f"configuration name(s) {', '.join(twice)} given twice; each "
                          "configuration needs its own name")
    return specs


def _catalog_for(spec: EvalConfig, given: Catalog | str | os.PathLike[str] | None,
                 loaded: dict[str, Catalog]) -> Catalog:
    if spec.catalog is not None:
        return spec.catalog
    if isinstance(given, Catalog):
        return given
    path = given if given is not None else spec.config.catalog
    if path is None:
        raise ConfigError(f"configuration {spec.name!r} has no catalog: set ORCH_CATALOG (in "
                          "its env file or the environment) or pass a catalog (--catalog FILE)")
    key = str(Path(path).resolve())
    if key not in loaded:
        loaded[key] = Catalog.from_file(path)
    return loaded[key]


def _deploy(spec: EvalConfig, catalog: Catalog, cassettes: Cassettes | None) -> _Deployment:
    config = spec.config
    book = None
    if cassettes is not None:
        if config.backend != "local":
            raise CassetteError(
                f"configuration {spec.name!r} runs on Temporal (ORCH_BACKEND={config.backend}): "
                "its tool and LLM calls are made by the workers, where cassettes cannot record "
                "or replay them; record and replay with ORCH_BACKEND=local")
        book = cassettes.book(spec.name)
    replaying_llm = book is not None and book.mode == "replay" and "llm" in book.scope
    llm = spec.llm
    if llm is None and not replaying_llm:
        llm = client_from_config(config)
    if book is not None:
        llm = cassette_llm(llm, book)
    assert llm is not None
    orchestrator = Orchestrator(catalog, llm=llm, config=config,
                                transport_layer=CassetteTransport if book is not None else None)
    return _Deployment(spec, orchestrator, book)


async def _run_case(deployment: _Deployment, case: Case, number: int, eval_id: str,
                    judge: LLMClient | None, judge_usage: JudgeUsage | None) -> CaseResult:
    name = deployment.spec.name
    base = CaseResult(config=name, case=case.id, repeat=number, query=case.query,
                      outcome="error")
    run_id = f"eval-{eval_id}-{name}-{case.id}-{number}"
    track = deployment.book.track(case.id, number) if deployment.book is not None else None
    started = time.perf_counter()
    result: RunResult | None = None
    error: str | None = None
    try:
        with playing(track):
            result = await deployment.orchestrator.arun(case.query, plan=case.plan,
                                                        run_id=run_id, context=case.context)
    except StoreError as exc:
        result = exc.result if isinstance(exc.result, RunResult) else None
        error = f"the run store failed: {exc}"
    except DagwrightError as exc:
        error = f"{type(exc).__name__}: {exc}"
    except Exception as exc:  # one case must not end the eval: it is reported
        log.exception("eval: case %s under %s raised", case.id, name)
        error = f"the run raised {type(exc).__name__}: {exc}"
    duration = time.perf_counter() - started
    if track is not None and track.misses:
        more = f" (and {len(track.misses) - 1} more)" if len(track.misses) > 1 else ""
        error = f"replay: {track.misses[0]}{more} — in {track.book.path}, run {track.name}"
    if result is None:
        return base.model_copy(update={"run_id": run_id, "error": error, "duration_s": duration})
    checks = grade(case, result)
    verdict = await _judged(case, result, judge, judge_usage)
    return CaseResult(
        config=name, case=case.id, repeat=number, query=case.query, run_id=result.run_id,
        status=result.status, outcome=outcome_of(result.status, checks, error), checks=checks,
        judge=verdict, attribution=attribute(result), error=error, run_error=result.error,
        duration_s=duration)


async def _judged(case: Case, result: RunResult, judge: LLMClient | None,
                  usage: JudgeUsage | None) -> CheckResult | None:
    check = case.expect.answer.judge if case.expect.answer is not None else None
    if check is None:
        return None
    if judge is None or usage is None:
        return CheckResult(kind="judge", name=f"judge: {check.rubric}", passed=None,
                           detail="not judged: the judge is off (give one to run it)")
    return await judge_answer(judge, check, result, usage)
