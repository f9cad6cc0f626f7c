"""The engine both backends run: plan → execute (→ repair rounds) → answer, for one run.

:class:`RunEngine` moves a :class:`~orchestration.state.RunState` forward with the
:class:`~orchestration.services.RunServices` it is given and nothing else. The local
backend (:class:`~orchestration.orchestrator.Orchestrator`) gives it services backed by
this process — a pooled HTTP transport, the LLM client, the run store, real time; the
Temporal backend (:mod:`orchestration.temporal`) gives the very same engine services
whose side effects are Temporal activities and whose time is workflow time. So the same
plan gives the same :class:`~orchestration.result.RunResult` on both: there is one
engine, not two.

This is a composition root: with the facade and the CLI, the only place that imports
both ``planners`` and ``executors`` (see the import-linter contracts in pyproject.toml).
Everything the engine does that is not pure computation goes through the services —
waits through ``services.clock``, timestamps from ``services.clock.time()``, deadlines
in event-loop time — which is what lets it run inside a deterministic workflow.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import ValidationError

from executors._approvals import apply_decisions, expire_approvals
from executors._early import EarlySteps
from executors._executor import Executor
from executors._resend import CallInspector
from executors._resume import resume_point
from executors._step_runner import ResumePoint
from executors.layers import default_handlers
from executors.recovery import RecoveryHandler
from orchestration._answers import resolve_named_outputs
from orchestration._plan_cache import CacheKey, PlanCache
from orchestration._synthesis import answer_run
from orchestration._text import describe_validation_error
from orchestration.catalog import Catalog
from orchestration.config import OrchestratorConfig
from orchestration.errors import ConfigError, PlanIssue, PlanningError, PlanValidationError
from orchestration.layer_settings import LayerSettings
from orchestration.plan import Plan, Step, ValidatedPlan, validate_plan
from orchestration.result import PLAN_APPROVAL, Approval, PendingApproval, RunStatus, StepResult
from orchestration.services import RunServices
from orchestration.state import RunState
from orchestration.store import StoredRun
from orchestration.workflows import CheckedValues
from planners._references import check_reference_paths
from planners.planner import Planner
from planners.replan import RepairSituation

__all__ = ["RunEngine", "run_status"]


def _planner_for(config: OrchestratorConfig) -> Planner:
    """The default planner, with the prompt templates of ``ORCH_PLANNER_TEMPLATE_DIR``."""
    try:
        return Planner(template_dir=config.planner_template_dir)
    except (ValueError, OSError) as exc:
        raise ConfigError(f"ORCH_PLANNER_TEMPLATE_DIR={config.planner_template_dir}: {exc}") \
            from None


def run_status(steps: dict[str, StepResult]) -> RunStatus:
    """succeeded if every step succeeded, failed if none did, partial otherwise."""
    succeeded = sum(1 for s in steps.values() if s.status == "succeeded")
    if steps and succeeded == len(steps):
        return "succeeded"
    return "partial" if succeeded else "failed"


async def _stop(early: EarlySteps | None, reason: str) -> None:
    """Planning ended without a plan: stop and drop what started while it streamed."""
    if early is not None:
        await early.discard(reason)


class RunEngine:
    """Plans, executes and answers runs under one configuration.

    Holds what outlives a run — the planner and the executor (its prepared capabilities
    and recovery handlers) — and nothing of any one run: every run's state and services
    are arguments, so one engine serves many concurrent runs (and many workflows on one
    Temporal worker).
    """

    def __init__(
        self,
        config: OrchestratorConfig,
        *,
        planner: Planner | None = None,
        handlers: list[RecoveryHandler] | None = None,
    ) -> None:
        self.config = config
        self.planner = planner or _planner_for(config)
        self.executor = Executor(handlers if handlers is not None else default_handlers())

    async def run(
        self,
        run: RunState,
        services: RunServices,
        plan: Plan | dict[str, Any] | None = None,
        stored: StoredRun | None = None,
        approved: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        """Plan, execute (with repair rounds when enabled) and answer; ``run`` records it
        all. A resumed run (``stored``) keeps the plan it had and what it finished; a run
        that needs a person pauses with ``pending_approvals``; ``approved`` are the calls a
        person approved since (step id → the approved parameters). A run a budget stopped
        ends saying so (never ``succeeded``)."""
        await self._advance(run, services, plan, stored, approved)
        run.settle_budget()

    async def _advance(
        self,
        run: RunState,
        services: RunServices,
        plan: Plan | dict[str, Any] | None,
        stored: StoredRun | None,
        approved: dict[str, dict[str, Any]] | None,
    ) -> None:
        # the run deadline bounds planning and synthesis too, not only the steps
        config, clock = self.config, services.clock
        limit = f"the run deadline ({config.run_timeout_s:g}s, ORCH_RUN_TIMEOUT_S)"
        early: EarlySteps | None = None
        cache_key: CacheKey | None = None
        given: ValidatedPlan | Plan | dict[str, Any] | None = plan
        try:
            async with asyncio.timeout_at(services.deadline):
                if plan is None and run.plan is None and services.plans is not None:
                    cache_key, given = await self._cached_plan(run, services, services.plans)
                early = self._early_steps(run, services, given)
                validated = await self._plan(run, services, given, early)
        except TimeoutError:
            await _stop(early, "planning did not finish before the run deadline")
            run.fail(f"planning failed: {limit} passed before a plan was ready", at=clock.time())
            return
        except PlanningError as exc:
            await _stop(early, "planning failed")
            run.fail(f"planning failed: {exc}", at=clock.time())
            return
        except PlanValidationError as exc:  # only a plan given with plan= gets here
            run.fail("the plan given with plan= is invalid: "
                     + "; ".join(str(issue) for issue in exc.issues), at=clock.time())
            return
        except BaseException:  # cancelled (on purpose, or a shutdown) while planning
            await _stop(early, "the run stopped while its plan streamed")
            raise
        if run.plan is None:
            run.plan = validated.to_dict()
            if run.plan_source is None:
                run.plan_source = "caller" if plan is not None else "llm"
            services.recorder.save_run(run)
            services.events.emit("plan_ready", plan=run.plan, steps=len(validated.steps),
                                 source=run.plan_source)
        if config.approve_plans and not run.approved_plan:
            run.pending_approvals = [PendingApproval(
                step_id=PLAN_APPROVAL, params={"plan": run.plan}, requested_at=clock.time(),
                reason="ORCH_APPROVE_PLANS: a person approves each plan before any step runs")]
            services.events.emit("approval_required", step_id=PLAN_APPROVAL,
                                 params={"plan": run.plan},
                                 reason=run.pending_approvals[0].reason)
            run.pause()
            return
        if stored is not None:
            resume: ResumePoint | None = resume_point(run, services, stored, approved)
        else:
            resume = ResumePoint(approved=approved) if approved else None
        steps = await self.executor.execute(validated, run, services, resume=resume,
                                            early=early)
        del early  # handed over: not kept through the repair rounds and the answer
        if run.pending_approvals:
            run.pause()  # everything that could run did; the rest waits for a person
            return
        status = run_status(run.live_steps)
        if config.replan_max > 0 and any(s.status == "failed" for s in steps.values()):
            status = await self._replan_phase(run, services, validated)
        run.finish(status, at=clock.time())
        if (cache_key is not None and services.plans is not None and run.plan_source == "llm"
                and status == "succeeded" and not run.replans and run.plan is not None):
            # only a plan that worked is reused (a failed one may be the planner's mistake)
            await services.plans.keep(cache_key, run.plan, run_id=run.run_id, now=clock.time(),
                                      ttl_s=config.plan_cache_ttl_s)
        resolve_named_outputs(run)  # a workflow's outputs, whatever the answer strategy
        if run.budget_exceeded is not None:
            run.warn(f"answer synthesis skipped: {run.budget_exceeded.describe()}")
        elif config.synthesis_enabled and status != "failed":
            # streamed (answer_delta events) when someone follows the run live
            consumer = services.on_answer_delta or (
                services.events.answer_delta
                if services.stream_answer and services.events.watched else None)
            await answer_run(run, services, consumer)

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
        if run.replans:  # a resumed run: its last round's failures are what is still open
            open_ids = [sid for sid in run.replans[-1]["steps"]
                        if sid in run.steps and run.steps[sid].status != "succeeded"]
        else:
            open_ids = [sid for sid, r in run.steps.items() if r.status != "succeeded"]
        loop = asyncio.get_running_loop()
        for number in range(len(run.replans) + 1, self.config.replan_max + 1):
            if run.budget_exceeded is not None:
                run.warn(f"replan round {number} not attempted: {run.budget_exceeded.describe()}")
                break
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
            known.update(repair.steps)
            run.replans.append({"round": number, "replaces": open_ids,
                                "steps": list(repair.steps)})
            run.plan = Plan(steps=list(known.values()), reasoning=validated.plan.reasoning
                            ).model_dump(mode="json", exclude_none=True)
            services.recorder.save_run(run)  # a resumed run continues the repair round
            new = await self.executor.execute(repair, run, services)
            run.warn(f"replan round {number}: {', '.join(open_ids)} replaced by "
                     f"{', '.join(new)}")
            open_ids = [sid for sid, r in new.items() if r.status != "succeeded"]
            if not open_ids:
                break
        run.superseded = [sid for sid, r in run.steps.items()
                          if r.status != "succeeded" and sid not in open_ids]
        if run.replans and not open_ids:
            return "succeeded"
        return run_status(run.live_steps)

    async def _cached_plan(
        self, run: RunState, services: RunServices, cache: PlanCache
    ) -> tuple[CacheKey | None, ValidatedPlan | None]:
        """The key of this run's plan in the plan cache, and the plan kept under it (the
        run's plan then comes from the cache: no planning LLM call), or None.

        A follow-up in a session (a run whose planner sees the session's earlier runs)
        neither reads nor keeps a cached plan (no key): its plan answers the query *and*
        that history ("and for next week?"), and may cite the session's own outputs
        (``{{run:N.step}}``), so it is no plan for the query alone, and a plan made for the
        query alone would ignore the history. The first run of a session, with no history
        yet, is planned from its query only and uses the cache as any run does."""
        if services.session is not None and services.session.runs:
            services.observer.plan_cache(run.run_id, "skipped")
            return None, None
        model = str(getattr(services.llm.client, "model", None) or "unknown")
        # the run's tenant (its context's): plans are never shared across tenants
        key = cache.key(run.query, services.catalog, model,
                        self.planner.prompt_version(services.config), tenant=run.tenant)
        hit = await cache.lookup(key, services.catalog, services.config, run_id=run.run_id,
                                 now=services.clock.time())
        if hit is not None:
            run.plan_source = "cache"
        return key, hit

    def _early_steps(
        self, run: RunState, services: RunServices,
        plan: ValidatedPlan | Plan | dict[str, Any] | None,
    ) -> EarlySteps | None:
        """What starts steps while the plan streams, when this run's plan is streamed: a
        new plan (not the caller's, not a resumed run's), ``ORCH_STREAM_PLAN`` on, no
        person approving the plan first, and a client that streams — on Temporal the
        LLM is an activity that answers whole, so planning asks for the plan whole."""
        config = self.config
        if (plan is not None or run.plan is not None or not config.stream_plan
                or config.approve_plans or not services.llm.streams):
            return None
        return EarlySteps(self.executor, run, services)

    async def _plan(
        self, run: RunState, services: RunServices,
        plan: ValidatedPlan | Plan | dict[str, Any] | None, early: EarlySteps | None = None,
    ) -> ValidatedPlan:
        """The plan to execute: the run's own (a resumed run), the caller's (validated
        already: a cached one), or a new one (streamed to ``early`` when given)."""
        if isinstance(plan, ValidatedPlan):
            return plan
        if run.plan is not None:  # a resumed run keeps its plan, repair steps included
            model = Plan.model_validate(run.plan)
            return validate_plan(model, services.catalog,
                                 max_steps=max(self.config.max_plan_steps, len(model.steps)),
                                 earlier=services.earlier_outputs)
        if plan is None:
            return await self.planner.plan(run, services, listener=early)
        try:
            model = plan if isinstance(plan, Plan) else Plan.model_validate(plan)
        except ValidationError as exc:
            raise PlanValidationError([PlanIssue(
                None, "it does not have the shape of a plan ({\"steps\": [{id, tool, "
                      "capability, params, depends_on}]}): "
                      + describe_validation_error(exc, root="plan"))]) from None
        return validate_plan(model, services.catalog, max_steps=self.config.max_plan_steps,
                             max_depth=self.config.max_json_depth,
                             earlier=services.earlier_outputs)

    def call_inspector(self, layers: LayerSettings) -> CallInspector:
        """What the planner compares calls with (``RunServices.calls``): parameters bound
        and coerced exactly as this engine's step runner would."""
        return CallInspector(self.executor.capabilities, layers)

    # --- what workflows are checked with (workflows.StepChecks) -----------------------------
    def check_values(self, schema: dict[str, Any], values: dict[str, Any]) -> CheckedValues:
        """``values`` through layer 2 coercion (when on) and validation against ``schema``,
        as the prepare stage does a step's parameters: a workflow's inputs, and its
        parameters against their capability before anything runs."""
        prepared = self.executor.capabilities.for_schema(schema).prepare(
            values, coerce=self.config.type_coercion_enabled,
            max_depth=self.config.max_json_depth)
        return CheckedValues(prepared.params, list(prepared.coercions),
                             [(i.path, i.message, i.validator) for i in prepared.issues])

    def reference_issues(self, steps: list[Step], catalog: Catalog) -> list[PlanIssue]:
        """References whose path the upstream capability's output schema cannot provide
        (the planner's check of a plan's references)."""
        return check_reference_paths(steps, catalog)

    async def plan_only(self, run: RunState, services: RunServices) -> ValidatedPlan:
        """A plan for ``run.query`` without executing it."""
        return await self.planner.plan(run, services)

    # --- approvals ------------------------------------------------------------------------
    def decide(
        self, run: RunState, approvals: dict[str, Approval], services: RunServices
    ) -> dict[str, dict[str, Any]]:
        """Apply a person's decisions to a paused run (see
        :func:`executors._approvals.apply_decisions`); the approved parameters by step id.
        Raises :class:`~orchestration.errors.ApprovalError` and changes nothing when a
        decision does not fit."""
        return apply_decisions(run, approvals, services, self.executor.capabilities)

    def expire(self, run: RunState, now: float | None = None) -> list[str]:
        """Reject the pending approvals older than ``ORCH_APPROVAL_TIMEOUT_S`` (at ``now``,
        default the wall clock); the step ids rejected."""
        return expire_approvals(run, self.config.approval_timeout_s, now)
