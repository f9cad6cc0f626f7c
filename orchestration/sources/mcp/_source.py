"""An MCP server as a source: its tools listed (every page) as capabilities, and one
``tools/call`` per call, every outcome classified (see ``_answers``), on the server's
session (see ``_sessions``).

Tool annotations become flags (``readOnlyHint``/``idempotentHint`` → idempotent, an
explicit ``destructiveHint`` → ``requires_approval``); an odd tool is left out with a
note, never the server. Servers that report failure as ordinary text ("Error: Only SELECT
queries are allowed") are read as ``isError`` results when the server's
``error_pattern`` matches the text.
"""

from __future__ import annotations

import asyncio
import logging
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

import mcp.types as mcp_types
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from orchestration._transport import CallResult
from orchestration.capability import Capability, schema_problems
from orchestration.errors import CatalogError
from orchestration.protocol import ErrorCategory, ErrorSource, StepError
from orchestration.sources import SourceListing, SourceNote
from orchestration.sources._runtime import SourceClosed, SourceRuntime
from orchestration.sources.mcp._answers import (
    CONNECTION_CLOSED,
    error_from_mcp_error,
    error_from_result,
    result_data,
)
from orchestration.sources.mcp._sessions import ServerSessions, Unavailable, explain

__all__ = ["CALL_GRACE_S", "LIST_TIMEOUT_S", "MAX_LIST_PAGES", "MCPServerSource",
           "MCPToolInvoker", "capability_name"]

log = logging.getLogger("dagwright.sources.mcp")

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
MAX_LIST_PAGES = 100
LIST_TIMEOUT_S = 30.0
CALL_GRACE_S = 1.0  # the caller's own timer waits this much longer than the SDK's


