"""The JSON API under ``/v1``: submit, list, read, follow, decide, cancel.

=========================================  =============================================
``POST /v1/runs``                          start a run: 202 ``{run_id, status}``; with
                                           ``"wait": true`` 200 and the whole result;
                                           ``context``, ``credentials``, ``session_id``;
                                           ``{"workflow", "inputs"}`` instead of
                                           ``query`` runs a saved workflow (by name)
``GET /v1/runs?status=&limit=&tenant=``    recent runs, newest first (also ``user=``,
                                           ``session_id=``)
``GET /v1/runs/{run_id}``                  the ``RunResult`` JSON
``GET /v1/runs/{run_id}/events``           server-sent events (``Last-Event-ID``/``after``)
``POST /v1/runs/{run_id}/approvals/{id}``  ``{approved, params?, note?, credentials?}``:
                                           decide, continue
``POST /v1/runs/{run_id}/cancel``          end the run ``cancelled``
``POST /v1/runs/{run_id}/resume``          ``{credentials?}``: continue a stopped run
``GET /v1/sessions/{session_id}``          a session and its runs
=========================================  =============================================

On a server with tenants (``ORCH_SERVE_TOKENS``) every endpoint answers within the
caller's tenant: another tenant's run is a 404, as a run that does not exist is.

Request bodies are validated by pydantic models that forbid unknown fields, so a typo
is a 422 naming the field rather than a silently ignored option.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal, TypeVar, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
)
from sse_starlette import EventSourceResponse
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from orchestration._json import UnreadableJSON, decode
from orchestration.errors import (
    ApprovalError,
    CredentialsRequired,
    DagwrightError,
    InvalidInput,
    PlanValidationError,
    RunLeased,
    RunNotFound,
    StoreError,
    WorkflowError,
)
from orchestration.handle import RunHandle
from orchestration.orchestrator import RUN_ID_PATTERN
from orchestration.plan import Plan, validate_plan
from orchestration.result import Approval, RunResult, RunStatus
from orchestration.server._errors import ApiError, field_errors
from orchestration.server._runs import Busy, RunManager
from orchestration.server._security import caller_tenant
from orchestration.server._stream import FINAL_STATUSES, run_event_stream
from orchestration.server._tenants import Tenant
from orchestration.sessions import SESSION_ID_PATTERN, AnyEarlier
from orchestration.workflows.model import NAME_PATTERN

__all__ = ["api_routes", "read_run"]

M = TypeVar("M", bound=BaseModel)
RUN_STATUSES = get_args(RunStatus)
MAX_QUERY_CHARS = 20_000


CredentialsField = dict[StrictStr, dict[StrictStr, StrictStr]] | None


class RunRequest(BaseModel):
    """``POST /v1/runs``: a ``query`` (optionally with its ``plan``), or a saved ``workflow``
    by name with its ``inputs``. ``credentials`` are sent to the tools they name for this
    run only, and never echoed, stored or logged (docs/context.md)."""

    model_config = ConfigDict(extra="forbid")

    query: StrictStr | None = Field(None, min_length=1, max_length=MAX_QUERY_CHARS)
    plan: dict[str, Any] | None = None
    workflow: StrictStr | None = Field(
        None, pattern=NAME_PATTERN,
        description="the name of a saved workflow in the server's workflows directory "
        "(never a path: a client does not choose the files the server reads)")
    inputs: dict[str, Any] | None = None
    synthesis: Literal["llm", "template", "raw"] | None = None
    run_id: StrictStr | None = Field(None, pattern=RUN_ID_PATTERN)
    wait: StrictBool = False
    context: dict[StrictStr, StrictStr | StrictInt | StrictFloat | StrictBool] | None = None
    credentials: CredentialsField = None
    session_id: StrictStr | None = Field(None, pattern=SESSION_ID_PATTERN)

    def problem(self) -> tuple[str, str] | None:
        """The field that does not go with the others, and why."""
        if self.query is None and self.workflow is None:
            return "query", "give either 'query' or 'workflow' (with its 'inputs')"
        if self.query is not None and self.workflow is not None:
            return "workflow", "give either 'query' or 'workflow' (with its 'inputs'), not both"
        if self.workflow is not None and self.plan is not None:
            return "plan", "a workflow brings its own plan: 'plan' goes with 'query' only"
        if self.workflow is None and self.inputs is not None:
            return "inputs", "'inputs' go with 'workflow'"
        return None


class DecisionRequest(BaseModel):
    """``POST /v1/runs/{run_id}/approvals/{step_id}``."""

    model_config = ConfigDict(extra="forbid")

    approved: StrictBool
    params: dict[str, Any] | None = Field(
        None, description="an edit merged onto the proposed parameters (JSON Merge Patch, "
        "RFC 7396): name only the keys you change; null removes a key; the merged "
        "parameters are validated as a whole. For @plan, a whole replacement plan.")
    note: StrictStr | None = Field(None, max_length=2000)
    credentials: CredentialsField = None


class ResumeRequest(BaseModel):
    """``POST /v1/runs/{run_id}/resume``: the per-run credentials the run needs again."""

    model_config = ConfigDict(extra="forbid")

    credentials: CredentialsField = None


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
    details: dict[str, Any] = {"retry_after_s": exc.retry_after_s}
    if exc.tenant is not None:
        details["tenant"] = exc.tenant
    return ApiError(429, "too_many_runs", str(exc), headers={"Retry-After": str(exc.retry_after_s)},
                    details=details)


def _tenant(request: Request) -> Tenant | None:
    """The calling tenant (None on a single-tenant server)."""
    return caller_tenant(request.scope)


def _not_found(run_id: str) -> ApiError:
    """The one answer for a run that does not exist and for another tenant's run, so a
    run id never tells a tenant anything about another's runs."""
    return ApiError(404, "run_not_found", f"no run {run_id!r}; GET /v1/runs lists the runs",
                    details={"run_id": run_id})


