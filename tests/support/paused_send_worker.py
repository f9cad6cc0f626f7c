"""``dagwright worker`` whose calls with a side effect announce, in the worker's log, the
moment a fault test pauses the worker (SIGSTOP), and wait ``PAUSE_WINDOW_S`` there — to
prove that a worker the run has given up on does not send late.

``DAGWRIGHT_TEST_PAUSE_AT`` (the worker's environment) says where:

* ``before-proof`` (default): before the call's fence, announcing ``ABOUT_TO_SEND``:
  the woken worker's heartbeat finds that Temporal no longer holds the attempt;
* ``after-proof``: after the heartbeat proved the attempt live, before the claim in the
  run store, announcing ``PROVED_LIVE``: Temporal gives up meanwhile, the run fences the
  call in the run store, and the woken worker's claim finds the fence.

Either way the call runs on a task of its own that the activity's cancellation does not
reach: a worker that wakes from a pause races the news that the server gave up on it
(the SDK learns it from a heartbeat reply), and this makes the call win that race every
time, as it did in the field. Run as ``python -m tests.support.paused_send_worker worker
--identity NAME`` (the arguments of ``dagwright``); nothing else differs from the real
worker.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

from orchestration._transport import CallResult, ToolTransport
from orchestration.capability import Capability

ABOUT_TO_SEND = "about to send"
PROVED_LIVE = "proved live, about to claim"
PAUSE_WINDOW_S = 1.0
PAUSE_AT = "DAGWRIGHT_TEST_PAUSE_AT"


class ShieldedTransport(ToolTransport):
    """Makes a call with a side effect on a task the activity's cancellation does not
    reach (announcing it and waiting first, when paused before the proof)."""

    async def call(self, capability: Capability, params: dict[str, Any], **kwargs: Any
                   ) -> CallResult:
        if capability.is_idempotent:
            return await super().call(capability, params, **kwargs)
        late = asyncio.ensure_future(self._after_the_window(capability, params, kwargs))
        _LATE.add(late)
        late.add_done_callback(_LATE.discard)
        return await asyncio.shield(late)

    async def _after_the_window(self, capability: Capability, params: dict[str, Any],
                                kwargs: dict[str, Any]) -> CallResult:
        if os.environ.get(PAUSE_AT, "before-proof") == "before-proof":
            print(f"{ABOUT_TO_SEND} {capability.key}", flush=True)
            await asyncio.sleep(PAUSE_WINDOW_S)
        return await super().call(capability, params, **kwargs)


_LATE: set[asyncio.Future[CallResult]] = set()


def pause_after_the_proof() -> None:
    """The attempt proves it is live, announces it, and waits before it claims."""
    from orchestration.temporal._activities import RunActivities

    prove = RunActivities._why_not_live

    async def proved_then_wait(self: RunActivities) -> str | None:
        why = await prove(self)
        if why is None:
            print(PROVED_LIVE, flush=True)
            await asyncio.sleep(PAUSE_WINDOW_S)
        return why

    RunActivities._why_not_live = proved_then_wait  # type: ignore[method-assign]


if __name__ == "__main__":
    from orchestration.cli import main
    from orchestration.temporal import _activities

    _activities.ToolTransport = ShieldedTransport  # type: ignore[misc]
    if os.environ.get(PAUSE_AT) == "after-proof":
        pause_after_the_proof()
    sys.exit(main())
