"""The sessions of one MCP server: opened when first needed, reused, reopened when dead.

A session lives on the catalog's source runtime loop (see ``orchestration.sources._runtime``),
held open by one owner task, because the SDK's anyio task groups must be entered and left
by the same task. A session that dies (the server crashed, the connection dropped) is
reopened by the next call. Closing sets the owner's stop event and waits a bounded time,
then cancels it: closing never hangs.

A run's own credentials (an HTTP server's per-user auth) open a session of their own,
kept by a digest of those headers, least recently used closed first: a server may tie a
session to whom it authenticated, so runs with other credentials never share one.

Over HTTP, a URL whose POST is refused (400/404/405) is tried once more with MCP's older
HTTP+SSE transport, as the specification's backwards compatibility rules allow; a server
that turns out to speak the 2025 handshake era is asked that way from then on.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.sse import sse_client
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from orchestration.sources.mcp._stdio import StderrTail, launcher_argv

__all__ = ["CLOSE_TIMEOUT_S", "MAX_CREDENTIALED_SESSIONS", "ServerSessions", "Unavailable",
           "explain"]

log = logging.getLogger("dagwright.sources.mcp")

CLOSE_TIMEOUT_S = 3.0
MAX_CREDENTIALED_SESSIONS = 32
"""Sessions opened with runs' own credentials kept open at once (per server)."""


class Unavailable(Exception):
    """The session could not be opened (nothing was sent)."""

    def __init__(self, message: str, *, http_status: int | None = None) -> None:
        super().__init__(message)
        self.http_status = http_status


def explain(exc: BaseException) -> str:
    """The leaf messages of an exception (anyio wraps failures in exception groups)."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(explain(e) for e in exc.exceptions)
    if isinstance(exc, Unavailable):
        return str(exc)
    text = str(exc) or type(exc).__name__
    if type(exc).__name__ == "HTTPStatusError":  # httpx adds a line pointing to MDN
        text = text.splitlines()[0]
    return text if type(exc).__name__ in text else f"{type(exc).__name__}: {text}"


class _Session:
    """One open connection, held by its owner task on the runtime loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop,
                 headers: Mapping[str, str] | None = None) -> None:
        self.loop = loop
        self.headers = headers
        """A run's own headers for this session (None: the server's)."""
        self.client: Client | None = None
        self.stop = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.alive = True
        self.stderr: StderrTail | None = None