def _context_for(request: Request, given: dict[str, Any] | None) -> dict[str, Any] | None:
    """The run's context: the caller's, with its tenant set by its token on a server
    with tenants (a context naming another tenant is refused)."""
    tenant = _tenant(request)
    if tenant is None:
        return given
    named = (given or {}).get("tenant")
    if named is not None and named != tenant.name:
        raise ApiError(403, "forbidden_tenant",
                       f"context.tenant {str(named)[:80]!r} is not the tenant of your token; "
                       "leave it out (the server sets it)",
                       details={"fields": [{"field": "context.tenant",
                                            "problem": "not your tenant"}]})
    return {**(given or {}), "tenant": tenant.name}


def _input_field(exc: InvalidInput, default: str) -> str:
    """The request field an :class:`InvalidInput` of a new run is about: its message names
    the context or the credentials first when it is about them."""
    message = str(exc)
    return next((f for f in ("credentials", "context") if message.startswith(f)), default)


def _invalid_input(exc: InvalidInput, field: str) -> ApiError:
    return ApiError(422, "invalid_request", f"{field}: {exc}",
                    details={"fields": [{"field": field, "problem": str(exc)}]})


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


_STARTING_A_RUN = (Busy, CredentialsRequired, StoreError)  # RunLeased is a StoreError
"""What any start or continuation of a run may meet, answered alike by every endpoint
(:func:`_run_error`); an endpoint catches its own cases before these."""


def _run_error(exc: Busy | CredentialsRequired | StoreError, run_id: str | None) -> ApiError:
    """The answer for one of :data:`_STARTING_A_RUN`: no free slot (429), per-run
    credentials needed again (409), the run executing in another process (409), the store
    failing (503)."""
    if isinstance(exc, Busy):
        return _busy(exc)
    if isinstance(exc, CredentialsRequired):
        return _credentials_required(exc)
    if isinstance(exc, RunLeased):
        return ApiError(409, "run_leased", str(exc), details={"run_id": run_id})
    return _store_error(exc)