def capability_name(tool_name: str) -> str:
    """An MCP tool name as a capability name (they allow a leading digit or hyphen)."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", tool_name)
    return name if _NAME.match(name) else f"_{name}"


def _without_duplicate_required(schema: Any) -> Any:
    """``schema`` with each ``required`` list's duplicates dropped (servers in the wild
    send ``["a", "a"]``, which JSON Schema forbids); other shapes are left as they are."""
    if isinstance(schema, list):
        return [_without_duplicate_required(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: _without_duplicate_required(value) for key, value in schema.items()}
    required = out.get("required")
    if isinstance(required, list) and all(isinstance(r, str) for r in required):
        out["required"] = list(dict.fromkeys(required))
    return out


def _schema_problems(schema: Any, what: str) -> str:
    """Every way ``schema`` is not a valid JSON Schema, in one line ("" when it is)."""
    return "; ".join(p.removeprefix(": ") for p in schema_problems(schema, "", what))


class MCPServerSource:
    """One MCP server: how to reach it, its session, and its tools as capabilities."""

    def __init__(
        self,
        name: str,
        *,
        command: Sequence[str] | None,
        env: Mapping[str, str] | None,
        cwd: Any,
        url: str | None,
        headers: Mapping[str, str] | None,
        tools: Sequence[str] | None,
        timeout_s: float | None,
        connect_timeout_s: float,
        refresh_s: float | None,
        overrides: Mapping[str, Mapping[str, Any]] | None,
        runtime: SourceRuntime,
        error_pattern: str | None = None,
    ) -> None:
        where = f"MCP server {name!r}"
        if not isinstance(name, str) or not _NAME.match(name):
            raise CatalogError(f"{where}: the name must match {_NAME.pattern} (it becomes the "
                               "tool name of its capabilities)")
        if (command is None) == (url is None):
            raise CatalogError(f"{where}: give exactly one of command=[...] (a stdio server) "
                               "or url='http://...' (streamable HTTP)")
        if command is not None and (isinstance(command, str) or not command
                                    or not all(isinstance(a, str) for a in command)):
            raise CatalogError(f"{where}: command must be a non-empty list of strings (the "
                               f"argv, e.g. ['python', 'server.py']), got {command!r}")
        if url is not None and not re.match(r"^https?://", url):
            raise CatalogError(f"{where}: url must start with http:// or https://, got {url!r}")
        if env and command is None:
            raise CatalogError(f"{where}: env applies to a stdio server (command=...); "
                               "an HTTP server takes headers")
        if headers and url is None:
            raise CatalogError(f"{where}: headers apply to an HTTP server (url=...); "
                               "a stdio server takes env")
        if refresh_s is not None and refresh_s <= 0:
            raise CatalogError(f"{where}: refresh_s must be > 0, got {refresh_s!r}")
        self.name = name
        self.label = f"mcp:{name}"
        self.command = list(command) if command is not None else None
        self.env = {str(k): str(v) for k, v in (env or {}).items()} or None
        self.cwd = cwd
        self.url = url
        self.headers = {str(k): str(v) for k, v in (headers or {}).items()}
        self.tools = list(tools) if tools is not None else None
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.refresh_s = refresh_s
        try:
            self.error_pattern = re.compile(error_pattern) if error_pattern else None
        except re.error as exc:
            raise CatalogError(f"{where}: error_pattern {error_pattern!r} is not a regular "
                               f"expression: {exc}") from None
        self.overrides = {str(k): dict(v) for k, v in (overrides or {}).items()}
        self.runtime = runtime
        self.sessions = ServerSessions(
            name, command=self.command, env=self.env, cwd=cwd, url=url, headers=self.headers,
            connect_timeout_s=connect_timeout_s)

    def describe(self) -> str:
        if self.command is not None:
            return f"command {shlex.join(self.command)}"
        return f"url {self.url}"

    # --- listing ------------------------------------------------------------------
    def load_sync(self) -> SourceListing:
        """Connect and list the tools now (the catalog is being built); CatalogError if not."""
        where = f"MCP server {self.name!r} ({self.describe()})"
        try:
            listing = self.runtime.run_sync(self.load(), self.connect_timeout_s + LIST_TIMEOUT_S)
        except TimeoutError:
            raise CatalogError(f"{where}: no tool list within "
                               f"{self.connect_timeout_s + LIST_TIMEOUT_S:g}s") from None
        except CatalogError as exc:
            raise CatalogError(f"{where}: {exc}") from exc
        except Exception as exc:
            if self.sessions.auth_status in (401, 403):
                raise CatalogError(f"{where}: the server answered HTTP {self.sessions.auth_status}; check "
                                   "the headers (e.g. Authorization)") from exc
            raise CatalogError(f"{where}: cannot list its tools: {explain(exc)}") from exc
        if self.tools is not None:
            have = {c.invoker.tool_name for c in listing.capabilities
                    if isinstance(c.invoker, MCPToolInvoker)}
            missing = [t for t in self.tools if t not in have]
            if missing:
                raise CatalogError(f"{where}: has no tool(s) {', '.join(missing)}")
        return listing

    async def load(self) -> SourceListing:
        """List the server's tools (every page) and build their capabilities."""
        client = await self.sessions.client()
        description = client.instructions or f"MCP server {self.name}"
        tools: list[mcp_types.Tool] = []
        offered = client.server_capabilities
        if offered.tools is None:  # a server of resources or prompts only: nothing to call
            kinds = [k for k in ("resources", "prompts", "completions", "logging")
                     if getattr(offered, k, None) is not None]
            return SourceListing([], {self.name: description}, [SourceNote(
                self.label, "(server)", "initialize/capabilities",
                "the server offers no tools (it declares "
                f"{', '.join(kinds) or 'no capabilities'}); nothing of it can be called",
                skipped=True)], schemas_checked=True)
        cursor: str | None = None
        for _ in range(MAX_LIST_PAGES):
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        wanted = [t for t in tools if self.tools is None or t.name in self.tools]
        notes: list[SourceNote] = []
        capabilities: list[Capability] = []
        for tool in wanted:  # one tool at a time: an odd one is left out, not the server
            capability = self._capability(tool, notes, {c.name for c in capabilities})
            if capability is not None:
                capabilities.append(capability)
        return SourceListing(capabilities, {self.name: description}, notes,
                             schemas_checked=True)

    def _capability(self, tool: mcp_types.Tool, notes: list[SourceNote],
                    taken: set[str]) -> Capability | None:
        """One MCP tool as a capability, or None when its input schema is not a valid
        JSON Schema (left out, with a note saying where); annotations become flags.

        What can be repaired is, with a note: duplicate ``required`` entries are dropped,
        an invalid output schema is not used (the output is then not checked), a name
        that two tools share once made an identifier gets a suffix.

        ``readOnlyHint`` or ``idempotentHint`` → idempotent; an explicit
        ``destructiveHint: true`` (on a tool that is not read-only) → ``requires_approval``.
        MCP's own default calls every unannotated tool possibly destructive; taking that
        literally would pause every run on a server that simply does not annotate, so
        only an explicit hint asks for a person (``overrides`` can ask for more).
        """
        def note(where: str, message: str, *, skipped: bool = False) -> None:
            notes.append(SourceNote(self.label, tool.name, f"tools/{tool.name}/{where}",
                                    message, skipped=skipped))

        input_schema = _without_duplicate_required(dict(tool.input_schema or {"type": "object"}))
        if input_schema != tool.input_schema and tool.input_schema:
            note("inputSchema", "duplicate 'required' entries removed")
        problems = _schema_problems(input_schema, "inputSchema")
        if problems:
            note("inputSchema", f"left out: {problems}", skipped=True)
            return None
        output_schema = (_without_duplicate_required(dict(tool.output_schema))
                         if tool.output_schema else None)
        problems = _schema_problems(output_schema, "outputSchema") if output_schema else ""
        if problems:
            note("outputSchema", f"output schema not used (its output is not checked): "
                 f"{problems}")
            output_schema = None
        name = capability_name(tool.name)
        if name in taken:
            renamed = next(f"{name}_{n}" for n in range(2, len(taken) + 3)
                           if f"{name}_{n}" not in taken)
            note("name", f"{name!r} is also another tool's name as an identifier; this one "
                 f"is {renamed!r}")
            name = renamed
        hints = tool.annotations
        read_only = bool(hints and hints.read_only_hint)
        fields: dict[str, Any] = {
            "tool": self.name,
            "name": name,
            "description": tool.description or tool.title or "",
            "input_schema": input_schema,
            "output_schema": output_schema,
            "idempotent": read_only or bool(hints and hints.idempotent_hint),
            "requires_approval": not read_only and bool(hints and hints.destructive_hint),
            "timeout_s": self.timeout_s,
            "source": self.label,
        }
        override = self.overrides.get(tool.name, {})
        forbidden = {"tool", "name", "invoker", "url", "function", "source"} & set(override)
        if forbidden:
            raise CatalogError(f"overrides for tool {tool.name!r} may not set "
                               f"{', '.join(sorted(forbidden))}")
        fields.update(override)
        try:
            return Capability(**fields, invoker=MCPToolInvoker(self, tool.name))
        except ValidationError as exc:
            why = "; ".join(f"{'.'.join(map(str, e['loc'])) or '(root)'}: {e['msg']}"
                            for e in exc.errors())
            if override:  # the user's own overrides are wrong: not the server's doing
                raise CatalogError(f"tool {tool.name!r}: {why}") from exc
            note("", f"left out: {why}", skipped=True)
            return None

    # --- calling ------------------------------------------------------------------
    async def call_tool(self, tool_name: str, params: dict[str, Any], timeout_s: float,
                        credentials: Mapping[str, str] | None = None) -> CallResult:
        """One ``tools/call`` on the runtime loop, every outcome classified; with a run's
        ``credentials``, on a session opened with those headers in place of the source's."""
        try:
            client = (await self.sessions.credentialed_client(credentials) if credentials
                      else await self.sessions.client())
        except Unavailable as exc:
            if exc.http_status in (401, 403):
                return CallResult(error=StepError(
                    category=ErrorCategory.AUTH_ERROR, code=f"HTTP_{exc.http_status}",
                    message=f"MCP server {self.name!r}: {exc}", http_status=exc.http_status,
                    request_sent=False))
            return CallResult(error=StepError(
                category=ErrorCategory.SERVICE_ERROR, code="MCP_UNAVAILABLE",
                source=ErrorSource.TRANSPORT,
                message=f"MCP server {self.name!r} ({self.describe()}) is unavailable: {exc}",
                retryable=True, request_sent=False))
        self.sessions.auth_status = None
        try:
            result = await client.call_tool(tool_name, params, read_timeout_seconds=timeout_s)
        except MCPError as exc:
            auth = self.sessions.auth_status if self.sessions.auth_status in (401, 403) else None
            if exc.code == CONNECTION_CLOSED:
                self.sessions.forget()
            return CallResult(error=error_from_mcp_error(exc, auth_status=auth))
        except TimeoutError:
            return CallResult(error=StepError(
                category=ErrorCategory.TIMEOUT, code="TOOL_TIMEOUT", source=ErrorSource.TRANSPORT,
                message=f"MCP tool {tool_name!r} did not answer within {timeout_s:g}s",
                retryable=True, request_sent=True))
        except ValidationError as exc:
            return CallResult(error=StepError(
                category=ErrorCategory.INVALID_RESPONSE, code="MCP_INVALID_RESULT",
                source=ErrorSource.RESPONSE,
                message=f"the MCP server's answer does not follow the protocol: {explain(exc)}"))
        except RuntimeError as exc:
            # the SDK checks structured content against the tool's outputSchema
            return CallResult(error=StepError(
                category=ErrorCategory.INVALID_RESPONSE, code="MCP_INVALID_OUTPUT",
                source=ErrorSource.RESPONSE,
                message=str(exc)))
        except Exception as exc:
            self.sessions.forget()
            return CallResult(error=StepError(
                category=ErrorCategory.SERVICE_ERROR, code="MCP_TRANSPORT_ERROR",
                source=ErrorSource.TRANSPORT,
                message=f"MCP server {self.name!r}: {explain(exc)}", retryable=True,
                request_sent=True))
        if result.is_error:
            return CallResult(error=error_from_result(result))
        if self.error_pattern is not None and result.structured_content is None:
            text = "\n".join(block.text for block in result.content
                             if isinstance(block, mcp_types.TextContent))
            if self.error_pattern.search(text):
                return CallResult(error=error_from_result(
                    result, matched=self.error_pattern.pattern))
        return CallResult(data=result_data(result))

    async def aclose(self) -> None:
        """Close the server's sessions (bounded: see ``_sessions``)."""
        await self.sessions.aclose()