class ServerSessions:
    """The sessions of the server ``name``: reached by ``command`` (stdio) or ``url``."""

    def __init__(self, name: str, *, command: Sequence[str] | None, env: dict[str, str] | None,
                 cwd: Any, url: str | None, headers: dict[str, str],
                 connect_timeout_s: float) -> None:
        self.name = name
        self.label = f"mcp:{name}"
        self.command = command
        self.env = env
        self.cwd = cwd
        self.url = url
        self.headers = headers
        self.connect_timeout_s = connect_timeout_s
        self.auth_status: int | None = None
        """401 or 403 when the server's last HTTP answer refused the credentials."""
        self._session: _Session | None = None
        self._credentialed: collections.OrderedDict[str, _Session] = collections.OrderedDict()
        self._open_lock: asyncio.Lock | None = None
        self._lock_loop: asyncio.AbstractEventLoop | None = None
        self._refused_status: int | None = None  # a 4xx to the streamable HTTP POST
        self._http_transport = "streamable"  # "sse" once a server shows it only has that
        self._mode: Any = "auto"  # how the SDK negotiates; "legacy" once a server shows it is

    async def client(self) -> Client:
        """The open session's client, opening one if there is none (or it died)."""
        loop = asyncio.get_running_loop()
        session = self._session
        if session is not None and session.alive and session.loop is loop:
            assert session.client is not None
            return session.client
        if self._open_lock is None or self._lock_loop is not loop:
            self._open_lock, self._lock_loop = asyncio.Lock(), loop
        async with self._open_lock:
            session = self._session
            if session is not None and session.alive and session.loop is loop:
                assert session.client is not None
                return session.client
            if session is not None and session.loop is loop:
                await self._close(session)
            self._session = None
            self._session = await self._open(loop)
            assert self._session.client is not None
            return self._session.client

    async def credentialed_client(self, credentials: Mapping[str, str]) -> Client:
        """The client of the session opened with ``credentials`` (opened now if there is
        none alive); at most :data:`MAX_CREDENTIALED_SESSIONS` are kept, the least
        recently used closed first."""
        loop = asyncio.get_running_loop()
        key = hashlib.sha256(json.dumps(sorted(credentials.items())).encode()).hexdigest()
        session = self._credentialed.get(key)
        if session is not None and session.alive and session.loop is loop:
            self._credentialed.move_to_end(key)
            assert session.client is not None
            return session.client
        if session is not None:
            del self._credentialed[key]
            if session.loop is loop:
                await self._close(session)
        replaced = {name.lower() for name in credentials}
        headers = {**{k: v for k, v in self.headers.items() if k.lower() not in replaced},
                   **credentials}
        session = await self._open(loop, headers)
        self._credentialed[key] = session
        while len(self._credentialed) > MAX_CREDENTIALED_SESSIONS:
            _, oldest = self._credentialed.popitem(last=False)
            if oldest.loop is loop:
                await self._close(oldest)
        assert session.client is not None
        return session.client

    def forget(self) -> None:
        """Drop a dead session so the next call opens a new one (its owner is told to stop)."""
        session, self._session = self._session, None
        if session is not None:
            session.alive = False
            session.stop.set()

    async def aclose(self) -> None:
        """Close the sessions (bounded: the owner is cancelled if it does not stop)."""
        session, self._session = self._session, None
        loop = asyncio.get_running_loop()
        if session is not None and session.loop is loop:
            await self._close(session)
        credentialed = list(self._credentialed.values())
        self._credentialed.clear()
        for other in credentialed:
            if other.loop is loop:
                await self._close(other)
        self._open_lock = None

    # --- opening and closing ----------------------------------------------------------
    async def _open(self, loop: asyncio.AbstractEventLoop,
                    headers: Mapping[str, str] | None = None) -> _Session:
        """A new session; a URL whose POST is refused (400/404/405) is tried once more
        with MCP's older HTTP+SSE transport, as the specification's backwards
        compatibility rules say a client may (servers in the wild still offer only it)."""
        self._refused_status = None
        try:
            return await self._open_once(loop, headers)
        except Unavailable as first:
            refused = self._refused_status
            if self.url is None or self._http_transport != "streamable" \
                    or refused not in (400, 404, 405):
                raise
            self._http_transport = "sse"
            try:
                return await self._open_once(loop, headers)
            except Unavailable as second:
                self._http_transport = "streamable"
                raise Unavailable(
                    f"it takes neither MCP's streamable HTTP (POST {self.url} was answered HTTP "
                    f"{refused}) nor the older HTTP+SSE transport ({second}); check the URL "
                    "(streamable HTTP servers usually listen on /mcp, SSE ones on /sse)",
                    http_status=second.http_status) from first

    async def _open_once(self, loop: asyncio.AbstractEventLoop,
                         headers: Mapping[str, str] | None) -> _Session:
        session = _Session(loop, headers)
        ready: asyncio.Future[Client] = loop.create_future()
        session.task = asyncio.create_task(self._own(session, ready), name=self.label)
        self.auth_status = None
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                session.client = await asyncio.shield(ready)
        except TimeoutError:
            await self._close(session)
            why = (f"the server did not finish the MCP handshake within "
                   f"{self.connect_timeout_s:g}s (connect_timeout_s: a server that installs "
                   "or loads something before it answers may need more)")
            if session.stderr is not None:
                await session.stderr.settle()
                why = session.stderr.explain(why)
            raise Unavailable(why) from None
        except Unavailable as exc:
            exc.http_status = self.auth_status
            raise
        return session

    async def _own(self, session: _Session, ready: asyncio.Future[Client]) -> None:
        """The owner task: enters the SDK client, waits for the stop signal, leaves it."""
        try:
            async with contextlib.AsyncExitStack() as stack:
                client = await self._enter_client(stack, session)
                ready.set_result(client)
                await session.stop.wait()
        except BaseException as exc:
            if not ready.done():
                why = explain(exc)
                if session.stderr is not None:
                    await session.stderr.settle()
                    why = session.stderr.explain(why)
                ready.set_exception(Unavailable(why))
            elif not session.stop.is_set():
                log.warning("MCP server %s: the session ended: %s", self.name, explain(exc))
        finally:
            session.alive = False

    async def _enter_client(self, stack: contextlib.AsyncExitStack, session: _Session) -> Client:
        if self.command is not None:
            session.stderr = tail = StderrTail(self.name, self.command)
            stack.callback(tail.close)
            program, args = launcher_argv(self.command)
            params = StdioServerParameters(command=program, args=args, env=self.env,
                                           cwd=self.cwd)
            transport: Any = stdio_client(params, errlog=tail.file)
        else:
            assert self.url is not None

            async def remember_status(response: httpx2.Response) -> None:
                if response.status_code in (401, 403):
                    self.auth_status = response.status_code
                elif response.status_code in (400, 404, 405) and response.request.method == "POST":
                    self._refused_status = response.status_code

            # a run's own credentials (session.headers) on either transport, never the
            # server's beside them
            headers = dict(session.headers) if session.headers is not None else self.headers
            http = httpx2.AsyncClient(headers=headers,
                                      timeout=httpx2.Timeout(30.0, read=300.0),
                                      event_hooks={"response": [remember_status]})
            await stack.enter_async_context(http)
            transport = (streamable_http_client(self.url, http_client=http)
                         if self._http_transport == "streamable"
                         else sse_client(self.url, headers=headers, timeout=30.0,
                                         sse_read_timeout=300.0))
        client = Client(transport, cache=None, mode=self._mode)
        entered = await stack.enter_async_context(client)
        if self._mode == "auto" and entered.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS:
            # a handshake-era server (1.x SDK): the next session skips the server/discover
            # probe, which such a server rejects with a page of validation warnings
            self._mode = "legacy"
        return entered

    async def _close(self, session: _Session) -> None:
        session.stop.set()
        task = session.task
        if task is not None and not task.done():
            done, _ = await asyncio.wait({task}, timeout=CLOSE_TIMEOUT_S)
            if not done:
                task.cancel()
                await asyncio.wait({task}, timeout=CLOSE_TIMEOUT_S)
        session.alive = False
