"""The LLM planner: ask for a plan, read it, validate it, and recover from bad answers.

Every failure of a planner call is classified, and the class decides what happens:

==========================  ==================================================  =========
failure                     what the planner does                               reason
==========================  ==================================================  =========
unreadable answer           ask again, quoting the parse error                  malformed
(not JSON, wrong shape, a
broken tool call, a body
the client could not read)
``finish_reason=length``    ask again for a more concise plan                   length
invalid plan (catalog,      ask again, listing every issue                      validation
DAG, reference paths)
rate limit, timeout,        nothing more: the LLM gateway already retried with  —
connection, 5xx             backoff (``llm_max_retries``); the error is reported
content filter, auth,       not retried (asking again cannot help, or must not)  —
budget, anything else
==========================  ==================================================  =========

Retries are bounded by ``planner_max_retries``; their feedback text comes from a
:class:`~planners.feedback.FeedbackFormatter`. Every attempt is kept on the
:class:`PlanningError` and recorded as a ``plan_attempt`` event on the plan span, with
the catalog selection (what was left out of the prompt) as a ``catalog_selection`` event.

**Streamed plans.** Given a :class:`~planners._plan_stream.StepListener`, :meth:`Planner.plan`
streams each attempt and tells the listener about every step as soon as it is complete
and valid on its own (:mod:`planners._plan_stream`), so the engine can start it before
the answer ends. The answer is still accepted or rejected whole, exactly as above; an
attempt that is not accepted — rejected, failed, or shown by one of its steps to be
unacceptable — is ``discard``-ed before the next attempt, so what was started for it is
stopped and thrown away.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from contextlib import aclosing
from dataclasses import fields
from typing import Any, TypeVar

from orchestration._version import __version__
from orchestration.config import OrchestratorConfig
from orchestration.errors import (
    LLMError,
    LLMErrorKind,
    PlanningAttempt,
    PlanningError,
    PlanParseError,
    PlanValidationError,
)
from orchestration.llm.base import LLMRequest, LLMResponse
from orchestration.llm.embeddings import EmbeddingCache, EmbeddingsClient
from orchestration.plan import CheckedSteps, ValidatedPlan, validate_plan
from orchestration.services import RunServices
from orchestration.state import RunState
from orchestration.telemetry._observer import PlanningObservation
from planners._catalog_request import (
    CatalogAnswer,
    CatalogRequest,
    allow_request,
    answer_request,
    parse_request,
)
from planners._plan_stream import PlanStream, StepListener
from planners._references import check_reference_paths
from planners._selection import Selection
from planners._semantic import SemanticRanker
from planners._session_view import session_block
from planners.feedback import DefaultFeedbackFormatter, FeedbackFormatter, PlanFeedback
from planners.parsing import parse_plan, plan_response_schema
from planners.prompt import BuiltPrompt, PlannerTemplates, PromptBuilder
from planners.replan import RepairPlan, RepairSituation, validate_repair
from planners.signatures import SignatureRenderer

__all__ = ["Planner"]

T = TypeVar("T")

_PROMPT_SETTINGS = ("prompt_type_guidance", "llm_structured_output", "planner_prompt_budget_chars",
                    "planner_max_capabilities", "planner_catalog_requests", "max_plan_steps",
                    "embeddings_model", "max_prompt_value_chars")
"""The settings that change what a plan prompt says (see :meth:`Planner.prompt_version`)."""

_TRANSIENT = frozenset({LLMErrorKind.RATE_LIMIT, LLMErrorKind.TIMEOUT, LLMErrorKind.CONNECTION,
                        LLMErrorKind.SERVER})
_ECHO_LIMIT = 6000  # longest rejected answer quoted back to the LLM


class _Rejected(Exception):
    """An answer the planner will not accept, with the feedback to send about it."""

    def __init__(self, feedback: PlanFeedback) -> None:
        super().__init__(feedback.error)
        self.feedback = feedback


class Planner:
    """Turns a query into a :class:`ValidatedPlan` with the run's LLM (layer 1 lives here).

    ``templates`` (or ``template_dir``, a directory of ``<name>.txt`` overrides) shape the
    prompts; ``feedback`` words the retry messages; ``renderer`` draws the typed
    signatures. ``structured_output``: send the plan's JSON Schema with the request (the
    client enforces it as far as its provider can); ``None`` follows
    ``llm_structured_output`` (on unless it is ``none``). ``check_references`` rejects
    ``{{step.field}}`` paths that the upstream output schema does not have.
    """

    def __init__(
        self,
        *,
        templates: PlannerTemplates | None = None,
        template_dir: str | os.PathLike[str] | None = None,
        feedback: FeedbackFormatter | None = None,
        renderer: SignatureRenderer | None = None,
        structured_output: bool | None = None,
        check_references: bool = True,
    ) -> None:
        if templates is not None and template_dir is not None:
            raise ValueError("give either templates or template_dir, not both")
        if template_dir is not None:
            templates = PlannerTemplates.from_dir(template_dir)
        self.prompts = PromptBuilder(templates, renderer)
        self.feedback: FeedbackFormatter = feedback or DefaultFeedbackFormatter()
        self.structured_output = structured_output
        self.check_references = check_references
        self._semantic: tuple[tuple[Any, ...], SemanticRanker] | None = None

    # --- public -----------------------------------------------------------------------
    def prompt_version(self, config: OrchestratorConfig) -> str:
        """A digest of everything besides the query and the catalog that shapes the plans
        this planner writes: its templates, how it renders signatures, its output and
        reference checks, the settings that shape the prompt, and dagwright's version
        (the code that fills the templates). Part of a cached plan's key: a plan written
        under another prompt is not reused."""
        templates = self.prompts.templates
        body = {
            "dagwright": __version__,
            "templates": {f.name: getattr(templates, f.name) for f in fields(templates)},
            "renderer": type(self.prompts.renderer).__qualname__,
            "structured_output": self.structured_output,
            "check_references": self.check_references,
            "settings": {name: getattr(config, name) for name in _PROMPT_SETTINGS},
        }
        text = json.dumps(body, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def build_prompt(self, query: str, services: RunServices) -> BuiltPrompt:
        """The first plan request's messages and the catalog selection behind them."""
        return self.prompts.plan_prompt(query, services.catalog, services.config,
                                        history=self._history(query, services))

    @staticmethod
    def _history(query: str, services: RunServices) -> str:
        """The session's earlier runs for this query's prompt (empty without a session)."""
        session = services.session
        if session is None or not session.runs:
            return ""
        return session_block(session, query, services.config.session_history_chars)

    def response_schema(self, services: RunServices, selection: Selection) -> dict[str, Any] | None:
        """The JSON Schema sent for constrained output, or None when it is switched off."""
        wanted = self.structured_output
        if wanted is None:
            wanted = services.config.llm_structured_output != "none"
        return plan_response_schema(selection.shown) if wanted else None

    async def plan(
        self, run: RunState, services: RunServices, *, listener: StepListener | None = None
    ) -> ValidatedPlan:
        """A validated plan for the run's query; raises :class:`PlanningError` with every
        attempt.

        With a ``listener`` each attempt is streamed and the listener hears of every step
        the moment it may be acted on (see the module docstring); the caller stops what
        the listener started when this raises."""
        catalog, config = services.catalog, services.config
        earlier = services.earlier_outputs  # a session's earlier runs: {{run:N.step}}

        def accept(text: str, checked: CheckedSteps | None) -> ValidatedPlan:
            plan = _parse(text, config.max_json_depth)
            validated = _validate(lambda: validate_plan(
                plan, catalog, max_steps=config.max_plan_steps, max_depth=config.max_json_depth,
                earlier=earlier, checked=checked))
            if self.check_references:
                # a step checked while it streamed had its paths checked then
                unchecked = (plan.steps if checked is None else
                             [s for s in plan.steps if not checked.unchanged(s)])
                issues = check_reference_paths(unchecked, catalog, known_steps=validated.steps,
                                               outputs=earlier)
                if issues:
                    raise _Rejected(PlanFeedback("validation", str(PlanValidationError(issues)),
                                                 0, "plan", [str(i) for i in issues]))
            return validated

        with services.observer.planning(run.run_id, "plan") as observation:
            await self.prompts.prepare(catalog, config)
            prompt = await self._hybrid(run.query, services, self.build_prompt(
                run.query, services), observation)
            if listener is not None:
                observation.set("dagwright.plan.streamed", True)
            validated = await self._converse(services, "plan", prompt, accept, observation,
                                             listener)
            observation.set("dagwright.plan.steps", len(validated.steps))
            return validated

    async def replan(
        self, run: RunState, services: RunServices, situation: RepairSituation
    ) -> RepairPlan | None:
        """A repair plan for the open steps of ``situation``; None if the LLM sees none.

        Raises :class:`PlanningError` (every attempt kept) when no valid repair plan
        comes back within ``planner_max_retries``.
        """
        catalog, config = services.catalog, services.config
        limit = config.max_prompt_value_chars
        blocks = situation.prompt_blocks(
            run.outputs, value_limit=limit,
            total_limit=max(limit, config.planner_prompt_budget_chars // 4))

        def accept(text: str, checked: CheckedSteps | None) -> RepairPlan | None:
            plan = _parse(text, config.max_json_depth)
            if not plan.steps:
                return None
            return _validate(lambda: validate_repair(
                plan, catalog, situation, run.outputs, max_steps=config.max_plan_steps,
                calls=services.calls, max_depth=config.max_json_depth,
                earlier=services.earlier_outputs))

        with services.observer.planning(run.run_id, "replan", {
            "dagwright.replan.round": situation.round,
            "dagwright.replan.open_steps": ",".join(situation.open_ids),
        }) as observation:
            await self.prompts.prepare(catalog, config)
            prompt = self.prompts.replan_prompt(
                run.query, catalog, config, search_text=situation.search_text(run.query),
                taken_ids=sorted(situation.steps), blocks=blocks)
            repair = await self._converse(services, "replan", prompt, accept, observation)
            observation.set("dagwright.plan.steps", len(repair.steps) if repair else 0)
            return repair

    async def _hybrid(self, query: str, services: RunServices, prompt: BuiltPrompt,
                      observation: PlanningObservation) -> BuiltPrompt:
        """``prompt`` again with the lexical and semantic rankings fused, when the catalog
        was cut and ``ORCH_EMBEDDINGS_*`` is set; ``prompt`` itself when either is not so
        or the embeddings fail (recorded as a ``catalog_ranking_failed`` event)."""
        config = services.config
        if prompt.index is None or not (config.embeddings_base_url and config.embeddings_model):
            return prompt
        try:
            ranker = self._semantic_ranker(config)
            order = await ranker.order(prompt.index, query)
        except (LLMError, ImportError, NotImplementedError) as exc:
            # NotImplementedError: a loop without sockets or threads (a Temporal
            # workflow's), where planning stays lexical
            observation.set("dagwright.catalog.ranking", "lexical")
            observation.span.add_event("catalog_ranking_failed", {
                "error": f"{type(exc).__name__}: {exc}"[:500]})
            return prompt
        observation.set("dagwright.catalog.ranking", "hybrid")
        return self.prompts.plan_prompt(query, services.catalog, config, order=order,
                                        history=self._history(query, services))

    def _semantic_ranker(self, config: Any) -> SemanticRanker:
        """The ranker for the configured endpoint, made once (its vectors with it)."""
        settings = (config.embeddings_base_url, config.embeddings_model,
                    config.embeddings_cache)
        if self._semantic is None or self._semantic[0] != settings:
            client = EmbeddingsClient.from_config(config)
            assert client is not None  # _hybrid checked the settings
            self._semantic = (settings, SemanticRanker(client, EmbeddingCache(
                config.embeddings_cache)))
        return self._semantic[1]

    # --- the attempt loop ---------------------------------------------------------------
    async def _converse(
        self,
        services: RunServices,
        purpose: str,
        prompt: BuiltPrompt,
        accept: Callable[[str, CheckedSteps | None], T],
        observation: PlanningObservation,
        listener: StepListener | None = None,
    ) -> T:
        selection = prompt.selection
        observation.selection(selection.trace_attributes(), prompt.chars)
        schema = self.response_schema(services, selection)
        if schema is not None and prompt.requests_allowed > 0:
            schema = allow_request(schema)
        messages = list(prompt.messages)
        attempts: list[PlanningAttempt] = []
        tries = services.config.planner_max_retries + 1
        requests_left = prompt.requests_allowed
        shown = [c.key for c in selection.shown]
        sent_in_full = {c.key for c in selection.offered}
        number = 0
        while number < tries:
            number += 1
            request = LLMRequest(purpose=purpose, messages=list(messages),
                                 response_schema=schema, schema_name="plan")
            checked: CheckedSteps | None = None
            try:
                if listener is None:
                    response = await services.llm.complete(request)
                else:
                    response, checked = await self._streamed(services, request, listener,
                                                             number)
            except LLMError as exc:
                if listener is not None:
                    await listener.discard(f"plan attempt {number} failed: {exc}")
                feedback = _llm_error_feedback(exc, number, purpose)
                retry = feedback is not None and number < tries
                attempts.append(PlanningAttempt(None, str(exc), None, number, exc.kind.value, purpose))
                observation.attempt(number, "llm_error", exc.kind.value, str(exc), None,
                                    retry and feedback is not None)
                if feedback is None:
                    observation.failed(str(exc))
                    raise PlanningError(_llm_failure(exc, services, purpose), attempts) from exc
                if not retry:
                    continue  # the last attempt: ends as "no valid plan" below
                messages.append({"role": "user", "content": self.feedback.format(feedback)})
                continue

            wanted = (parse_request(response.content, services.config.max_json_depth)
                      if prompt.index is not None and response.finish_reason != "length"
                      else None)
            if wanted is not None and requests_left > 0:
                requests_left -= 1
                number -= 1  # a catalog request is not a failed attempt
                answer = answer_request(wanted, prompt.index, sent_in_full)  # type: ignore[arg-type]
                sent_in_full.update(c.key for c in answer.capabilities)
                shown.extend(c.key for c in answer.capabilities if c.key not in shown)
                _record_request(observation, prompt.requests_allowed - requests_left, wanted,
                                answer, requests_left)
                if schema is not None:
                    keys = set(shown)
                    schema = plan_response_schema(
                        [c for c in prompt.index.capabilities if c.key in keys])  # type: ignore[union-attr]
                    if requests_left > 0:
                        schema = allow_request(schema)
                messages.append({"role": "assistant", "content": response.content[:_ECHO_LIMIT]})
                messages.append({"role": "user", "content": self.prompts.request_answer(
                    answer.capabilities, _answer_notes(wanted, answer),
                    services.config.prompt_type_guidance, requests_left)})
                continue
            try:
                if wanted is not None:
                    raise _Rejected(PlanFeedback(
                        "malformed", "no more catalog requests can be answered: answer with "
                        "the plan, using the capabilities already shown", number, purpose))
                if response.finish_reason == "length":
                    raise _Rejected(PlanFeedback(
                        "length", "the answer was cut off at the output length limit "
                        "(finish_reason=length)", number, purpose))
                result = accept(response.content, checked)
            except _Rejected as rejected:
                feedback = rejected.feedback
                feedback = PlanFeedback(feedback.kind, feedback.error, number, purpose,
                                        feedback.issues)
            else:
                attempts.append(PlanningAttempt(response.content, "", response.finish_reason,
                                                number, "accepted", purpose))
                observation.attempt(number, "accepted", "accepted", None,
                                    response.finish_reason, False)
                observation.set("dagwright.plan.attempts", number)
                return result
            if listener is not None:
                await listener.discard(f"plan attempt {number} was rejected ({feedback.kind}): "
                                       f"{feedback.error}")
            retry = number < tries
            attempts.append(PlanningAttempt(response.content, feedback.error,
                                            response.finish_reason, number, feedback.kind, purpose))
            observation.attempt(number, "rejected", feedback.kind, feedback.error,
                                response.finish_reason, retry)
            if retry:
                if feedback.kind != "length":  # a cut-off answer is not worth quoting back
                    messages.append({"role": "assistant",
                                     "content": response.content[:_ECHO_LIMIT]})
                messages.append({"role": "user", "content": self.feedback.format(feedback)})
        observation.set("dagwright.plan.attempts", tries)
        observation.failed(f"no valid {purpose}")
        what = "repair plan" if purpose == "replan" else "plan"
        raise PlanningError(f"no valid {what} after {tries} attempt(s)", attempts)


    async def _streamed(
        self, services: RunServices, request: LLMRequest, listener: StepListener, number: int
    ) -> tuple[LLMResponse, CheckedSteps]:
        """One streamed plan attempt: its steps go to ``listener`` as they become ready;
        the whole answer is returned (the gateway's stream contract: its content is every
        delta, in order) with the steps checked on the way, which the final validation
        does not check again. A step that shows the answer cannot be accepted has what was
        started discarded at once, and nothing more of this answer goes to the listener."""
        config = services.config
        reader: PlanStream | None = None  # made with the first piece read step by step
        async with aclosing(services.llm.stream(request)) as events:
            async for event in events:
                if event.response is not None:
                    return event.response, (reader.checked if reader is not None
                                            else CheckedSteps({}, {}))
                if event.last:
                    # the rest of the answer is here: it is parsed and validated whole
                    # now, and what had not started yet starts from the plan, so
                    # reading it piece by piece first would only cost time
                    continue
                if reader is None:
                    reader = PlanStream(services.catalog, max_steps=config.max_plan_steps,
                                        max_depth=config.max_json_depth,
                                        check_references=self.check_references,
                                        earlier=services.earlier_outputs)
                doomed = reader.doomed
                for step in reader.feed(event.delta):
                    listener.step_ready(step, reader.dependencies(step.id))
                if reader.doomed is not None and doomed is None:
                    await listener.discard(f"plan attempt {number} cannot be accepted: "
                                           f"{reader.doomed}")
        raise LLMError(LLMErrorKind.MALFORMED, "the plan stream ended without its final "
                       "response", provider=str(getattr(services.llm.client, "provider", "")))


def _answer_notes(wanted: CatalogRequest, answer: CatalogAnswer) -> list[str]:
    notes = []
    if answer.unknown:
        notes.append(f"Not in the catalog: {', '.join(answer.unknown)}.")
    if answer.already:
        notes.append(f"Already shown above: {', '.join(answer.already)}.")
    if answer.searched:
        notes.append(f"The last {len(answer.searched)} are the best matches for your search "
                     "text not shown before.")
    elif wanted.search:
        notes.append("No capability not shown before matches your search text.")
    return notes


def _record_request(observation: PlanningObservation, round_: int, wanted: CatalogRequest,
                    answer: CatalogAnswer, left: int) -> None:
    """The ``catalog_request`` event on the plan span: what was asked and what was sent."""
    observation.span.add_event("catalog_request", {
        "dagwright.request.round": round_,
        "dagwright.request.names": ",".join(wanted.names)[:2000],
        "dagwright.request.search": wanted.search[:500],
        "dagwright.request.sent": ",".join(c.key for c in answer.capabilities)[:2000],
        "dagwright.request.unknown": ",".join(answer.unknown)[:2000],
        "dagwright.request.left": left,
    })
    observation.set("dagwright.catalog.requests", round_)


def _parse(text: str, max_depth: int) -> Any:
    try:
        return parse_plan(text, max_depth=max_depth)
    except PlanParseError as exc:
        raise _Rejected(PlanFeedback("malformed", str(exc), 0)) from exc


def _validate(check: Callable[[], T]) -> T:
    try:
        return check()
    except PlanValidationError as exc:
        raise _Rejected(PlanFeedback("validation", str(exc), 0, "plan",
                                     [str(i) for i in exc.issues])) from exc


def _llm_error_feedback(exc: LLMError, number: int, purpose: str) -> PlanFeedback | None:
    """Feedback for an LLM error worth another planner call, else None (not retried)."""
    if exc.kind is LLMErrorKind.MALFORMED:
        return PlanFeedback("malformed", str(exc), number, purpose)
    if exc.kind is LLMErrorKind.LENGTH:
        return PlanFeedback("length", str(exc), number, purpose)
    return None


def _llm_failure(exc: LLMError, services: RunServices, purpose: str) -> str:
    """The PlanningError message for an LLM error the planner does not retry."""
    who = "the planner's" if purpose == "plan" else "the replanner's"
    if exc.kind in _TRANSIENT:
        return (f"{who} LLM call failed ({exc.kind.value}) after the gateway's retries with "
                f"backoff (up to {services.llm.max_retries} retries): {exc}")
    if exc.kind is LLMErrorKind.CONTENT_FILTER:
        return f"the provider's content filter stopped {who} answer (not retried): {exc}"
    if exc.kind is LLMErrorKind.BUDGET:
        return f"the run's LLM call budget is spent: {exc}"
    return f"{who} LLM call failed ({exc.kind.value}, not retried): {exc}"
