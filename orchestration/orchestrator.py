"""The facade services use: ``Orchestrator.run(query)`` plans, executes and answers.

It composes the planner, the executor and the defense layers; it is the one module of
``orchestration`` that imports ``planners`` and ``executors``.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from opentelemetry.trace import TracerProvider
from prometheus_client import CollectorRegistry
from pydantic import ValidationError

from executors._executor import Executor
from executors._resend import CallInspector
from executors.layers import default_handlers
from executors.recovery import RecoveryHandler
from orchestration._synthesis import synthesize
from orchestration._text import describe_validation_error
from orchestration._transport import ToolTransport
from orchestration.catalog import Catalog
from orchestration.clock import Clock
from orchestration.config import OrchestratorConfig
from orchestration.debug_store import LLMDebugStore
from orchestration.errors import (
    ConfigError,
    LLMError,
    PlanIssue,
    PlanningError,
    PlanValidationError,
)
from orchestration.layer_settings import LayerSettings
from orchestration.llm._factory import client_from_config
from orchestration.llm._gateway import DebugRecorder, LLMGateway
from orchestration.llm.base import LLMClient
from orchestration.plan import Plan, ValidatedPlan, validate_plan
from orchestration.redaction import Redactor
from orchestration.result import RunResult, RunStatus, StepResult
from orchestration.retry_policy import RetryPolicy
from orchestration.services import RunServices
from orchestration.state import RunState
from orchestration.telemetry import Telemetry
from orchestration.telemetry._observer import Observer
from planners.planner import Planner
from planners.replan import RepairSituation

__all__ = ["Orchestrator", "run_status"]


def run_status(steps: dict[str, StepResult]) -> RunStatus:
    """succeeded if every step succeeded, failed if none did, partial otherwise."""
    succeeded = sum(1 for s in steps.values() if s.status == "succeeded")
    if steps and succeeded == len(steps):
        return "succeeded"
    return "partial" if succeeded else "failed"


class Orchestrator:
    """Plans a query into a DAG of tool calls, runs it with the defense layers, answers.

    ``llm`` defaults to the client the config describes. ``tracer_provider`` and
    ``registry`` let a service route spans and metrics; by default the global OTel
    provider (a no-op until the service installs one) and Prometheus' default registry.
    ``handlers`` replaces the recovery chain (layers 3/4 and resilience) wholesale;
    ``clock`` is injectable so tests need not wait for backoff.
    """

    def __init__(
        self,
        catalog: Catalog,
        llm: LLMClient | None = None,
        config: OrchestratorConfig | None = None,
        *,
        tracer_provider: TracerProvider | None = None,
        registry: CollectorRegistry | None = None,
        handlers: list[RecoveryHandler] | None = None,
        clock: Clock | None = None,
        planner: Planner | None = None,
    ) -> None:
        self.config = config or OrchestratorConfig()
        self.catalog = catalog
        self.llm = llm if llm is not None else client_from_config(self.config)
        self.telemetry = Telemetry.create(tracer_provider, registry)
        self.redactor = Redactor.from_config(self.config, catalog)
        self.observer = Observer(self.telemetry, self.redactor)
        self.debug_store = LLMDebugStore.from_config(self.config, self.redactor)
        self.clock = clock or Clock()
        self.layers = LayerSettings.from_config(self.config)
        self.planner = planner or Planner()
        self.executor = Executor(handlers if handlers is not None else default_handlers())
        self._transports: dict[int, ToolTransport] = {}

    @classmethod
    def from_env(cls, **kwargs: Any) -> Orchestrator:
        """Everything from ``ORCH_*`` variables (``ORCH_CATALOG`` names the catalog file)."""
        config = kwargs.pop("config", None) or OrchestratorConfig()
        if config.catalog is None:
            raise ConfigError("ORCH_CATALOG is not set: it must name a YAML or JSON tool catalog")
        return cls(catalog=Catalog.from_file(config.catalog), config=config, **kwargs)

    # --- running --------------------------------------------------------------------
    def run(self, query: str, *, plan: Plan | dict[str, Any] | None = None) -> RunResult:
        """Synchronous :meth:`arun` for code without an event loop."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise RuntimeError("Orchestrator.run() was called inside a running event loop; "
                               "use 'await orchestrator.arun(query)' there")
        # The result is handed out through a holder rather than as the main task's result:
        # when asyncio.run() restores the SIGINT handler, CPython formats a repr() of the
        # old handler, which holds the main task and so would repr the whole RunResult.
        holder: list[RunResult] = []

        async def main() -> None:
            holder.append(await self._run_and_close(query, plan))

        asyncio.run(main())
        return holder[0]

    async def _run_and_close(self, query: str, plan: Plan | dict[str, Any] | None) -> RunResult:
        """One sync run: its event loop ends with it, so the HTTP pools made for that loop
        (tools' and the LLM client's) are closed here, inside it."""
        try:
            return await self.arun(query, plan=plan)
        finally:
            await self.aclose()
            await self.llm.aclose()

    async def arun(self, query: str, *, plan: Plan | dict[str, Any] | None = None) -> RunResult:
        """Plan ``query`` (or use the given ``plan``), execute it, synthesise the answer."""
        started = time.perf_counter()
        run = RunState(run_id=uuid.uuid4().hex, query=query)
        services = self._services(run)
        planned_by = "caller" if plan is not None else "llm"
        with self.observer.run(run, planned_by=planned_by) as observation:
            run.trace_id = observation.trace_id
            await self._run(run, services, plan)
        run.usage.wall_time_s = time.perf_counter() - started
        return run.to_result()

    async def _run(
        self, run: RunState, services: RunServices, plan: Plan | dict[str, Any] | None
    ) -> None:
        """Plan, execute (with repair rounds when enabled) and answer; ``run`` records it all."""
        # the run deadline bounds planning and synthesis too, not only the steps
        limit = f"the run deadline ({self.config.run_timeout_s:g}s, ORCH_RUN_TIMEOUT_S)"
        try:
            async with asyncio.timeout_at(services.deadline):
                validated = await self._plan(run, services, plan)
        except TimeoutError:
            run.fail(f"planning failed: {limit} passed before a plan was ready")
            return
        except PlanningError as exc:
            run.fail(f"planning failed: {exc}")
            return
        except PlanValidationError as exc:  # only a plan given with plan= gets here
            run.fail("the plan given with plan= is invalid: "
                     + "; ".join(str(issue) for issue in exc.issues))
            return
        run.plan = validated.to_dict()
        steps = await self.executor.execute(validated, run, services)
        status = run_status(steps)
        if self.config.replan_max > 0 and any(s.status == "failed" for s in steps.values()):
            status = await self._replan_phase(run, services, validated)
        run.finish(status)
        if self.config.synthesis_enabled and status != "failed":
            try:
                async with asyncio.timeout_at(services.deadline):
                    run.answer = await synthesize(run, services)
            except TimeoutError:
                run.warn(f"answer synthesis skipped: {limit} passed")
            except LLMError as exc:
                run.warn(f"answer synthesis failed: {exc}")

    async def _replan_phase(
        self, run: RunState, services: RunServices, validated: ValidatedPlan
    ) -> RunStatus:
        """Repair rounds after steps failed for good (at most ``replan_max``).

        Each round asks the planner (purpose ``replan``) for new steps that make up for the
        failed and skipped ones, and runs them with the completed outputs in place; their
        results join the originals in ``run``. The run's plan becomes the combined plan,
        ``run.replans`` records the rounds and ``run.superseded`` the step ids the repairs
        made up for. The status is ``succeeded`` when the last round ran without a
        failure, since the planner was asked to cover everything still missing; otherwise
        it is computed over the steps whose results stand.
        """
        known = dict(validated.steps)
        open_ids = [sid for sid, r in run.steps.items() if r.status != "succeeded"]
        loop = asyncio.get_running_loop()
        for number in range(1, self.config.replan_max + 1):
            if loop.time() >= services.deadline or services.llm.remaining_calls <= 0:
                run.warn(f"replan round {number} not attempted: the run deadline "
                         "or its LLM call budget is spent")
                break
            situation = RepairSituation(dict(known), dict(run.steps), list(open_ids), number)
            try:
                repair = await self.planner.replan(run, services, situation)
            except PlanningError as exc:
                run.warn(f"replan round {number} failed: {exc}")
                break
            if repair is None:
                run.warn(f"replan round {number}: the planner found no repair for "
                         f"{', '.join(open_ids)}")
                break
            new = await self.executor.execute(repair, run, services)
            known.update(repair.steps)
            run.replans.append({"round": number, "replaces": open_ids, "steps": list(new)})
            run.warn(f"replan round {number}: {', '.join(open_ids)} replaced by "
                     f"{', '.join(new)}")
            open_ids = [sid for sid, r in new.items() if r.status != "succeeded"]
            if not open_ids:
                break
        run.superseded = [sid for sid, r in run.steps.items()
                          if r.status != "succeeded" and sid not in open_ids]
        run.plan = Plan(steps=list(known.values()), reasoning=validated.plan.reasoning
                        ).model_dump(mode="json", exclude_none=True)
        if run.replans and not open_ids:
            return "succeeded"
        return run_status(run.live_steps)

    async def _plan(
        self, run: RunState, services: RunServices, plan: Plan | dict[str, Any] | None
    ) -> ValidatedPlan:
        if plan is None:
            return await self.planner.plan(run, services)
        try:
            model = plan if isinstance(plan, Plan) else Plan.model_validate(plan)
        except ValidationError as exc:
            raise PlanValidationError([PlanIssue(
                None, "it does not have the shape of a plan ({\"steps\": [{id, tool, "
                      "capability, params, depends_on}]}): "
                      + describe_validation_error(exc, root="plan"))]) from None
        return validate_plan(model, self.catalog, max_steps=self.config.max_plan_steps,
                             max_depth=self.config.max_json_depth)

    async def plan(self, query: str) -> ValidatedPlan:
        """Plan without executing (what ``dagwright plan`` shows)."""
        run = RunState(run_id=uuid.uuid4().hex, query=query)
        return await self.planner.plan(run, self._services(run))

    def _services(self, run: RunState) -> RunServices:
        """What one run uses: its LLM gateway (budget, usage), transport and deadline."""
        config = self.config
        return RunServices(
            catalog=self.catalog, config=config, layers=self.layers,
            llm=LLMGateway(
                self.llm, observer=self.observer, usage=run.usage, run_id=run.run_id,
                max_calls=config.max_llm_calls_per_run, policy=RetryPolicy.for_llm(config),
                clock=self.clock, debug_recorder=self._debug_recorder(),
            ),
            transport=self._transport(), observer=self.observer, clock=self.clock,
            deadline=asyncio.get_running_loop().time() + config.run_timeout_s,
            calls=CallInspector(self.executor.capabilities, self.layers),
        )

    def _debug_recorder(self) -> DebugRecorder | None:
        """The LLM debug store's recorder when ``ORCH_LLM_DEBUG_ENABLED`` is on."""
        if self.debug_store is None:
            return None
        recorder: DebugRecorder = self.debug_store.recorder_for(self.redactor)
        return recorder

    # --- resources ------------------------------------------------------------------
    def _transport(self) -> ToolTransport:
        """One pooled transport per event loop (httpx clients are bound to their loop)."""
        loop_id = id(asyncio.get_running_loop())
        transport = self._transports.get(loop_id)
        if transport is None:
            config = self.config
            transport = ToolTransport(max_connections=max(10, config.max_concurrency * 2),
                                      max_response_bytes=config.max_response_bytes,
                                      max_json_depth=config.max_json_depth)
            self._transports[loop_id] = transport
        return transport

    async def aclose(self) -> None:
        """Close the HTTP pool of the current loop (and the LLM client's, if it owns one)."""
        transport = self._transports.pop(id(asyncio.get_running_loop()), None)
        if transport is not None:
            await transport.aclose()

    async def __aenter__(self) -> Orchestrator:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
        await self.llm.aclose()