def _check_plan(request: Request, plan: dict[str, Any]) -> None:
    """A plan that cannot run is refused here, naming its problems, rather than
    accepted and failed later."""
    orchestrator = _manager(request).orchestrator
    try:
        model = Plan.model_validate(plan)
    except ValidationError as exc:
        raise field_errors(exc, prefix="plan") from exc
    try:
        # a follow-up's references to earlier runs are checked once the run knows its
        # session (its run fails naming them); here every run:N.step is taken as known
        validate_plan(model, orchestrator.catalog, max_steps=orchestrator.config.max_plan_steps,
                      earlier=AnyEarlier())
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


async def _start_workflow(request: Request, body: RunRequest) -> Response:
    """A saved workflow by name, its inputs checked before anything runs: 404 for an
    unknown name, 422 naming every problem for one that does not fit the catalog or
    inputs that do not fit it."""
    manager = _manager(request)
    assert body.workflow is not None
    tenant = _tenant(request)
    context = _context_for(request, body.context)  # a tenant's token sets its tenant
    if body.run_id is not None and tenant is not None:
        await _check_run_id_free(manager, body.run_id, tenant)
    try:
        handle = await manager.start_workflow(
            body.workflow, body.inputs, run_id=body.run_id, tenant=tenant, context=context,
            credentials=body.credentials, session_id=body.session_id,
            synthesis=body.synthesis)
    except WorkflowError as exc:
        found = exc.path is not None
        seen = manager.as_a_client_sees_it
        raise ApiError(422 if found else 404, "invalid_workflow" if found else
                       "workflow_not_found", seen(str(exc)),
                       details={"workflow": body.workflow,
                                "problems": [seen(p) for p in exc.problems]}) from exc
    except InvalidInput as exc:
        field = _input_field(exc, "inputs")
        if field != "inputs":
            raise _invalid_input(exc, field) from exc
        message = manager.as_a_client_sees_it(str(exc))
        raise ApiError(422, "invalid_inputs", message, details={
            "workflow": body.workflow,
            "fields": [{"field": "inputs", "problem": message}]}) from exc
    except _STARTING_A_RUN as exc:
        raise _run_error(exc, body.run_id) from exc
    except DagwrightError as exc:  # the run id names a run of another query
        raise ApiError(409, "run_id_conflict", str(exc), details={"run_id": body.run_id}) from exc
    return await _wait(handle) if body.wait else _accepted(request, handle)


async def create_run(request: Request) -> Response:
    body = _model(RunRequest, await _json_body(request))
    problem = body.problem()
    if problem is not None:
        raise ApiError(422, "invalid_request", f"invalid request: {problem[0]}: {problem[1]}",
                       details={"fields": [{"field": problem[0], "problem": problem[1]}]})
    if body.workflow is not None:
        return await _start_workflow(request, body)
    assert body.query is not None
    manager = _manager(request)
    tenant = _tenant(request)
    context = _context_for(request, body.context)
    if body.plan is not None:
        _check_plan(request, body.plan)
    if body.run_id is not None:
        if tenant is not None:
            await _check_run_id_free(manager, body.run_id, tenant)
        if body.plan is not None:
            await _check_same_plan(manager, body.run_id, body.plan)
        running = manager.orchestrator.active_run(body.run_id)
        if running is not None and running.query == body.query:
            # the same run asked for again: it is this one, never a second
            return await _wait(running) if body.wait else _accepted(request, running)
    try:
        handle = await manager.start(body.query, plan=body.plan, run_id=body.run_id,
                                     tenant=tenant, context=context,
                                     credentials=body.credentials, session_id=body.session_id,
                                     synthesis=body.synthesis)
    except InvalidInput as exc:
        raise _invalid_input(exc, _input_field(exc, "context")) from exc
    except _STARTING_A_RUN as exc:
        running = (manager.orchestrator.active_run(body.run_id or "")
                   if isinstance(exc, RunLeased) else None)
        if running is not None:  # the run asked for is executing here: it is that one
            return await _wait(running) if body.wait else _accepted(request, running)
        raise _run_error(exc, body.run_id) from exc
    except DagwrightError as exc:  # the run id names a run of another query
        raise ApiError(409, "run_id_conflict", str(exc), details={"run_id": body.run_id}) from exc
    return await _wait(handle) if body.wait else _accepted(request, handle)


