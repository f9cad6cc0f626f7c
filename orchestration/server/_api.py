"""The JSON API under ``/v1``: submit, list, read, follow, decide, cancel.

=========================================  =============================================
``POST /v1/runs``                          start a run: 202 ``{run_id, status}``; with
                                           ``"wait": true`` 200 and the whole result
``GET /v1/runs?status=&limit=``            recent runs, newest first
``GET /v1/runs/{run_id}``                  the ``RunResult`` JSON
``GET /v1/runs/{run_id}/events``           server-sent events (``Last-Event-ID``/``after``)
``POST /v1/runs/{run_id}/approvals/{id}``  ``{approved, params?, note?}``: decide, continue
``POST /v1/runs/{run_id}/cancel``          end the run ``cancelled``
=========================================  =============================================

Request bodies are validated by pydantic models that forbid unknown fields, so a typo
is a 422 naming the field rather than a silently ignored option.
"""

from __future__ import annotations

import asyncio
from typing import Any, TypeVar, get_args

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr, ValidationError
from sse_starlette import EventSourceResponse
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from orchestration._json import UnreadableJSON, decode
from orchestration.errors import (
    ApprovalError,
    DagwrightError,
    PlanValidationError,
    RunLeased,
    RunNotFound,
    StoreError,
)
from orchestration.handle import RunHandle
from orchestration.orchestrator import RUN_ID_PATTERN
from orchestration.plan import Plan, validate_plan
from orchestration.result import Approval, RunResult, RunStatus
from orchestration.server._errors import ApiError, field_errors
from orchestration.server._runs import Busy, RunManager
from orchestration.server._stream import FINAL_STATUSES, run_event_stream

__all__ = ["api_routes", "read_run"]

M = TypeVar("M", bound=BaseModel)
RUN_STATUSES = get_args(RunStatus)
MAX_QUERY_CHARS = 20_000


class RunRequest(BaseModel):
    """``POST /v1/runs``."""

    model_config = ConfigDict(extra="forbid")

    query: StrictStr = Field(min_length=1, max_length=MAX_QUERY_CHARS)
    plan: dict[str, Any] | None = None
    run_id: StrictStr | None = Field(None, pattern=RUN_ID_PATTERN)
    wait: StrictBool = False


class DecisionRequest(BaseModel):
    """``POST /v1/runs/{run_id}/approvals/{step_id}``."""

    model_config = ConfigDict(extra="forbid")

    approved: StrictBool
    params: dict[str, Any] | None = Field(
        None, description="an edit merged onto the proposed parameters (JSON Merge Patch, "
        "RFC 7396): name only the keys you change; null removes a key; the merged "
        "parameters are validated as a whole. For @plan, a whole replacement plan.")
    note: StrictStr | None = Field(None, max_length=2000)


async def _json_body(request: Request) -> Any:
    """The body as JSON; 415 when it is not declared JSON, 422 when it does not parse.

    Decoded by the engine's bounded decoder, as every untrusted JSON is: a body nested
    deeper than ``ORCH_MAX_JSON_DEPTH`` (or holding NaN, or a lone surrogate) is a 422
    naming the bound, never a ``RecursionError`` deep in validation."""
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media != "application/json":
        raise ApiError(415, "unsupported_media_type",
                       f"send the body as JSON with 'Content-Type: application/json' (got "
                       f"{media or 'no Content-Type'})")
    raw = await request.body()
    try:
        return decode(raw, max_depth=_manager(request).orchestrator.config.max_json_depth)
    except UnreadableJSON as exc:
        raise ApiError(422, "invalid_json", f"the body is not JSON this server accepts: {exc}",
                       details={"fields": [{"field": "(body)", "problem": str(exc)}]}) from exc


def _model(model: type[M], data: Any) -> M:
    if not isinstance(data, dict):
        raise ApiError(422, "invalid_request",
                       f"the body must be a JSON object, not {type(data).__name__}",
                       details={"fields": [{"field": "(body)", "problem": "not an object"}]})
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise field_errors(exc) from exc


def _manager(request: Request) -> RunManager:
    manager: RunManager = request.app.state.runs
    return manager


def _busy(exc: Busy) -> ApiError:
    return ApiError(429, "too_many_runs", str(exc), headers={"Retry-After": str(exc.retry_after_s)},
                    details={"retry_after_s": exc.retry_after_s})


def _links(request: Request, run_id: str) -> dict[str, str]:
    root = request.scope.get("root_path", "")
    return {"self": f"{root}/v1/runs/{run_id}", "events": f"{root}/v1/runs/{run_id}/events",
            "viewer": f"{root}/ui/runs/{run_id}"}


