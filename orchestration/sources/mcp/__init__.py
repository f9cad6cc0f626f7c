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

The parts: ``_source`` (the source: listing, calling, the invoker), ``_sessions`` (opening,
reusing and closing sessions), ``_answers`` (results and errors as the engine reads them),
``_stdio`` (the launcher and the stderr tail).
"""

from __future__ import annotations

from orchestration._extras import needs_extra
from orchestration.errors import CatalogError

try:  # the SDK (the 'mcp' extra): every part below imports it
    import httpx2  # noqa: F401
    import mcp  # noqa: F401
    import mcp_types  # noqa: F401
except ImportError as _missing:  # pragma: no cover - depends on the installed extras
    raise CatalogError(needs_extra("MCP servers", "mcp", str(_missing))) from _missing

from orchestration.sources.mcp._answers import (
    CONNECTION_CLOSED,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    REQUEST_TIMEOUT,
    error_from_mcp_error,
    error_from_result,
    result_data,
)
from orchestration.sources.mcp._sessions import CLOSE_TIMEOUT_S
from orchestration.sources.mcp._source import (
    CALL_GRACE_S,
    LIST_TIMEOUT_S,
    MAX_LIST_PAGES,
    MCPServerSource,
    MCPToolInvoker,
    capability_name,
)

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
    "result_data",
]
