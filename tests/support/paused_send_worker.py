"""``dagwright worker`` whose calls with a side effect announce themselves in its log and
wait ``PAUSE_WINDOW_S`` before they go to the tool — the moment a fault test pauses the
worker (SIGSTOP) to prove that a worker the server has given up on does not send late.

Run as ``python -m tests.support.paused_send_worker worker --identity NAME`` (the
arguments of ``dagwright``); nothing else differs from the real worker.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from orchestration._transport import CallResult, ToolTransport
from orchestration.capability import Capability

ABOUT_TO_SEND = "about to send"
PAUSE_WINDOW_S = 1.0


class AnnouncingTransport(ToolTransport):
    """Announces a call with a side effect, waits, then makes it — on a task of its own
    that the activity's cancellation does not reach: a worker that wakes from a pause
    races the news that the server gave up on it (the SDK learns it from a heartbeat
    reply), and this makes the call win that race every time, as it did in the field."""

    async def call(self, capability: Capability, params: dict[str, Any], **kwargs: Any
                   ) -> CallResult:
        if capability.is_idempotent:
            return await super().call(capability, params, **kwargs)
        print(f"{ABOUT_TO_SEND} {capability.key}", flush=True)
        late = asyncio.ensure_future(self._after_the_window(capability, params, kwargs))
        _LATE.add(late)
        late.add_done_callback(_LATE.discard)
        return await asyncio.shield(late)

    async def _after_the_window(self, capability: Capability, params: dict[str, Any],
                                kwargs: dict[str, Any]) -> CallResult:
        await asyncio.sleep(PAUSE_WINDOW_S)
        return await super().call(capability, params, **kwargs)


_LATE: set[asyncio.Future[CallResult]] = set()


if __name__ == "__main__":
    from orchestration.cli import main
    from orchestration.temporal import _activities

    _activities.ToolTransport = AnnouncingTransport  # type: ignore[misc]
    sys.exit(main())
