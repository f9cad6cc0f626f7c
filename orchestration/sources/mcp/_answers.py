"""What an MCP server answers, as the engine reads it: a result's data, and its failures
as classified ``StepError`` s (the mapping table is in docs/tools.md).

Results: ``structuredContent`` when present, else the text content, JSON-decoded when it
is JSON (several text blocks give a list). An ``isError`` result is the channel MCP
defines for telling the model what went wrong ("Invalid timezone", "currency must be a
3-letter ISO code"), so it is the tool's own word on its input: an ``INPUT_ERROR`` with
``retryable: true`` that layer 3 is asked to correct within its budget (an unknown tool
is ``NOT_FOUND``). A JSON-RPC error is mapped by its code.
"""

from __future__ import annotations

import json
import re
from typing import Any

import mcp.types as mcp_types
from mcp.shared.exceptions import MCPError

from orchestration.protocol import ErrorCategory, ErrorSource, StepError

__all__ = [
    "CONNECTION_CLOSED",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "METHOD_NOT_FOUND",
    "REQUEST_TIMEOUT",
    "error_from_mcp_error",
    "error_from_result",
    "result_data",
]

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


def _decode(text: str) -> Any:
    """A text block as JSON when it is JSON, else as the text it is (nesting past the
    decoder's recursion included; the transport checks what JSON it holds)."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
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
