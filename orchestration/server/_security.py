"""Who may talk to the server, and how much: the token, same-origin writes, body size.

Three small ASGI middlewares, outermost first in ``create_app``:

* :class:`BodyLimit` reads a request body up to ``max_bytes`` and answers 413 past it
  (a declared ``Content-Length`` is refused before anything is read);
* :class:`SameOriginWrites` refuses a POST whose ``Origin`` is another site: a page
  elsewhere could otherwise make a browser start runs on a server on 127.0.0.1, which
  needs no token. ``Origin: null`` (what a browser sends for a form posted from a page
  with ``Referrer-Policy: no-referrer``, or from a sandboxed or ``file:`` page) is
  refused too, unless the browser itself vouches that the request is same-origin with
  ``Sec-Fetch-Site: same-origin`` (a header no page can set). The viewer's pages send
  ``Referrer-Policy: same-origin`` so that browsers put the real origin on their own
  forms and ``fetch`` calls;
* :class:`TokenAuth`: with a token, every ``/v1`` and ``/ui`` request needs
  ``Authorization: Bearer <token>`` (compared in constant time). Browsers cannot add
  that header to a page load or an ``EventSource``, so ``/login`` trades the token for an
  HttpOnly, SameSite=Strict session cookie holding an HMAC of the token (not the token).
  A browser opening a viewer page without a session is redirected to ``/login``.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import quote

from starlette.datastructures import Headers
from starlette.responses import RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from orchestration.errors import ConfigError
from orchestration.server._errors import error_response
from orchestration.server._tenants import Access, Caller, Tenant, session_value

__all__ = ["CALLER", "LOOPBACK_HOSTS", "SESSION_COOKIE", "AllowedHosts", "BodyLimit",
           "SameOriginWrites", "TokenAuth", "caller_tenant", "check_exposure", "check_token",
           "is_loopback", "session_value"]

SESSION_COOKIE = "dagwright_session"
LOOPBACK_HOSTS = ["127.0.0.1", "localhost", "::1", "[::1]"]
"""The Host headers a loopback server without a token accepts (against DNS rebinding)."""
_PROTECTED = ("/v1", "/ui")
MIN_TOKEN_CHARS = 16


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address; a name other than localhost may resolve
    to anything, so it is not."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_token(token: str | None) -> None:
    """A token must be long enough not to be guessed (the value is never echoed)."""
    if token is not None and len(token) < MIN_TOKEN_CHARS:
        raise ConfigError(
            f"ORCH_SERVE_TOKEN has {len(token)} characters; use at least {MIN_TOKEN_CHARS}, "
            "e.g. the output of: python -c 'import secrets; print(secrets.token_urlsafe(32))'")


def check_exposure(host: str, token: str | None, insecure: bool) -> None:
    """Refuse to listen beyond this machine without a token, unless told ``--insecure``."""
    if token is None and not insecure and not is_loopback(host):
        raise ConfigError(
            # "token: <word>" reads as a secret to the redaction of printed errors
            f"refusing to listen on {host} without a token, since anyone who can reach it "
            "could start runs that call your tools. Set ORCH_SERVE_TOKEN (at least "
            f"{MIN_TOKEN_CHARS} characters), listen on 127.0.0.1, or pass --insecure if the "
            "network itself is protected")


CALLER = "dagwright.caller"
"""The scope key under which :class:`TokenAuth` leaves who the request comes from (a
:class:`~orchestration.server._tenants.Caller`): its tenant, on a server with tenants."""


def caller_tenant(scope: Scope) -> Tenant | None:
    """The tenant a request comes from (None: a single-tenant server)."""
    caller = scope.get(CALLER)
    return caller.tenant if isinstance(caller, Caller) else None


class TokenAuth:
    """With a token (or tenants' tokens), ``/v1`` and ``/ui`` need a bearer token or the
    session cookie; who the caller is goes into the scope (:data:`CALLER`)."""

    def __init__(self, app: ASGIApp, token: str | None = None,
                 access: Access | None = None) -> None:
        self.app = app
        self.access = access if access is not None else Access(token)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.access.required:
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        if not any(path == p or path.startswith(p + "/") for p in _PROTECTED):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        scheme, _, value = headers.get("authorization", "").partition(" ")
        caller = self.access.by_token(value.strip()) if scheme.lower() == "bearer" else None
        if caller is None:
            cookie = _cookie(headers.get("cookie", ""), SESSION_COOKIE)
            caller = self.access.by_cookie(cookie) if cookie is not None else None
        if caller is not None:
            scope[CALLER] = caller
            await self.app(scope, receive, send)
            return
        await self._refuse(scope, headers)(scope, receive, send)

    @staticmethod
    def _refuse(scope: Scope, headers: Headers) -> Response:
        challenge = {"WWW-Authenticate": 'Bearer realm="dagwright"'}
        if (scope["path"].startswith("/ui") and scope["method"] in ("GET", "HEAD")
                and "text/html" in headers.get("accept", "")):
            # a page load in a browser: to the sign-in page, which comes back here after
            root = scope.get("root_path", "")
            target = scope["path"] + (f"?{scope['query_string'].decode('latin-1')}"
                                      if scope.get("query_string") else "")
            return RedirectResponse(f"{root}/login?next={quote(target, safe='/')}",
                                    status_code=303, headers={"Cache-Control": "no-store"})
        return error_response(401, "unauthorized",
                              "this server needs a bearer token (the value of "
                              "ORCH_SERVE_TOKEN, or a token of ORCH_SERVE_TOKENS) in the "
                              "header Authorization, after 'Bearer '", headers=challenge)


def _cookie(header: str, name: str) -> str | None:
    for part in header.split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value
    return None


class SameOriginWrites:
    """A POST from a page of another origin is refused (403): browsers send ``Origin``
    with every cross-origin POST, and a form or a ``fetch`` from any site could
    otherwise reach a server on 127.0.0.1."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] not in ("GET", "HEAD", "OPTIONS"):
            headers = Headers(scope=scope)
            origin = headers.get("origin")
            if origin == "null" and headers.get("sec-fetch-site") == "same-origin":
                origin = None  # the browser vouches: a page of this server (see above)
            if origin is not None:
                own = f"{scope.get('scheme', 'http')}://{headers.get('host', '')}"
                if origin != own:
                    response = error_response(
                        403, "forbidden_origin",
                        f"a request from a page of {origin} may not change anything here "
                        f"({own}); call the API from a server, or from the viewer itself")
                    await response(scope, receive, send)
                    return
        await self.app(scope, receive, send)


def _host_name(header: str) -> str:
    """The name in a ``Host`` header, without its port (``[::1]:8080`` -> ``[::1]``)."""
    if header.startswith("["):
        return header[:header.find("]") + 1] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


class AllowedHosts:
    """Only requests whose ``Host`` names one of ``allowed`` (against DNS rebinding); a
    400 ``invalid_host`` in the API's one error shape otherwise (Starlette's own
    ``TrustedHostMiddleware`` answers plain text)."""

    def __init__(self, app: ASGIApp, allowed: list[str]) -> None:
        self.app = app
        self.allowed = {h.lower() for h in allowed}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            header = Headers(scope=scope).get("host", "")
            if _host_name(header).lower() not in self.allowed:
                response = error_response(
                    400, "invalid_host",
                    f"this server answers only to {', '.join(sorted(self.allowed))} "
                    f"(the request named {header[:100]!r}); without a token it listens on "
                    "loopback and refuses other host names against DNS rebinding")
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


class BodyLimit:
    """Read at most ``max_bytes`` of a request body; 413 past it.

    The body is read here whole (requests to this API are small JSON documents) and
    handed to the app as one message, so a handler never sees a body cut short."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        declared = Headers(scope=scope).get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._too_large(int(declared))(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._too_large(size)(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    def _too_large(self, size: int) -> Response:
        return error_response(
            413, "payload_too_large",
            f"the request body has {size} bytes or more; this server reads at most "
            f"{self.max_bytes} (ORCH_SERVE_MAX_BODY_BYTES)",
            details={"max_bytes": self.max_bytes})
