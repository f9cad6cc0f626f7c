"""What the facade opens per event loop, and the loop its synchronous methods run on.

httpx clients (the tools' pool, the LLM client's) and the store's connection are bound
to the loop that made them: each loop gets its own, closed inside that loop when it
ends. The catalog's sources (MCP sessions) live on the catalog's own loop instead and
stay open across loops until ``close()``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from orchestration._transport import ToolTransport
from orchestration.circuit import CircuitBreakers
from orchestration.config import OrchestratorConfig

T = TypeVar("T")


TransportLayer = Callable[[ToolTransport], ToolTransport]
"""Wraps the pooled transport of a loop in one that delegates to it (httpx-style layers)."""


class TransportPool:
    """One pooled tool transport per event loop, wrapped in ``layer`` when one is given
    (e.g. the cassettes of ``orchestration.eval``, which record or replay every call).
    Every pooled transport reports to the same circuit breakers (a tool's breaker is the
    orchestrator's, whatever loop calls it)."""

    def __init__(self, layer: TransportLayer | None = None,
                 circuits: CircuitBreakers | None = None) -> None:
        self._transports: dict[int, ToolTransport] = {}
        self._layer = layer
        self.circuits = circuits

    def for_current_loop(self, config: OrchestratorConfig) -> ToolTransport:
        loop_id = id(asyncio.get_running_loop())
        transport = self._transports.get(loop_id)
        if transport is None:
            transport = ToolTransport.for_config(config, self.circuits)
            if self._layer is not None:
                transport = self._layer(transport)
            self._transports[loop_id] = transport
        return transport

    async def aclose_current_loop(self) -> None:
        transport = self._transports.pop(id(asyncio.get_running_loop()), None)
        if transport is not None:
            await transport.aclose()


def run_on_new_loop(name: str, call: Callable[[], Coroutine[Any, Any, T]],
                    loop_ends: Callable[[], Awaitable[None]]) -> T:
    """Run ``call()`` on a new event loop for ``Orchestrator.<name>()``, then
    ``loop_ends()`` inside that loop to close what was opened for it."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise RuntimeError(f"Orchestrator.{name}() was called inside a running event loop; "
                           f"use 'await orchestrator.a{name}(...)' there")
    # The result is handed out through a holder rather than as the main task's result:
    # when asyncio.run() restores the SIGINT handler, CPython formats a repr() of the
    # old handler, which holds the main task and so would repr the whole result.
    holder: list[T] = []

    async def main() -> None:
        try:
            holder.append(await call())
        finally:
            await loop_ends()

    asyncio.run(main())
    return holder[0]