class MCPToolInvoker:
    """The catalog's invoker for one MCP tool: hands the call to the runtime loop."""

    def __init__(self, source: MCPServerSource, tool_name: str) -> None:
        self.source = source
        self.tool_name = tool_name

    @property
    def accepts_credentials(self) -> bool:
        """A server over HTTP takes a run's own headers (a session of their own)."""
        return self.source.url is not None

    async def call(
        self, params: dict[str, Any], *, timeout_s: float, headers: Mapping[str, str],
        credentials: Mapping[str, str] | None = None,
    ) -> CallResult:
        """One call; ``headers`` (trace context) have no place in an MCP request;
        ``credentials`` (a run's own, HTTP servers only) open a session of their own."""
        try:
            async with asyncio.timeout(timeout_s + CALL_GRACE_S):
                return await self.source.runtime.run(
                    self.source.call_tool(self.tool_name, params, timeout_s, credentials))
        except TimeoutError:
            return CallResult(error=StepError(
                category=ErrorCategory.TIMEOUT, code="TOOL_TIMEOUT", source=ErrorSource.TRANSPORT,
                message=f"MCP tool {self.source.name}.{self.tool_name} did not answer within "
                f"{timeout_s:g}s", retryable=True, request_sent=True))
        except SourceClosed as exc:
            return CallResult(error=StepError(
                category=ErrorCategory.SERVICE_ERROR, code="MCP_SESSION_CLOSED",
                source=ErrorSource.TRANSPORT,
                message=f"MCP server {self.source.name!r}: {exc}", retryable=True,
                request_sent=True))

    def __repr__(self) -> str:
        return f"MCPToolInvoker({self.source.label}/{self.tool_name})"
