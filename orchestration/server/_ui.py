"""The run viewer: ``/ui/`` (recent runs) and ``/ui/runs/{run_id}`` (one run), plus
``/login`` for browsers when the server has a token.

Pages are rendered on the server with Jinja2 (autoescaped) from the package's
templates; the DAG and the timeline are inline SVG. ``static/viewer.js`` only recolours
steps from the event stream, refreshes the page's sections by fetching the page again,
and posts approvals. Nothing is loaded from elsewhere, which the Content-Security-Policy
sent with every page enforces.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import parse_qs

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from orchestration.errors import StoreError
from orchestration.result import RunStatus
from orchestration.server._api import RUN_STATUSES, read_run
from orchestration.server._dag import NODE_H, NODE_W
from orchestration.server._errors import ApiError
from orchestration.server._redacting import redacted_events, redacted_result
from orchestration.server._runs import RunManager
from orchestration.server._security import SESSION_COOKIE, caller_tenant
from orchestration.server._tenants import Access
from orchestration.server._view import BAR_W, run_view

__all__ = ["PAGE_HEADERS", "ui_routes"]

PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
                               "img-src 'self' data:; connect-src 'self'; form-action 'self'; "
                               "base-uri 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    # not no-referrer: with it browsers post this server's own forms with "Origin: null",
    # which SameOriginWrites must refuse; same-origin still sends nothing to other sites
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}

_templates = Environment(loader=PackageLoader("orchestration.server", "templates"),
                         autoescape=select_autoescape(["html"]), trim_blocks=True,
                         lstrip_blocks=True)
_templates.filters["when"] = lambda ts: (time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))
                                         if ts else "–")


def _render(request: Request, template: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    root = request.scope.get("root_path", "")
    html = _templates.get_template(template).render(base=root, static=f"{root}/static",
                                                    **context)
    return HTMLResponse(html, status_code=status_code, headers=PAGE_HEADERS)


def _manager(request: Request) -> RunManager:
    manager: RunManager = request.app.state.runs
    return manager


async def runs_page(request: Request) -> Response:
    status: str | None = request.query_params.get("status") or None
    if status not in (None, *RUN_STATUSES):
        status = None
    manager = _manager(request)
    tenant = caller_tenant(request.scope)
    try:
        runs = await manager.orchestrator.alist_runs(
            status, 100, tenant=tenant.name if tenant is not None else None)
    except StoreError as exc:
        return _render(request, "error.html", 503, title="run store unavailable",
                       message=manager.orchestrator.redactor.redact(str(exc)))
    statuses: list[RunStatus] = list(RUN_STATUSES)
    return _render(request, "runs.html", runs=runs, status=status, statuses=statuses,
                   active=manager.active, max_runs=manager.max_runs,
                   tenant=tenant.name if tenant is not None else None)


async def run_page(request: Request) -> Response:
    manager = _manager(request)
    run_id = request.path_params["run_id"]
    try:
        result = await read_run(manager, run_id, caller_tenant(request.scope))
    except ApiError as exc:
        return _render(request, "error.html", exc.status, title="run not found"
                       if exc.status == 404 else "run unavailable",
                       message=manager.orchestrator.redactor.redact(exc.message))
    redactor = manager.orchestrator.redactor
    events = redacted_events(redactor, await manager.orchestrator.aget_events(run_id))
    started_at = None
    if result.status == "running":  # for the live "running for" time
        try:
            stored = await manager.orchestrator.store.load(run_id)
        except StoreError:
            stored = None
        started_at = stored.state.started_at if stored is not None else None
    view = run_view(redacted_result(redactor, result), events, started_at=started_at)
    return _render(request, "run.html", view=view, node_w=NODE_W, node_h=NODE_H, bar_w=BAR_W,
                   legend=SEGMENT_LEGEND)


SEGMENT_LEGEND = {
    "succeeded": "call succeeded", "failed": "call failed",
    "invalid": "not sent (rejected before sending)", "unbound": "not sent (a reference did "
    "not resolve)", "not_sent": "not sent (stopped by a guard)",
    "cancelled": "cut off in flight (deadline or cancel)", "delay": "backoff wait",
    "running": "running now",
}
"""Every segment kind the timeline draws, as its legend says it."""


async def favicon(request: Request) -> Response:
    """Browsers ask for /favicon.ico whatever the page links: the viewer's icon."""
    return RedirectResponse(request.scope.get("root_path", "") + "/static/favicon.svg",
                            status_code=301)


def _next_page(target: str | None) -> str:
    """Only pages of the viewer: never an open redirect elsewhere."""
    if target and target.startswith("/ui") and "//" not in target and "\\" not in target:
        return target
    return "/ui/"


async def login(request: Request) -> Response:
    access: Access = request.app.state.access
    root = request.scope.get("root_path", "")
    if request.method == "GET":
        return _render(request, "login.html", next=_next_page(request.query_params.get("next")),
                       needed=access.required, failed=False)
    form = parse_qs((await request.body()).decode("utf-8", "replace"))
    target = _next_page((form.get("next") or [""])[0])
    given = (form.get("token") or [""])[0]
    if not access.required:
        return RedirectResponse(root + target, status_code=303)
    cookie = access.cookie_for(given)
    if cookie is None:
        return _render(request, "login.html", 401, next=target, needed=True, failed=True)
    response = RedirectResponse(root + target, status_code=303)
    response.set_cookie(SESSION_COOKIE, cookie, httponly=True, samesite="strict",
                        secure=request.url.scheme == "https", path=root or "/")
    return response


async def to_viewer(request: Request) -> Response:
    return RedirectResponse(request.scope.get("root_path", "") + "/ui/", status_code=307)


def ui_routes() -> list[Route]:
    return [
        Route("/", to_viewer, methods=["GET"]),
        Route("/ui", to_viewer, methods=["GET"]),
        Route("/ui/", runs_page, methods=["GET"]),
        Route("/ui/runs/{run_id}", run_page, methods=["GET"]),
        Route("/login", login, methods=["GET", "POST"]),
        Route("/favicon.ico", favicon, methods=["GET"]),
    ]
