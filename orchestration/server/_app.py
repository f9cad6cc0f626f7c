"""The ASGI application: routes, guards, and the life of the runs it executes.

On start it resumes, in the background, the runs a crash left ``running`` (the run
store's lease keeps it off runs another live server executes). On shutdown it stops its
executions as a process shutdown does, so they stay ``running`` in the store and the
next start resumes them.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from orchestration.errors import StoreError
from orchestration.orchestrator import Orchestrator
from orchestration.server._api import api_routes
from orchestration.server._errors import (
    ApiError,
    handle_api_error,
    handle_http_exception,
    handle_unexpected,
)
from orchestration.server._redacting import RedactAnswers
from orchestration.server._runs import RunManager
from orchestration.server._security import (
    AllowedHosts,
    BodyLimit,
    SameOriginWrites,
    TokenAuth,
    check_token,
)
from orchestration.server._tenants import Access, Tenant, read_tenants
from orchestration.server._ui import ui_routes
from orchestration.telemetry.serving import MULTIPROC_ENV, multiprocess_registry

__all__ = ["create_app"]


async def healthz(request: Request) -> Response:
    """200 while the run store answers; 503 (with the reason) when it does not."""
    manager: RunManager = request.app.state.runs
    try:
        await manager.orchestrator.alist_runs(limit=1)
    except StoreError as exc:
        return JSONResponse({"status": "unavailable", "error": str(exc)}, status_code=503)
    return JSONResponse({"status": "ok", "active_runs": manager.active,
                         "max_runs": manager.max_runs, "closing": manager.closing,
                         "pid": os.getpid()})


async def metrics(request: Request) -> Response:
    """The orchestrator's metrics in the Prometheus text format (every worker's, summed,
    with ``PROMETHEUS_MULTIPROC_DIR``, which ``dagwright serve --workers`` sets)."""
    manager: RunManager = request.app.state.runs
    registry = (multiprocess_registry() if os.environ.get(MULTIPROC_ENV)
                else manager.orchestrator.telemetry.metrics.registry)
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


def create_app(
    orchestrator: Orchestrator,
    *,
    token: str | None = None,
    max_runs: int | None = None,
    max_body_bytes: int | None = None,
    allowed_hosts: Sequence[str] | None = None,
    close_orchestrator: bool = False,
    tenants: dict[str, Tenant] | str | None = None,
) -> Starlette:
    """The HTTP API (``/v1``), the run viewer (``/ui``), ``/healthz`` and ``/metrics``.

    Settings default to the orchestrator's config (``ORCH_SERVE_TOKEN``,
    ``ORCH_SERVE_TOKENS``, ``ORCH_SERVE_MAX_RUNS``, ``ORCH_SERVE_MAX_BODY_BYTES``).
    ``tenants`` (token hash → :class:`Tenant`, or the text of ``ORCH_SERVE_TOKENS``)
    makes the server multi-tenant: each caller sees and acts on its own tenant's runs
    only, within its tenant's limits (docs/context.md). ``allowed_hosts`` limits the
    ``Host`` header (``dagwright serve`` sets the loopback names when it listens on
    loopback without a token, against DNS rebinding). ``close_orchestrator`` closes the
    orchestrator when the app shuts down, for an app that owns it.

    Serve it with any ASGI server; under uvicorn, set ``timeout_graceful_shutdown`` so a
    viewer's open event stream cannot hold a shutdown (sse-starlette also ends streams
    when uvicorn is told to exit).
    """
    config = orchestrator.config
    if token is None and config.serve_token is not None:
        token = config.serve_token.get_secret_value() or None
    if tenants is None and config.serve_tokens is not None:
        tenants = config.serve_tokens.get_secret_value() or None
    if isinstance(tenants, str):
        tenants = read_tenants(tenants)
    check_token(token)
    session_key = (config.serve_session_key.get_secret_value() or None
                   if config.serve_session_key is not None else None)
    access = Access(token, tenants, session_key=session_key)
    manager = RunManager(orchestrator, max_runs=max_runs or config.serve_max_runs,
                         tenants=access.tenants.values())

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        manager.start_recovery()
        try:
            yield
        finally:
            await manager.shutdown()
            if close_orchestrator:
                await orchestrator.aclose()
                await orchestrator.llm.aclose()

    middleware = [Middleware(RedactAnswers, redactor=orchestrator.redactor),
                  Middleware(BodyLimit, max_bytes=max_body_bytes or config.serve_max_body_bytes),
                  Middleware(SameOriginWrites),
                  Middleware(TokenAuth, access=access)]
    if allowed_hosts is not None:
        middleware.insert(0, Middleware(AllowedHosts, allowed=list(allowed_hosts)))
    app = Starlette(
        routes=[Route("/healthz", healthz, methods=["GET"]),
                Route("/metrics", metrics, methods=["GET"]),
                *api_routes(), *ui_routes(),
                Mount("/static", app=StaticFiles(packages=[("orchestration.server", "static")]),
                      name="static")],
        middleware=middleware,
        exception_handlers={ApiError: handle_api_error, HTTPException: handle_http_exception,
                            Exception: handle_unexpected},
        lifespan=lifespan,
    )
    app.state.runs = manager
    app.state.token = token
    app.state.access = access
    return app
