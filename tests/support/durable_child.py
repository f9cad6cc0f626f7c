"""A process that runs (or resumes) one dagwright run, for the crash tests.

``python -m tests.support.durable_child run|resume STORE_URL RUN_ID CATALOG_JSON PLAN_JSON``
prints the run's result as JSON on its last line. The tests kill it with SIGKILL in the
middle of ``run`` and resume the run in another process.
"""

from __future__ import annotations

import json
import sys

from orchestration import Catalog, Orchestrator, OrchestratorConfig, ScriptedLLM

QUERY = "pay for one share and file the receipt"


def main(argv: list[str]) -> int:
    command, store_url, run_id, catalog_json, plan_json = argv
    config = OrchestratorConfig(store_url=store_url, synthesis_enabled=False,
                                store_lease_s=30, retry_base_delay_s=0.01)
    catalog = Catalog.from_dict(json.loads(catalog_json), source="side-effect tools")
    orch = Orchestrator(catalog=catalog, llm=ScriptedLLM(["unused"]), config=config)
    if command == "run":
        result = orch.run(QUERY, plan=json.loads(plan_json), run_id=run_id)
    else:
        result = orch.resume(run_id)
    print(json.dumps(result.to_dict()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
