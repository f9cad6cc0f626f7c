"""The facade services use: ``Orchestrator.run(query)`` plans, executes and answers.

It composes the planner, the executor and the defense layers; it is the one module of
``orchestration`` that imports ``planners`` and ``executors``.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from opentelemetry.trace import Status, StatusCode, TracerProvider
from prometheus_client import CollectorRegistry

from executors.executor import Executor
from executors.layers import default_handlers
from executors.recovery import RecoveryHandler
from orchestration.catalog import Catalog
from orchestration.clock import Clock
from orchestration.config import OrchestratorConfig
from orchestration.context import RunContext
from orchestration.errors import ConfigError, LLMError, PlanningError, PlanValidationError
from orchestration.llm.base import LLMClient
from orchestration.llm.factory import client_from_config
from orchestration.llm.gateway import LLMGateway
from orchestration.plan import Plan, ValidatedPlan, validate_plan
from orchestration.result import RunResult, RunStatus, RunUsage, StepResult
from orchestration.synthesis import synthesize
from orchestration.telemetry import Telemetry
from orchestration.telemetry import tracing as attr
from orchestration.transport import ToolTransport
from planners.planner import Planner


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
        self.clock = clock or Clock()
        self.planner = planner or Planner()
        self.executor = Executor(handlers if handlers is not None else default_handlers(self.config))
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
            return asyncio.run(self._run_and_close(query, plan))
        raise RuntimeError("Orchestrator.run() was called inside a running event loop; "
                           "use 'await orchestrator.arun(query)' there")

    async def _run_and_close(self, query: str, plan: Plan | dict[str, Any] | None) -> RunResult:
        try:
            return await self.arun(query, plan=plan)
        finally:
            await self.aclose()

    async def arun(self, query: str, *, plan: Plan | dict[str, Any] | None = None) -> RunResult:
        """Plan ``query`` (or use the given ``plan``), execute it, synthesise the answer."""
        run_id = uuid.uuid4().hex
        usage = RunUsage()
        started = time.perf_counter()
        loop = asyncio.get_running_loop()
        ctx = RunContext(
            run_id=run_id, query=query, catalog=self.catalog, config=self.config,
            llm=LLMGateway(
                self.llm, telemetry=self.telemetry, usage=usage, run_id=run_id,
                max_calls=self.config.max_llm_calls_per_run,
                max_retries=self.config.llm_max_retries,
                retry_after_cap_s=self.config.retry_after_cap_s, clock=self.clock,
            ),
            telemetry=self.telemetry, transport=self._transport(), clock=self.clock,
            usage=usage, run_deadline=loop.time() + self.config.run_timeout_s,
        )
        with self.telemetry.tracer.start_as_current_span(
            "invoke_agent dagwright",
            attributes={attr.GEN_AI_OPERATION: "invoke_agent", attr.RUN_ID: run_id},
        ) as span:
            trace_id = span.get_span_context().trace_id
            result = await self._run(ctx, plan)
            result.trace_id = f"{trace_id:032x}" if trace_id else None
            span.set_attribute("dagwright.run.status", result.status)
            if result.status != "succeeded":
                span.set_status(Status(StatusCode.ERROR, result.error or result.status))
        result.usage.wall_time_s = time.perf_counter() - started
        metrics = self.telemetry.metrics
        metrics.runs.labels(result.status).inc()
        metrics.run_duration.labels(result.status).observe(result.usage.wall_time_s)
        return result

    async def _run(self, ctx: RunContext, plan: Plan | dict[str, Any] | None) -> RunResult:
        def failed(error: str, plan_dict: dict[str, Any] | None = None) -> RunResult:
            return RunResult(run_id=ctx.run_id, query=ctx.query, status="failed", error=error,
                             plan=plan_dict, usage=ctx.usage, warnings=ctx.warnings)

        try:
            validated = await self._plan(ctx, plan)
        except PlanningError as exc:
            return failed(f"planning failed: {exc}")
        except PlanValidationError as exc:
            return failed(str(exc))
        steps = await self.executor.execute(validated, ctx)
        result = RunResult(
            run_id=ctx.run_id, query=ctx.query, status=run_status(steps),
            plan=validated.to_dict(), steps=steps, usage=ctx.usage, warnings=ctx.warnings,
        )
        failed_steps = [s.error.describe() for s in steps.values() if s.error is not None]
        if failed_steps:
            result.error = "; ".join(failed_steps)
        if self.config.synthesis_enabled and result.status != "failed":
            try:
                result.answer = await synthesize(ctx, steps)
            except LLMError as exc:
                result.warnings.append(f"answer synthesis failed: {exc}")
        return result

    async def _plan(self, ctx: RunContext, plan: Plan | dict[str, Any] | None) -> ValidatedPlan:
        if plan is None:
            return await self.planner.plan(ctx.query, ctx)
        model = plan if isinstance(plan, Plan) else Plan.model_validate(plan)
        return validate_plan(model, self.catalog, max_steps=self.config.max_plan_steps)

    async def plan(self, query: str) -> ValidatedPlan:
        """Plan without executing (what ``dagwright plan`` shows)."""
        usage = RunUsage()
        run_id = uuid.uuid4().hex
        ctx = RunContext(
            run_id=run_id, query=query, catalog=self.catalog, config=self.config,
            llm=LLMGateway(self.llm, telemetry=self.telemetry, usage=usage, run_id=run_id,
                           max_calls=self.config.max_llm_calls_per_run, clock=self.clock),
            telemetry=self.telemetry, transport=self._transport(), clock=self.clock,
            usage=usage, run_deadline=asyncio.get_running_loop().time() + self.config.run_timeout_s,
        )
        return await self.planner.plan(query, ctx)

    # --- resources ------------------------------------------------------------------
    def _transport(self) -> ToolTransport:
        """One pooled transport per event loop (httpx clients are bound to their loop)."""
        loop_id = id(asyncio.get_running_loop())
        transport = self._transports.get(loop_id)
        if transport is None:
            transport = ToolTransport(max_connections=max(10, self.config.max_concurrency * 2))
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