def _accepted(request: Request, handle: RunHandle) -> JSONResponse:
    """202 while the execution goes on; 200 with the status when it needed none."""
    done = handle.done()
    status = handle.current().status if done else "running"
    return JSONResponse({"run_id": handle.run_id, "status": status,
                         "links": _links(request, handle.run_id)},
                        status_code=200 if done else 202,
                        headers={"Location": _links(request, handle.run_id)["self"]})


async def _wait(handle: RunHandle) -> JSONResponse:
    try:
        result = await handle.result()
    except asyncio.CancelledError as exc:
        if (task := asyncio.current_task()) is not None and task.cancelling():
            raise
        raise ApiError(503, "shutting_down", f"the server stopped while run {handle.run_id!r} "
                       "was executing; it is resumed when the server starts again") from exc
    except StoreError as exc:
        raise _store_error(exc) from exc
    return JSONResponse(result.to_dict())


def _store_error(exc: StoreError) -> ApiError:
    details: dict[str, Any] = {}
    if isinstance(exc.result, RunResult):
        details["result"] = exc.result.to_dict()
    return ApiError(503, "store_unavailable", str(exc), details=details)


def _check_plan(request: Request, plan: dict[str, Any]) -> None:
    """A plan that cannot run is refused here, naming its problems, rather than
    accepted and failed later."""
    orchestrator = _manager(request).orchestrator
    try:
        model = Plan.model_validate(plan)
    except ValidationError as exc:
        raise field_errors(exc, prefix="plan") from exc
    try:
        validate_plan(model, orchestrator.catalog, max_steps=orchestrator.config.max_plan_steps)
    except PlanValidationError as exc:
        issues = [{"step_id": i.step_id, "message": i.message} for i in exc.issues]
        raise ApiError(422, "invalid_plan", f"plan: {exc}", details={
            "fields": [{"field": "plan", "problem": str(exc)}], "issues": issues}) from exc


def _plan_json(plan: dict[str, Any]) -> Any:
    try:
        return Plan.model_validate(plan).model_dump(mode="json")
    except ValidationError:
        return plan


async def _check_same_plan(manager: RunManager, run_id: str, plan: dict[str, Any]) -> None:
    """A known run id sent again with another plan is a 409, not the old run silently:
    the caller meant something else by it. (Another query is refused by the engine.)"""
    try:
        known = await manager.orchestrator.aget_run(run_id)
    except StoreError as exc:
        raise _store_error(exc) from exc
    if known is None or known.plan is None:
        return  # a new run id, or a run that has no plan yet to compare with
    if _plan_json(known.plan) != _plan_json(plan):
        raise ApiError(409, "run_id_conflict",
                       f"run {run_id!r} already exists with another plan; choose another "
                       "run_id, or send the same plan (or none) to get that run",
                       details={"run_id": run_id, "status": known.status})


async def create_run(request: Request) -> Response:
    body = _model(RunRequest, await _json_body(request))
    manager = _manager(request)
    if body.plan is not None:
        _check_plan(request, body.plan)
    if body.run_id is not None:
        if body.plan is not None:
            await _check_same_plan(manager, body.run_id, body.plan)
        running = manager.orchestrator.active_run(body.run_id)
        if running is not None and running.query == body.query:
            # the same run asked for again: it is this one, never a second
            return await _wait(running) if body.wait else _accepted(request, running)
    try:
        handle = await manager.start(body.query, plan=body.plan, run_id=body.run_id)
    except Busy as exc:
        raise _busy(exc) from exc
    except RunLeased as exc:
        running = manager.orchestrator.active_run(body.run_id or "")
        if running is not None:
            return await _wait(running) if body.wait else _accepted(request, running)
        raise ApiError(409, "run_leased", str(exc), details={"run_id": body.run_id}) from exc
    except StoreError as exc:
        raise _store_error(exc) from exc
    except DagwrightError as exc:  # the run id names a run of another query
        raise ApiError(409, "run_id_conflict", str(exc), details={"run_id": body.run_id}) from exc
    return await _wait(handle) if body.wait else _accepted(request, handle)


async def list_runs(request: Request) -> Response:
    status = request.query_params.get("status") or None
    if status is not None and status not in RUN_STATUSES:
        raise ApiError(422, "invalid_request",
                       f"status: {status!r} is not a run status; use one of "
                       f"{', '.join(RUN_STATUSES)}",
                       details={"fields": [{"field": "status", "problem": "unknown status"}]})
    limit_text = request.query_params.get("limit", "50")
    if not limit_text.isdigit() or not 1 <= int(limit_text) <= 1000:
        raise ApiError(422, "invalid_request",
                       f"limit: {limit_text!r} is not a whole number from 1 to 1000",
                       details={"fields": [{"field": "limit", "problem": "out of range"}]})
    try:
        runs = await _manager(request).orchestrator.alist_runs(status, int(limit_text))
    except StoreError as exc:
        raise _store_error(exc) from exc
    return JSONResponse({"runs": [r.model_dump(mode="json") for r in runs]})


