"""A process that runs (or resumes) one dagwright run, for the crash tests.

``python -m tests.support.durable_child run|resume STORE_URL RUN_ID CATALOG_JSON PLAN_JSON``
prints the run's result as JSON on its last line — or, when the run raised a dagwright
error, ``{"raised": CLASS, "message": ...}`` (exit 3). The tests kill it with SIGKILL or
freeze it with SIGSTOP in the middle of ``run`` and resume the run in another process.

``approve ...`` approves the waiting step ``pay`` with ``{"amount": 111}`` and continues.
``many STORE_URL PREFIX CATALOG_JSON PLAN_JSON N`` runs N runs at once (ids PREFIX-0 ...).

``DAGWRIGHT_CHILD_LEASE_S`` sets the run lease (default 30 s). ``DAGWRIGHT_CHILD_CLOCK_SKEW_S``
moves this process's wall clock (``time.time``, which everything in Python reads) that
many seconds ahead: a machine whose clock is wrong.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

_SKEW_S = float(os.environ.get("DAGWRIGHT_CHILD_CLOCK_SKEW_S", "0"))
if _SKEW_S:
    _real_time = time.time
    time.time = lambda: _real_time() + _SKEW_S  # before dagwright reads the clock

from orchestration import (  # noqa: E402
    Approval,
    Catalog,
    DagwrightError,
    Orchestrator,
    OrchestratorConfig,
    ScriptedLLM,
)

QUERY = "pay for one share and file the receipt"


def main(argv: list[str]) -> int:
    command, store_url, run_id, catalog_json, plan_json = argv[:5]
    lease_s = float(os.environ.get("DAGWRIGHT_CHILD_LEASE_S", "30"))
    config = OrchestratorConfig(store_url=store_url, synthesis_enabled=False,
                                store_lease_s=lease_s, retry_base_delay_s=0.01)
    catalog = Catalog.from_dict(json.loads(catalog_json), source="side-effect tools")
    orch = Orchestrator(catalog=catalog, llm=ScriptedLLM(["unused"]), config=config)
    if command == "many":  # argv[5] runs at once, ids RUN_ID-0 ... (killed mid-way)
        async def many() -> None:
            await asyncio.gather(*(orch.arun(QUERY, plan=json.loads(plan_json),
                                             run_id=f"{run_id}-{i}")
                                   for i in range(int(argv[5]))))
        asyncio.run(many())
        return 0
    try:
        if command == "run":
            result = orch.run(QUERY, plan=json.loads(plan_json), run_id=run_id)
        elif command == "approve":  # approve step "pay" with an edited amount of 111
            result = orch.resume(run_id, approvals={"pay": Approval(
                approved=True, params={"amount": 111})})
        else:
            result = orch.resume(run_id)
    except DagwrightError as exc:
        print(json.dumps({"raised": type(exc).__name__, "message": str(exc)}))
        return 3
    print(json.dumps(result.to_dict()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
