"""MCP servers as capabilities: one ``name.tool`` per tool a server lists.

Built on the official ``mcp`` SDK, 2.x line (the ``mcp`` extra): 2.x is the
maintained line (1.x only gets security fixes), speaks both the 2026-07-28 protocol and
the 2025 handshake era, so it connects to servers built with either SDK generation.

Sessions. A session is opened the first time the server is needed (the catalog lists
its tools when the server is added) and reused by every later call, from any run, loop
or thread: it lives on the catalog's source runtime loop (see ``_runtime``), held open by
one owner task, because the SDK's anyio task groups must be entered and left by the same
task. A session that dies (the server crashed, the connection dropped) is reopened by
the next call. ``aclose`` sets the owner's stop event and waits a bounded time, then
cancels it: closing never hangs.

Results: ``structuredContent`` when present, else the text content, JSON-decoded when it
is JSON (several text blocks give a list). Errors are mapped to ``StepError`` by the
table in ``docs/tools.md``. An ``isError`` result is the channel MCP defines for telling
the model what went wrong ("Invalid timezone", "currency must be a 3-letter ISO code"),
so it is the tool's own word on its input: an ``INPUT_ERROR`` with ``retryable: true``
that layer 3 is asked to correct within its budget (an unknown tool is ``NOT_FOUND``).
Servers that report failure as ordinary text ("Error: Only SELECT queries are allowed")
are read the same way when the server's ``error_pattern`` matches the text. A crash or
transport failure is a ``SERVICE_ERROR``.

A stdio server runs under a small launcher (plain Python, no import of ours) that reports
how the server ended, and its stderr is read line by line into a bounded tail (and the
debug log): a server that dies at start is reported with its exit code and its last
stderr lines, in words a user acts on, instead of "Connection closed".
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import json
import logging
import os
import re
import shlex
import shutil
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from orchestration._extras import needs_extra
from orchestration._transport import CallResult
from orchestration.capability import Capability, schema_problems
from orchestration.errors import CatalogError
from orchestration.protocol import ErrorCategory, ErrorSource, StepError
from orchestration.sources import SourceListing, SourceNote
from orchestration.sources._runtime import SourceClosed, SourceRuntime

__all__ = [
    "CALL_GRACE_S",
    "CLOSE_TIMEOUT_S",
    "CONNECTION_CLOSED",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "LIST_TIMEOUT_S",
    "MAX_LIST_PAGES",
    "METHOD_NOT_FOUND",
    "REQUEST_TIMEOUT",
    "MCPServerSource",
    "MCPToolInvoker",
    "capability_name",
    "error_from_mcp_error",
    "error_from_result",
    "result_data"
]

try:
    import httpx2
    import mcp.types as mcp_types
    from mcp import Client, StdioServerParameters
    from mcp.client.sse import sse_client
    from mcp.client.stdio import stdio_client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared.exceptions import MCPError
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
except ImportError as _missing:  # pragma: no cover - depends on the installed extras
    raise CatalogError(needs_extra("MCP servers", "mcp", str(_missing))) from _missing

log = logging.getLogger("dagwright.sources.mcp")

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
MAX_LIST_PAGES = 100
LIST_TIMEOUT_S = 30.0
CLOSE_TIMEOUT_S = 3.0
MAX_CREDENTIALED_SESSIONS = 32
"""Sessions opened with runs' own credentials kept open at once (per server)."""
CALL_GRACE_S = 1.0  # the caller's own timer waits this much longer than the SDK's

# JSON-RPC error codes (the MCP SDK's names)
CONNECTION_CLOSED = -32000
REQUEST_TIMEOUT = -32001
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

# What SDKs write when a tool's arguments fail its input schema. The Python SDK (1.x
# and 2.x) answers an isError result "Error executing tool X: N validation error(s) for
# XArguments ..."; the TypeScript SDK "Input validation error: Invalid arguments for
# tool X ..." (older releases: a JSON-RPC -32602 error).
_INVALID_ARGUMENTS = re.compile(
    r"\d+ validation errors? for \S*Arguments\b|input validation error|"
    r"invalid arguments for (?:tool )?[\w.-]+|invalid params", re.IGNORECASE)
# A Python SDK server whose structured result breaks the tool's own outputSchema answers
# an isError result "Output validation error: ..." (not something new input fixes).
_INVALID_OUTPUT = re.compile(r"^(?:Error executing tool \S+: )?Output validation error\b",
                             re.IGNORECASE)
