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
from orchestration.debug_store import LLMDebugStore
from orchestration.errors import ConfigError, LLMError, PlanningError, PlanValidationError
from orchestration.llm.base import LLMClient
from orchestration.llm.factory import client_from_config
from orchestration.llm.gateway import DebugRecorder, LLMGateway
from orchestration.logging_setup import get_logger, log_context
from orchestration.plan import Plan, ValidatedPlan, validate_plan
from orchestration.redaction import Redactor
from orchestration.result import RunResult, RunStatus, RunUsage, StepResult
from orchestration.synthesis import synthesize
from orchestration.telemetry import Telemetry
from orchestration.telemetry import tracing as attr
from orchestration.transport import ToolTransport
from planners.planner import Planner

log = get_logger("dagwright.run")


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
        self.debug_store = LLMDebugStore.from_config(self.config, self.redactor)
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
        (tools' and the LLM client's) are closed here, inside it. The catalog's sources
        (MCP sessions) live on the catalog's own loop and stay open for the next run, and
        for runs of other threads; :meth:`close` ends them."""
        try:
            return await self.arun(query, plan=plan)
        finally:
            await self._close_loop_resources()
            await self.llm.aclose()

    async def arun(self, query: str, *, plan: Plan | dict[str, Any] | None = None) -> RunResult:
        """Plan ``query`` (or use the given ``plan``), execute it, synthesise the answer."""
        started = time.perf_counter()
        ctx = self._new_context(query)
        run_id = ctx.run_id
        with (
            log_context(run_id=run_id, redactor=self.redactor),
            self.telemetry.tracer.start_as_current_span(
                "invoke_agent dagwright",
                attributes={attr.GEN_AI_OPERATION: "invoke_agent",
                            attr.GEN_AI_AGENT_NAME: "dagwright", attr.RUN_ID: run_id},
            ) as span,
        ):
            trace_id = span.get_span_context().trace_id
            log.info("run started", extra={"planned_by": "caller" if plan is not None else "llm"})
            result = await self._run(ctx, plan)
            result.trace_id = f"{trace_id:032x}" if trace_id else None
            span.set_attribute("dagwright.run.status", result.status)
            if result.status != "succeeded":
                span.set_status(Status(StatusCode.ERROR, result.error or result.status))
            _log_run_end(result, time.perf_counter() - started)
        result.usage.wall_time_s = time.perf_counter() - started
        metrics = self.telemetry.metrics
        metrics.runs.labels(result.status).inc()
        metrics.run_duration.labels(result.status).observe(result.usage.wall_time_s)
        return result

    async def _run(self, ctx: RunContext, plan: Plan | dict[str, Any] | None) -> RunResult:
        def failed(error: str, plan_dict: dict[str, Any] | None = None) -> RunResult:
            return RunResult(run_id=ctx.run_id, query=ctx.query, status="failed", error=error,
                             plan=plan_dict, usage=ctx.usage, warnings=ctx.warnings)

        # the run deadline bounds planning and synthesis too, not only the steps
        limit = f"the run deadline ({self.config.run_timeout_s:g}s, ORCH_RUN_TIMEOUT_S)"
        try:
            async with asyncio.timeout_at(ctx.run_deadline):
                validated = await self._plan(ctx, plan)
        except TimeoutError:
            return failed(f"planning failed: {limit} passed before a plan was ready")
        except PlanningError as exc:
            return failed(f"planning failed: {exc}")
        except PlanValidationError as exc:
            return failed(str(exc))
        steps = await self.executor.execute(validated, ctx)
        plan_dict, status, superseded = validated.to_dict(), run_status(steps), set[str]()
        if self.config.replan_max > 0 and any(s.status == "failed" for s in steps.values()):
            steps, plan_dict, status, superseded = await self._replan_phase(ctx, validated, steps)
        result = RunResult(
            run_id=ctx.run_id, query=ctx.query, status=status,
            plan=plan_dict, steps=steps, usage=ctx.usage, warnings=ctx.warnings,
        )
        failed_steps = [s.error.describe() for s in steps.values()
                        if s.error is not None and s.id not in superseded]
        if failed_steps:
            result.error = "; ".join(failed_steps)
        if self.config.synthesis_enabled and result.status != "failed":
            try:
                async with asyncio.timeout_at(ctx.run_deadline):
                    result.answer = await synthesize(
                        ctx, {k: s for k, s in steps.items() if k not in superseded})
            except TimeoutError:
                result.warnings.append(f"answer synthesis skipped: {limit} passed")
            except LLMError as exc:
                result.warnings.append(f"answer synthesis failed: {exc}")
        return result

    async def _replan_phase(
        self, ctx: RunContext, validated: ValidatedPlan, steps: dict[str, StepResult]
    ) -> tuple[dict[str, StepResult], dict[str, Any], RunStatus, set[str]]:
        """Repair rounds after steps failed for good (at most ``replan_max``).

        Each round asks the planner (purpose ``replan``) for new steps that make up for the
        failed and skipped ones, runs them with the completed outputs in place, and adds
        their results next to the originals. Returns every result, the combined plan (with
        a ``replans`` record), the status and the ids the repairs superseded. The status is
        ``succeeded`` when the last round ran without a failure, since the planner was
        asked to cover everything still missing; otherwise it is computed over all steps.
        """
        from planners.replan import RepairSituation  # the facade composes the planner

        results, known = dict(steps), dict(validated.steps)
        rounds: list[dict[str, Any]] = []
        open_ids = [sid for sid, r in steps.items() if r.status != "succeeded"]
        loop = asyncio.get_running_loop()
        for number in range(1, self.config.replan_max + 1):
            if loop.time() >= ctx.run_deadline or ctx.llm.remaining_calls <= 0:
                ctx.warnings.append(f"replan round {number} not attempted: the run deadline "
                                    "or its LLM call budget is spent")
                break
            try:
                repair = await self.planner.replan(
                    ctx, RepairSituation(dict(known), dict(results), list(open_ids), number))
            except PlanningError as exc:
                ctx.warnings.append(f"replan round {number} failed: {exc}")
                break
            if repair is None:
                ctx.warnings.append(f"replan round {number}: the planner found no repair for "
                                    f"{', '.join(open_ids)}")
                break
            new = await self.executor.execute(repair, ctx)
            known.update(repair.steps)
            results.update(new)
            rounds.append({"round": number, "replaces": open_ids, "steps": list(new)})
            ctx.warnings.append(f"replan round {number}: {', '.join(open_ids)} replaced by "
                                f"{', '.join(new)}")
            open_ids = [sid for sid, r in new.items() if r.status != "succeeded"]
            if not open_ids:
                break
        superseded = {sid for sid, r in results.items()
                      if r.status != "succeeded" and sid not in open_ids}
        plan_dict = Plan(steps=list(known.values()), reasoning=validated.plan.reasoning
                         ).model_dump(mode="json", exclude_none=True)
        if rounds:
            plan_dict["replans"] = rounds
        repaired = bool(rounds) and not open_ids
        status: RunStatus = "succeeded" if repaired else run_status(
            {k: r for k, r in results.items() if k not in superseded})
        return results, plan_dict, status, superseded

    async def _plan(self, ctx: RunContext, plan: Plan | dict[str, Any] | None) -> ValidatedPlan:
        if plan is None:
            return await self.planner.plan(ctx.query, ctx)
        model = plan if isinstance(plan, Plan) else Plan.model_validate(plan)
        return validate_plan(model, ctx.catalog, max_steps=self.config.max_plan_steps)

    async def plan(self, query: str) -> ValidatedPlan:
        """Plan without executing (what ``dagwright plan`` shows)."""
        return await self.planner.plan(query, self._new_context(query))

    def _new_context(self, query: str) -> RunContext:
        """The state of one run: its id, usage, LLM gateway, transport and deadline."""
        run_id = uuid.uuid4().hex
        usage = RunUsage()
        return RunContext(
            # a snapshot: a catalog refresh during the run must not change what it planned with
            run_id=run_id, query=query, catalog=self.catalog.snapshot(), config=self.config,
            llm=LLMGateway(
                self.llm, telemetry=self.telemetry, usage=usage, run_id=run_id,
                max_calls=self.config.max_llm_calls_per_run,
                max_retries=self.config.llm_max_retries,
                retry_after_cap_s=self.config.retry_after_cap_s, clock=self.clock,
                debug_recorder=self._debug_recorder(),
            ),
            telemetry=self.telemetry, transport=self._transport(), clock=self.clock,
            usage=usage,
            run_deadline=asyncio.get_running_loop().time() + self.config.run_timeout_s,
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
            transport = ToolTransport(max_connections=max(10, self.config.max_concurrency * 2))
            self._transports[loop_id] = transport
        return transport

    async def _close_loop_resources(self) -> None:
        """Close the HTTP pool of the current loop."""
        transport = self._transports.pop(id(asyncio.get_running_loop()), None)
        if transport is not None:
            await transport.aclose()

    async def aclose(self) -> None:
        """Close the HTTP pool of the current loop and the catalog's sources (MCP sessions)."""
        await self._close_loop_resources()
        await self.catalog.aclose()

    def close(self) -> None:
        """Close the catalog's sources from code without an event loop (after sync runs)."""
        self.catalog.close()

    async def __aenter__(self) -> Orchestrator:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
        await self.llm.aclose()


def _log_run_end(result: RunResult, duration_s: float) -> None:
    """One line per failed step (its id on the record), then the run's outcome."""
    for step in result.steps.values():
        if step.status == "failed" and step.error is not None:
            error = step.error
            log.warning(
                "step %s failed: %s/%s after %d attempt(s): %s", step.id, error.category.value,
                error.code, len(step.attempts), error.message[:300],
                extra={"step_id": step.id, "capability": f"{step.tool}.{step.capability}",
                       "category": error.category.value, "code": error.code,
                       "attempts": len(step.attempts), "gave_up": error.details.get("gave_up")},
            )
    counts: dict[str, int] = {}
    for step in result.steps.values():
        counts[step.status] = counts.get(step.status, 0) + 1
    usage = result.usage
    log.log(
        20 if result.status == "succeeded" else 30,  # INFO / WARNING
        "run %s in %.0f ms: steps %s, %d LLM call(s)", result.status, duration_s * 1000,
        counts or "none", usage.llm_calls,
        extra={"status": result.status, "duration_ms": round(duration_s * 1000, 1),
               "steps": counts, "llm_calls": usage.llm_calls,
               "input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
               "error": (result.error or "")[:300] or None},
    )