async def _check_run_id_free(manager: RunManager, run_id: str, tenant: Tenant) -> None:
    """On a server with tenants run ids are one namespace: an id another tenant's run
    holds is refused as taken, saying nothing more about that run."""
    try:
        known = await manager.orchestrator.aget_run(run_id)
    except StoreError as exc:
        raise _store_error(exc) from exc
    if known is not None and (known.context or {}).get("tenant") != tenant.name:
        raise ApiError(409, "run_id_conflict",
                       f"run id {run_id!r} is taken; choose another run_id (a UUID)",
                       details={"run_id": run_id})


def _filter(request: Request, name: str) -> str | None:
    value = request.query_params.get(name) or None
    if value is not None and len(value) > 256:
        raise ApiError(422, "invalid_request", f"{name}: at most 256 characters",
                       details={"fields": [{"field": name, "problem": "too long"}]})
    return value


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
    tenant_filter, tenant = _filter(request, "tenant"), _tenant(request)
    if tenant is not None:
        if tenant_filter is not None and tenant_filter != tenant.name:
            raise ApiError(403, "forbidden_tenant",
                           f"tenant {tenant_filter[:80]!r} is not the tenant of your token; "
                           "you list your own tenant's runs", details={"fields": [
                               {"field": "tenant", "problem": "not your tenant"}]})
        tenant_filter = tenant.name
    try:
        runs = await _manager(request).orchestrator.alist_runs(
            status, int(limit_text), tenant=tenant_filter, user=_filter(request, "user"),
            session_id=_filter(request, "session_id"))
    except StoreError as exc:
        raise _store_error(exc) from exc
    return JSONResponse({"runs": [r.model_dump(mode="json") for r in runs]})


async def read_run(manager: RunManager, run_id: str, tenant: Tenant | None = None) -> RunResult:
    """The run (live when it executes here), or 404 — for another tenant's run too."""
    try:
        result = await manager.orchestrator.aget_run(run_id)
    except StoreError as exc:
        raise _store_error(exc) from exc
    if result is None or (tenant is not None
                          and (result.context or {}).get("tenant") != tenant.name):
        raise _not_found(run_id)
    return result


async def get_run(request: Request) -> Response:
    result = await read_run(_manager(request), request.path_params["run_id"], _tenant(request))
    return JSONResponse(result.to_dict())


async def get_session(request: Request) -> Response:
    session_id = request.path_params["session_id"]
    tenant = _tenant(request)
    try:
        session = await _manager(request).orchestrator.aget_session(
            session_id, tenant=tenant.name if tenant is not None
            else request.query_params.get("tenant") or None)
    except InvalidInput as exc:
        raise _invalid_input(exc, "session_id") from exc
    except StoreError as exc:
        raise _store_error(exc) from exc
    if session is None:
        # "session", as a run names it: under "session_id" the redaction of every answer
        # took the id for a web session's secret and masked it
        raise ApiError(404, "session_not_found", f"no session {session_id!r}",
                       details={"session": session_id})
    return JSONResponse(session.model_dump(mode="json"))