_UNKNOWN_TOOL = re.compile(
    r"^(?:MCP error -?\d+:\s*)?(?:unknown tool\b|tool ['\"]?[\w.-]+['\"]? not found)",
    re.IGNORECASE)


_LAUNCHER = (
    "import json, subprocess, sys\n"
    "def protocol(line):\n"
    "    if line.startswith(b'{\"jsonrpc\"'):\n"
    "        return True\n"
    "    if line.lstrip()[:1] not in (b'{', b'['):\n"
    "        return False\n"
    "    try:\n"
    "        data = json.loads(line)\n"
    "    except ValueError:\n"
    "        return False\n"
    "    items = data if isinstance(data, list) else [data]\n"
    "    return bool(items) and all(isinstance(i, dict) and 'jsonrpc' in i for i in items)\n"
    "try:\n"
    "    server = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE)\n"
    "except OSError as exc:\n"
    "    print(f'{MARK} cannot start {sys.argv[1]!r}: {exc.strerror}', file=sys.stderr)\n"
    "    sys.exit(127)\n"
    "out, err = sys.stdout.buffer, sys.stderr.buffer\n"
    "try:\n"
    "    for line in server.stdout:\n"
    "        if protocol(line):\n"
    "            out.write(line)\n"
    "            out.flush()\n"
    "        elif line.strip():\n"
    "            err.write(b'(on stdout) ' + line.rstrip(b'\\r\\n') + b'\\n')\n"
    "            err.flush()\n"
    "except (BrokenPipeError, KeyboardInterrupt):\n"
    "    pass\n"
    "code = server.wait()\n"
    "print(f'{MARK} exited with code {code}', file=sys.stderr)\n"
    "sys.exit(code if code >= 0 else 128 - code)\n"
)
"""Runs a stdio server as its child and says on stderr how it ended: the SDK keeps the
process to itself, so this is how its exit code reaches the error a user reads. Its
stdin is inherited; its stdout passes through line by line, and a line that is not a
JSON-RPC message (a banner, a print, a JSON log line: servers in the wild write them) goes
to stderr instead, where the tail keeps it, rather than into the SDK, which logs a
traceback for each."""
_MARK = "[dagwright-mcp-launcher]"
STDERR_TAIL_LINES = 20


