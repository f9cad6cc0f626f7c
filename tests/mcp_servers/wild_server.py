"""An MCP server that behaves as servers in the wild do, on the 1.x SDK (most published
servers are): run it with ``.venv-mcp1/bin/python tests/mcp_servers/wild_server.py MODE``.

Modes:

* ``odd``: tools whose schemas break JSON Schema in ways real servers do (duplicate
  ``required`` entries, a misspelt type, an invalid output schema), two tool names that
  are one identifier, and a tool whose structured result breaks its own output schema;
* ``noisy``: a banner and a JSON log line on stdout at start and a print on every call;
* ``noisy-crash``: the banner, then the reason it cannot start on stdout, and exit 3;
* ``resources``: resources only, no tools;
* ``slow``: says on stderr that it is loading, and does not answer for 60 s;
* ``sse PORT``: MCP's older HTTP+SSE transport only, on 127.0.0.1:PORT (``/sse``).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

MODE = sys.argv[1] if len(sys.argv) > 1 else "odd"

if MODE.startswith("noisy"):
    print("wild-server 1.0 starting (a banner on stdout)")
    print(json.dumps({"level": "info", "msg": "a structured log line on stdout"}), flush=True)
    if MODE == "noisy-crash":
        print("FATAL: settings file wild.toml not found", flush=True)
        sys.exit(3)
if MODE == "slow":
    print("loading a large index before answering...", file=sys.stderr, flush=True)
    time.sleep(60)
    sys.exit(0)

if MODE == "sse":
    from mcp.server.fastmcp import FastMCP

    legacy = FastMCP("wild-sse", host="127.0.0.1", port=int(sys.argv[2]), log_level="WARNING")

    @legacy.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    legacy.run(transport="sse")
    sys.exit(0)

import anyio  # noqa: E402 - after the modes that never reach the SDK
import mcp.types as types  # noqa: E402
from mcp.server.lowlevel import Server  # noqa: E402
from mcp.server.stdio import stdio_server  # noqa: E402

server: Server[Any, Any] = Server("wild")

ODD_TOOLS = [
    types.Tool(name="lookup", description="duplicate required entries", inputSchema={
        "type": "object", "properties": {"id": {"type": "string"}}, "required": ["id", "id"]}),
    types.Tool(name="misspelt", description="a type JSON Schema does not have", inputSchema={
        "type": "object", "properties": {"n": {"type": "integr"}}}),
    types.Tool(name="report", description="an output schema that is not a schema",
               inputSchema={"type": "object"},
               outputSchema={"type": "object", "properties": {"n": {"type": 5}}}),
    types.Tool(name="send mail", description="a name with a space", inputSchema={"type": "object"}),
    types.Tool(name="send_mail", description="the same name as an identifier",
               inputSchema={"type": "object"}),
    types.Tool(name="count", description="breaks its own output schema",
               inputSchema={"type": "object"},
               outputSchema={"type": "object", "properties": {"n": {"type": "integer"}},
                             "required": ["n"]}),
]
NOISY_TOOLS = [types.Tool(name="add", description="Add two integers.", inputSchema={
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "required": ["a", "b"]})]

if MODE != "resources":
    @server.list_tools()  # type: ignore[misc, no-untyped-call]
    async def list_tools() -> list[types.Tool]:
        return ODD_TOOLS if MODE == "odd" else NOISY_TOOLS

    @server.call_tool(validate_input=False)  # type: ignore[misc]
    async def call_tool(name: str, arguments: dict[str, Any]) -> Any:
        if name == "count":
            return {"n": "many"}
        if name == "add":
            print(f"adding {arguments}", flush=True)  # a print on stdout during a call
            return [types.TextContent(type="text", text=str(arguments["a"] + arguments["b"]))]
        return [types.TextContent(type="text", text=json.dumps({"tool": name, "args": arguments}))]
else:
    @server.list_resources()  # type: ignore[misc, no-untyped-call]
    async def list_resources() -> list[types.Resource]:
        return [types.Resource(uri="memo://readme", name="readme")]  # type: ignore[arg-type]


async def main() -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


anyio.run(main)