async def read_run(manager: RunManager, run_id: str) -> RunResult:
    """The run (live when it executes here), or 404."""
    try:
        result = await manager.orchestrator.aget_run(run_id)
    except StoreError as exc:
        raise _store_error(exc) from exc
    if result is None:
        raise ApiError(404, "run_not_found", f"no run {run_id!r}; GET /v1/runs lists the runs",
                       details={"run_id": run_id})
    return result


async def get_run(request: Request) -> Response:
    result = await read_run(_manager(request), request.path_params["run_id"])
    return JSONResponse(result.to_dict())


async def run_events(request: Request) -> Response:
    manager = _manager(request)
    run_id = request.path_params["run_id"]
    after_text = request.headers.get("last-event-id") or request.query_params.get("after") or "0"
    if not after_text.strip().isdigit():
        raise ApiError(422, "invalid_request",
                       f"Last-Event-ID/after: {after_text!r} is not an event number (seq)",
                       details={"fields": [{"field": "after", "problem": "not a number"}]})
    after = int(after_text)
    result = await read_run(manager, run_id)
    if result.status in FINAL_STATUSES and not await manager.orchestrator.aget_events(
            run_id, after=after):
        return Response(status_code=204)  # nothing more will come: EventSource stops
    return EventSourceResponse(run_event_stream(manager, run_id, after=after), ping=15)


async def decide(request: Request) -> Response:
    body = _model(DecisionRequest, await _json_body(request))
    manager = _manager(request)
    run_id, step_id = request.path_params["run_id"], request.path_params["step_id"]
    current = await read_run(manager, run_id)
    pending = {p.step_id for p in current.pending_approvals}
    approval = Approval(approved=body.approved, params=body.params, note=body.note)
    try:
        handle = await manager.decide(run_id, step_id, approval)
    except Busy as exc:
        raise _busy(exc) from exc
    except RunNotFound as exc:
        raise ApiError(404, "run_not_found", str(exc), details={"run_id": run_id}) from exc
    except ApprovalError as exc:
        if step_id in pending:  # the decision itself is wrong: edited params that do not fit
            raise ApiError(422, "invalid_decision", str(exc), details={
                "fields": [{"field": "params", "problem": str(exc)}]}) from exc
        raise ApiError(409, "not_pending", str(exc), details={
            "run_id": run_id, "status": current.status,
            "pending": sorted(pending)}) from exc
    except RunLeased as exc:
        raise ApiError(409, "run_leased", str(exc), details={"run_id": run_id}) from exc
    except StoreError as exc:
        raise _store_error(exc) from exc
    if handle is None:  # no free slot here: queued, continued by the first server with one
        return JSONResponse({"run_id": run_id, "status": "awaiting_approval",
                             "decision": "queued", "links": _links(request, run_id)},
                            status_code=202, headers={"Location": _links(request, run_id)["self"]})
    return _accepted(request, handle)


async def cancel(request: Request) -> Response:
    manager = _manager(request)
    run_id = request.path_params["run_id"]
    before = await read_run(manager, run_id)
    if before.status in FINAL_STATUSES:  # cancelled included: a second cancel is refused too
        raise _finished(run_id, before.status)
    try:
        result = await manager.orchestrator.acancel(run_id, reason="cancelled through the API")
    except RunNotFound as exc:
        raise ApiError(404, "run_not_found", str(exc), details={"run_id": run_id}) from exc
    except RunLeased as exc:
        raise ApiError(409, "run_leased", str(exc), details={"run_id": run_id}) from exc
    except StoreError as exc:
        raise _store_error(exc) from exc
    if result.status != "cancelled":
        raise _finished(run_id, result.status)
    return JSONResponse(result.to_dict())


def _finished(run_id: str, status: str) -> ApiError:
    return ApiError(409, "run_finished",
                    f"run {run_id!r} had already finished ({status}); nothing to cancel",
                    details={"run_id": run_id, "status": status})


def api_routes() -> list[Route]:
    return [
        Route("/v1/runs", create_run, methods=["POST"]),
        Route("/v1/runs", list_runs, methods=["GET"]),
        Route("/v1/runs/{run_id}", get_run, methods=["GET"]),
        Route("/v1/runs/{run_id}/events", run_events, methods=["GET"]),
        Route("/v1/runs/{run_id}/approvals/{step_id}", decide, methods=["POST"]),
        Route("/v1/runs/{run_id}/cancel", cancel, methods=["POST"]),
    ]
