"""Python tools running in threads, and the ones a timeout left running.

A sync Python tool with ``run_in_thread`` runs in a worker thread; a timeout ends the
*wait* for it, not the thread (Python cannot stop a thread). Sending the same call again
— resilience retrying a timeout, layer 4 judging it transient — would then run the tool
twice at once. So a call that timed out while its thread still runs is remembered until
the thread ends, and the same call (same capability, same parameters) is refused while
it does, without being started (``TOOL_STILL_RUNNING``); once the thread ends, it may be
sent again.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import json
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

__all__ = ["ThreadCall", "ThreadCalls", "in_tool_thread", "left_running"]

_TOOL_THREADS = ThreadPoolExecutor(max_workers=32, thread_name_prefix="dagwright-tool")
"""The threads ``run_in_thread`` tools run in: dagwright's own, not the event loop's
default executor. ``asyncio.run`` — and so ``Orchestrator.run`` — waits for every thread
of the loop's default executor before it returns, so a call that timed out there held the
run's result back until the tool returned after all. These threads are waited for only
when the process exits (the CLI says so: :func:`left_running`)."""


async def in_tool_thread(call: ThreadCall) -> Any:
    """``call()`` in a tool thread, with the caller's context variables (as
    ``asyncio.to_thread`` would)."""
    context = contextvars.copy_context()
    return await asyncio.get_running_loop().run_in_executor(
        _TOOL_THREADS, functools.partial(context.run, call))

_LEFT: dict[tuple[str, str], int] = {}
"""Every call a timeout left running in this process (any transport's), for
:func:`left_running`: a process cannot end before its threads do."""
_LEFT_LOCK = threading.Lock()


def left_running() -> list[str]:
    """The capabilities (``tool.capability``) of calls that timed out and still run in
    their threads in this process. The interpreter waits for those threads before it
    exits: the CLI says so instead of seeming to hang after it printed its result."""
    with _LEFT_LOCK:
        return sorted({capability for capability, _ in _LEFT})


class ThreadCall:
    """One call of ``fn`` to run in a thread; knows whether it has ended."""

    def __init__(self, fn: Callable[..., Any], params: dict[str, Any]) -> None:
        self._fn = fn
        self._params = params
        self._lock = threading.Lock()
        self._ended = False
        self._on_end: Callable[[], None] | None = None

    def __call__(self) -> Any:
        try:
            return self._fn(**self._params)
        finally:
            with self._lock:
                self._ended = True
                on_end = self._on_end
            if on_end is not None:
                on_end()

    def left_running(self, on_end: Callable[[], None]) -> bool:
        """After a timeout: whether the thread still runs; if so ``on_end`` is called
        (in that thread) when it ends."""
        with self._lock:
            if self._ended:
                return False
            self._on_end = on_end
            return True


class ThreadCalls:
    """The calls a timeout left running, by capability and parameters."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: set[tuple[str, str]] = set()

    @staticmethod
    def _key(capability: str, params: dict[str, Any]) -> tuple[str, str]:
        return capability, json.dumps(params, sort_keys=True, default=repr)

    def still_running(self, capability: str, params: dict[str, Any]) -> bool:
        with self._lock:
            return self._key(capability, params) in self._running

    def timed_out(self, capability: str, params: dict[str, Any], call: ThreadCall) -> bool:
        """Record a call whose wait timed out; whether its thread still runs."""
        key = self._key(capability, params)

        def ended() -> None:
            with self._lock:
                self._running.discard(key)
            with _LEFT_LOCK:
                _LEFT[key] = _LEFT.get(key, 1) - 1
                if _LEFT[key] <= 0:
                    del _LEFT[key]

        with self._lock:
            self._running.add(key)
        with _LEFT_LOCK:
            _LEFT[key] = _LEFT.get(key, 0) + 1
        if call.left_running(ended):
            return True
        ended()
        return False