async def run_events(request: Request) -> Response:
    manager = _manager(request)
    run_id = request.path_params["run_id"]
    after_text = request.headers.get("last-event-id") or request.query_params.get("after") or "0"
    if not after_text.strip().isdigit():
        raise ApiError(422, "invalid_request",
                       f"Last-Event-ID/after: {after_text!r} is not an event number (seq)",
                       details={"fields": [{"field": "after", "problem": "not a number"}]})
    after = int(after_text)
    result = await read_run(manager, run_id, _tenant(request))
    if result.status in FINAL_STATUSES and not await manager.orchestrator.aget_events(
            run_id, after=after):
        return Response(status_code=204)  # nothing more will come: EventSource stops
    return EventSourceResponse(run_event_stream(manager, run_id, after=after), ping=15)


async def decide(request: Request) -> Response:
    body = _model(DecisionRequest, await _json_body(request))
    manager = _manager(request)
    run_id, step_id = request.path_params["run_id"], request.path_params["step_id"]
    tenant = _tenant(request)
    current = await read_run(manager, run_id, tenant)
    pending = {p.step_id for p in current.pending_approvals}
    approval = Approval(approved=body.approved, params=body.params, note=body.note)
    try:
        handle = await manager.decide(run_id, step_id, approval, tenant=tenant,
                                      credentials=body.credentials)
    except InvalidInput as exc:
        raise _invalid_input(exc, "credentials") from exc
    except RunNotFound as exc:
        raise ApiError(404, "run_not_found", str(exc), details={"run_id": run_id}) from exc
    except ApprovalError as exc:
        if step_id in pending:  # the decision itself is wrong: edited params that do not fit
            raise ApiError(422, "invalid_decision", str(exc), details={
                "fields": [{"field": "params", "problem": str(exc)}]}) from exc
        raise ApiError(409, "not_pending", str(exc), details={
            "run_id": run_id, "status": current.status,
            "pending": sorted(pending)}) from exc
    except _STARTING_A_RUN as exc:
        raise _run_error(exc, run_id) from exc
    if handle is None:  # no free slot here: queued, continued by the first server with one
        return JSONResponse({"run_id": run_id, "status": "awaiting_approval",
                             "decision": "queued", "links": _links(request, run_id)},
                            status_code=202, headers={"Location": _links(request, run_id)["self"]})
    return _accepted(request, handle)


def _credentials_required(exc: CredentialsRequired) -> ApiError:
    return ApiError(409, "credentials_required", str(exc),
                    details={"run_id": exc.run_id, "credentials_for": exc.names})


async def resume_run(request: Request) -> Response:
    """Continue a run whose process stopped (a server restart, a crash) with the per-run
    credentials it needs again; a run with nothing to do answers its status."""
    body = _model(ResumeRequest, await _json_body(request))
    manager = _manager(request)
    run_id = request.path_params["run_id"]
    tenant = _tenant(request)
    await read_run(manager, run_id, tenant)
    running = manager.orchestrator.active_run(run_id)
    if running is not None:
        return _accepted(request, running)
    try:
        handle = await manager.resume(run_id, tenant=tenant, credentials=body.credentials)
    except InvalidInput as exc:
        raise _invalid_input(exc, "credentials") from exc
    except RunNotFound as exc:
        raise _not_found(run_id) from exc
    except _STARTING_A_RUN as exc:
        raise _run_error(exc, run_id) from exc
    return _accepted(request, handle)


async def cancel(request: Request) -> Response:
    manager = _manager(request)
    run_id = request.path_params["run_id"]
    before = await read_run(manager, run_id, _tenant(request))
    if before.status in FINAL_STATUSES:  # cancelled included: a second cancel is refused too
        raise _finished(run_id, before.status)
    try:
        result = await manager.orchestrator.acancel(run_id, reason="cancelled through the API")
    except RunNotFound as exc:
        raise ApiError(404, "run_not_found", str(exc), details={"run_id": run_id}) from exc
    except StoreError as exc:
        raise _run_error(exc, run_id) from exc
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
        Route("/v1/runs/{run_id}/resume", resume_run, methods=["POST"]),
        Route("/v1/sessions/{session_id}", get_session, methods=["GET"]),
    ]