class _StderrTail:
    """A stdio server's stderr: read by a thread into the last lines (and the debug log)."""

    def __init__(self, name: str, command: Sequence[str] = ()) -> None:
        self._command = list(command)
        read_fd, write_fd = os.pipe()
        self.file = os.fdopen(write_fd, "w")  # handed to the server process as its stderr
        self._reader = os.fdopen(read_fd, "r", errors="replace")
        self.lines: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
        self.exit_code: int | None = None
        self.start_failure: str | None = None
        self._name = name
        self._thread = threading.Thread(target=self._read, name=f"mcp-stderr-{name}", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            for raw in self._reader:
                line = raw.rstrip("\n")
                if line.startswith(_MARK):
                    said = line[len(_MARK):].strip()
                    code = re.match(r"exited with code (-?\d+)", said)
                    if code:
                        self.exit_code = int(code.group(1))
                    else:
                        self.start_failure = said
                    continue
                self.lines.append(line)
                log.debug("MCP server %s stderr: %s", self._name, line)
        with contextlib.suppress(OSError):
            self._reader.close()

    async def settle(self, timeout_s: float = 2.0) -> None:
        """Wait (bounded) until the server's stderr is read to its end."""
        with contextlib.suppress(OSError):
            self.file.close()  # our copy of the write end: EOF once the server is gone
        await asyncio.to_thread(self._thread.join, timeout_s)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.file.close()

    def explain(self, fallback: str) -> str:
        """What a user acts on: the start failure or exit code and the last stderr lines."""
        if self.start_failure:
            head = f"the server {self.start_failure}{_not_found_hint(self._command)}"
        elif self.exit_code is not None:
            head = (f"the server exited with code {self.exit_code} before it answered"
                    if self.exit_code else "the server exited (code 0) before it answered")
        else:
            head = fallback
        lines = [line for line in self.lines if line.strip()]
        if lines:
            head += "; its last stderr lines:\n    " + "\n    ".join(lines[-10:])
        elif self.exit_code is not None:
            head += " (it wrote nothing on stderr)"
        return head


def _not_found_hint(command: Sequence[str]) -> str:
    """What to do about a command that is not on PATH. A server installed with pip into
    dagwright's own virtualenv is beside its Python, yet off PATH when that virtualenv
    is not activated (``.venv/bin/dagwright run`` as the README types it)."""
    if not command or os.sep in command[0] or shutil.which(command[0]) is not None:
        return ""
    beside = os.path.join(os.path.dirname(sys.executable), command[0])
    if os.path.isfile(beside) and os.access(beside, os.X_OK):
        return (f" ({command[0]!r} is not on PATH, but dagwright's virtualenv has {beside}: "
                "write that path as the command, or activate the virtualenv)")
    return f" ({command[0]!r} is not on PATH: write its full path as the command, or install it)"


class _Unavailable(Exception):
    """The session could not be opened (nothing was sent)."""

    def __init__(self, message: str, *, http_status: int | None = None) -> None:
        super().__init__(message)
        self.http_status = http_status


def _explain(exc: BaseException) -> str:
    """The leaf messages of an exception (anyio wraps failures in exception groups)."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_explain(e) for e in exc.exceptions)
    if isinstance(exc, _Unavailable):
        return str(exc)
    text = str(exc) or type(exc).__name__
    if type(exc).__name__ == "HTTPStatusError":  # httpx adds a line pointing to MDN
        text = text.splitlines()[0]
    return text if type(exc).__name__ in text else f"{type(exc).__name__}: {text}"


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


# --- results and errors ---------------------------------------------------------------
def _decode(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def result_data(result: mcp_types.CallToolResult) -> Any:
    """Structured content when present, else the text content (JSON-decoded if JSON)."""
    if result.structured_content is not None:
        return result.structured_content
    texts = [block.text for block in result.content if isinstance(block, mcp_types.TextContent)]
    if len(texts) == 1 and len(result.content) == 1:
        return _decode(texts[0])
    if texts and len(texts) == len(result.content):
        return [_decode(t) for t in texts]
    return [block.model_dump(mode="json", by_alias=True, exclude_none=True)
            for block in result.content]


def _result_text(result: mcp_types.CallToolResult) -> str:
    texts = [block.text for block in result.content if isinstance(block, mcp_types.TextContent)]
    return "\n".join(texts).strip() or "the tool reported an error without text"


def error_from_result(result: mcp_types.CallToolResult, *, matched: str | None = None) -> StepError:
    """An ``isError`` result as a StepError (see the mapping table in docs/tools.md).

    ``matched``: the result was not flagged ``isError`` but its text matched the
    server's ``error_pattern`` (recorded in the details)."""
    text = _result_text(result)
    details: dict[str, Any] = {"mcp": "isError" if matched is None else "error_pattern"}
    if matched is not None:
        details["error_pattern"] = matched
    if result.structured_content is not None:
        details["structured_content"] = result.structured_content
    if _UNKNOWN_TOOL.match(text):
        return StepError(category=ErrorCategory.NOT_FOUND, code="MCP_UNKNOWN_TOOL", message=text,
                         retryable=False, details=details)
    if _INVALID_OUTPUT.match(text):  # the server's own answer broke its outputSchema
        return StepError(category=ErrorCategory.INVALID_RESPONSE, code="MCP_INVALID_OUTPUT",
                         message=text, source=ErrorSource.RESPONSE, retryable=False,
                         details=details)
    if _INVALID_ARGUMENTS.search(text):
        return StepError(category=ErrorCategory.INPUT_ERROR, code="MCP_INVALID_ARGUMENTS",
                         message=text, retryable=True, details=details)
    # any other failure the tool reports: MCP's channel for telling the model what went
    # wrong, so it is the tool's word on its input — layer 3 is asked (within its
    # budget); a "can_fix: false" answer hands the step on to layer 4 as for any error
    return StepError(category=ErrorCategory.INPUT_ERROR, code="MCP_TOOL_ERROR", message=text,
                     source=ErrorSource.ENVELOPE, retryable=True, details=details)


def error_from_mcp_error(exc: MCPError, *, auth_status: int | None = None) -> StepError:
    """A JSON-RPC error (protocol level) as a StepError."""
    code, message = exc.code, exc.message or "MCP error"
    details: dict[str, Any] = {"mcp_code": code}
    if exc.data is not None:
        details["data"] = exc.data
    if auth_status is not None:
        return StepError(category=ErrorCategory.AUTH_ERROR, code=f"HTTP_{auth_status}",
                         message=f"the MCP server answered HTTP {auth_status}: {message}",
                         http_status=auth_status, details=details)
    if code == CONNECTION_CLOSED:
        return StepError(category=ErrorCategory.SERVICE_ERROR, code="MCP_CONNECTION_CLOSED",
                         message=f"the MCP server closed the connection (crashed?): {message}",
                         source=ErrorSource.TRANSPORT, retryable=True, request_sent=True, details=details)
    if code == REQUEST_TIMEOUT:
        return StepError(category=ErrorCategory.TIMEOUT, code="TOOL_TIMEOUT", message=message,
                         source=ErrorSource.TRANSPORT, retryable=True, request_sent=True, details=details)
    if code == INVALID_PARAMS:
        if _UNKNOWN_TOOL.match(message):
            return StepError(category=ErrorCategory.NOT_FOUND, code="MCP_UNKNOWN_TOOL",
                             message=message, retryable=False, details=details)
        return StepError(category=ErrorCategory.INPUT_ERROR, code="MCP_INVALID_PARAMS",
                         message=message, retryable=True, details=details)
    if code == METHOD_NOT_FOUND:
        return StepError(category=ErrorCategory.NOT_FOUND, code="MCP_METHOD_NOT_FOUND",
                         message=message, retryable=False, details=details)
    if code == INTERNAL_ERROR:
        return StepError(category=ErrorCategory.SERVICE_ERROR, code="MCP_INTERNAL_ERROR",
                         message=message, retryable=True, details=details)
    return StepError(category=ErrorCategory.SERVICE_ERROR, code=f"MCP_ERROR_{abs(code)}",
                     message=message, retryable=False, details=details)


# --- the session ----------------------------------------------------------------------
class _Session:
    """One open connection, held by its owner task on the runtime loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop,
                 headers: Mapping[str, str] | None = None) -> None:
        self.loop = loop
        self.headers = headers
        """A run's own headers for this session (None: the source's)."""
        self.client: Client | None = None
        self.stop = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.alive = True
        self.stderr: _StderrTail | None = None


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
        self._session: _Session | None = None
        # sessions opened with a run's own credentials (an HTTP server's per-user auth),
        # by a digest of those headers, least recently used first: a server may tie a
        # session to whom it authenticated, so runs with other credentials never share one
        self._credentialed: collections.OrderedDict[str, _Session] = collections.OrderedDict()
        self._open_lock: asyncio.Lock | None = None
        self._lock_loop: asyncio.AbstractEventLoop | None = None
        self._auth_status: int | None = None
        self._refused_status: int | None = None  # a 4xx to the streamable HTTP POST
        self._http_transport = "streamable"  # "sse" once a server shows it only has that
        self._mode: Any = "auto"  # how the SDK negotiates; "legacy" once a server shows it is

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
            if self._auth_status in (401, 403):
                raise CatalogError(f"{where}: the server answered HTTP {self._auth_status}; check "
                                   "the headers (e.g. Authorization)") from exc
            raise CatalogError(f"{where}: cannot list its tools: {_explain(exc)}") from exc
        if self.tools is not None:
            have = {c.invoker.tool_name for c in listing.capabilities
                    if isinstance(c.invoker, MCPToolInvoker)}
            missing = [t for t in self.tools if t not in have]
            if missing:
                raise CatalogError(f"{where}: has no tool(s) {', '.join(missing)}")
        return listing

    async def load(self) -> SourceListing:
        """List the server's tools (every page) and build their capabilities."""
        client = await self._client()
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
            client = (await self._credentialed_client(credentials) if credentials
                      else await self._client())
        except _Unavailable as exc:
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
        self._auth_status = None
        try:
            result = await client.call_tool(tool_name, params, read_timeout_seconds=timeout_s)
        except MCPError as exc:
            auth = self._auth_status if self._auth_status in (401, 403) else None
            if exc.code == CONNECTION_CLOSED:
                self._forget_session()
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
                message=f"the MCP server's answer does not follow the protocol: {_explain(exc)}"))
        except RuntimeError as exc:
            # the SDK checks structured content against the tool's outputSchema
            return CallResult(error=StepError(
                category=ErrorCategory.INVALID_RESPONSE, code="MCP_INVALID_OUTPUT",
                source=ErrorSource.RESPONSE,
                message=str(exc)))
        except Exception as exc:
            self._forget_session()
            return CallResult(error=StepError(
                category=ErrorCategory.SERVICE_ERROR, code="MCP_TRANSPORT_ERROR",
                source=ErrorSource.TRANSPORT,
                message=f"MCP server {self.name!r}: {_explain(exc)}", retryable=True,
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

    # --- the session --------------------------------------------------------------
    async def _client(self) -> Client:
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
                await self._close_session(session)
            self._session = None
            self._session = await self._open(loop)
            assert self._session.client is not None
            return self._session.client

    async def _credentialed_client(self, credentials: Mapping[str, str]) -> Client:
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
                await self._close_session(session)
        replaced = {name.lower() for name in credentials}
        headers = {**{k: v for k, v in self.headers.items() if k.lower() not in replaced},
                   **credentials}
        session = await self._open(loop, headers)
        self._credentialed[key] = session
        while len(self._credentialed) > MAX_CREDENTIALED_SESSIONS:
            _, oldest = self._credentialed.popitem(last=False)
            if oldest.loop is loop:
                await self._close_session(oldest)
        assert session.client is not None
        return session.client

    async def _open(self, loop: asyncio.AbstractEventLoop,
                    headers: Mapping[str, str] | None = None) -> _Session:
        """A new session; a URL whose POST is refused (400/404/405) is tried once more
        with MCP's older HTTP+SSE transport, as the specification's backwards
        compatibility rules say a client may (servers in the wild still offer only it)."""
        self._refused_status = None
        try:
            return await self._open_once(loop, headers)
        except _Unavailable as first:
            refused = self._refused_status
            if self.url is None or self._http_transport != "streamable" \
                    or refused not in (400, 404, 405):
                raise
            self._http_transport = "sse"
            try:
                return await self._open_once(loop, headers)
            except _Unavailable as second:
                self._http_transport = "streamable"
                raise _Unavailable(
                    f"it takes neither MCP's streamable HTTP (POST {self.url} was answered HTTP "
                    f"{refused}) nor the older HTTP+SSE transport ({second}); check the URL "
                    "(streamable HTTP servers usually listen on /mcp, SSE ones on /sse)",
                    http_status=second.http_status) from first

    async def _open_once(self, loop: asyncio.AbstractEventLoop,
                         headers: Mapping[str, str] | None) -> _Session:
        session = _Session(loop, headers)
        ready: asyncio.Future[Client] = loop.create_future()
        session.task = asyncio.create_task(self._own(session, ready), name=self.label)
        self._auth_status = None
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                session.client = await asyncio.shield(ready)
        except TimeoutError:
            await self._close_session(session)
            why = (f"the server did not finish the MCP handshake within "
                   f"{self.connect_timeout_s:g}s (connect_timeout_s: a server that installs "
                   "or loads something before it answers may need more)")
            if session.stderr is not None:
                await session.stderr.settle()
                why = session.stderr.explain(why)
            raise _Unavailable(why) from None
        except _Unavailable as exc:
            exc.http_status = self._auth_status
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
                why = _explain(exc)
                if session.stderr is not None:
                    await session.stderr.settle()
                    why = session.stderr.explain(why)
                ready.set_exception(_Unavailable(why))
            elif not session.stop.is_set():
                log.warning("MCP server %s: the session ended: %s", self.name, _explain(exc))
        finally:
            session.alive = False

    async def _enter_client(self, stack: contextlib.AsyncExitStack, session: _Session) -> Client:
        if self.command is not None:
            session.stderr = tail = _StderrTail(self.name, self.command)
            stack.callback(tail.close)
            launcher = _LAUNCHER.replace("{MARK}", _MARK)
            params = StdioServerParameters(
                command=sys.executable, args=["-I", "-S", "-c", launcher, *self.command],
                env=self.env, cwd=self.cwd)
            transport: Any = stdio_client(params, errlog=tail.file)
        else:
            assert self.url is not None

            async def remember_status(response: httpx2.Response) -> None:
                if response.status_code in (401, 403):
                    self._auth_status = response.status_code
                elif response.status_code in (400, 404, 405) and response.request.method == "POST":
                    self._refused_status = response.status_code

            # a run's own credentials (session.headers) on either transport, never the
            # source's beside them
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

    def _forget_session(self) -> None:
        """Drop a dead session so the next call opens a new one (its owner is told to stop)."""
        session, self._session = self._session, None
        if session is not None:
            session.alive = False
            session.stop.set()

    async def _close_session(self, session: _Session) -> None:
        session.stop.set()
        task = session.task
        if task is not None and not task.done():
            done, _ = await asyncio.wait({task}, timeout=CLOSE_TIMEOUT_S)
            if not done:
                task.cancel()
                await asyncio.wait({task}, timeout=CLOSE_TIMEOUT_S)
        session.alive = False

    async def aclose(self) -> None:
        """Close the sessions (bounded: the owner is cancelled if it does not stop)."""
        session, self._session = self._session, None
        loop = asyncio.get_running_loop()
        if session is not None and session.loop is loop:
            await self._close_session(session)
        credentialed = list(self._credentialed.values())
        self._credentialed.clear()
        for other in credentialed:
            if other.loop is loop:
                await self._close_session(other)
        self._open_lock = None


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
