"""A small MCP server for the tests, built with the official SDK's server API (2.x).

Run as ``python -m tests.mcp_servers.calc_server`` for stdio, or with ``http PORT
[TOKEN]`` for streamable HTTP on 127.0.0.1 (TOKEN: require ``Authorization: Bearer
TOKEN``, answering 401 otherwise). Its tools take strictly typed arguments, so a
stringified number that reached it would be rejected, and ``schedule`` has a rule its
input schema does not show, which only the server's own validation reports.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import AfterValidator, BaseModel, StrictInt

server = MCPServer("calc", instructions="Arithmetic and scheduling for the tests.")
received: list[dict[str, Any]] = []  # every call's arguments, in order


class Sum(BaseModel):
    total: int


def business_hour(hour: int) -> int:
    if not 9 <= hour <= 17:
        raise ValueError("hour must be between 9 and 17 (business hours)")
    return hour


@server.tool(annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True))
def add(a: StrictInt, b: StrictInt) -> Sum:
    """Add two integers."""
    received.append({"tool": "add", "a": a, "b": b})
    return Sum(total=a + b)


@server.tool(annotations=ToolAnnotations(idempotent_hint=True, destructive_hint=False))
def schedule(day: str, hour: Annotated[StrictInt, AfterValidator(business_hour)]) -> dict[str, Any]:
    """Book a meeting slot on a day at an hour."""
    received.append({"tool": "schedule", "day": day, "hour": hour})
    return {"booked": f"{day} {hour}:00"}


@server.tool(structured_output=False)
def note(text: str) -> str:
    """Store a note; answers JSON text without an output schema."""
    received.append({"tool": "note", "text": text})
    return json.dumps({"stored": text, "length": len(text)})


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def refuse(reason: str) -> str:
    """Always fails with the reason (a tool-reported error)."""
    raise ToolError(reason)


@server.tool(structured_output=False, annotations=ToolAnnotations(read_only_hint=True))
def select(sql: str) -> str:
    """Run a read-only query; reports a refusal as ordinary text, the way mcp-server-sqlite
    does ("Error: ..."), not as an isError result."""
    if not sql.lstrip().upper().startswith("SELECT"):
        return "Error: Only SELECT queries are allowed for read_query"
    return json.dumps([{"answer": 42}])


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def nap(seconds: float) -> str:
    """Sleep, then answer."""
    time.sleep(seconds)
    return "awake"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def history() -> list[dict[str, Any]]:
    """Every call's arguments so far."""
    return list(received)


@server.tool(annotations=ToolAnnotations(destructive_hint=True))
def crash() -> str:
    """Kill the server process (a crash mid-call)."""
    os._exit(3)


def extra(x: StrictInt) -> int:
    """A tool that comes and goes (see ``toggle_extra``)."""
    return x * 10


@server.tool(annotations=ToolAnnotations(idempotent_hint=True, destructive_hint=False))
def toggle_extra(present: bool) -> dict[str, Any]:
    """Add or remove the ``extra`` tool, so the tool list changes while connected."""
    names = {t.name for t in server._tool_manager.list_tools()}
    if present and "extra" not in names:
        server.add_tool(extra, annotations=ToolAnnotations(read_only_hint=True))
    elif not present and "extra" in names:
        server.remove_tool("extra")
    return {"present": present}


def require_token(app: Any, token: str) -> Any:
    """ASGI wrapper answering 401 to HTTP requests without a bearer token it accepts
    (``token`` may list several, comma-separated: a service's and a user's)."""
    accepted = {f"Bearer {t}".encode() for t in token.split(",")}

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            if headers.get(b"authorization") not in accepted:
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"text/plain")]})
                await send({"type": "http.response.body", "body": b"missing or wrong token"})
                return
        await app(scope, receive, send)

    return guarded


def main(argv: list[str]) -> None:
    if argv[:1] == ["http"]:
        import uvicorn

        port = int(argv[1])
        app = server.streamable_http_app()
        if len(argv) > 2:
            app = require_token(app, argv[2])
        uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
    else:
        server.run("stdio")


if __name__ == "__main__":
    main(sys.argv[1:])
