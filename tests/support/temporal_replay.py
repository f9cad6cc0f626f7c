"""Replay recorded run histories in a fresh process, as a worker that picks a run up does.

``python -m tests.support.temporal_replay TASK_QUEUE HISTORY.json...`` replays each
history through the run workflow with the catalog of :mod:`tests.support.temporal_runs`
and exits 0 when every replay issued exactly the commands the history holds. The tests
start it with another ``PYTHONHASHSEED``, so any decision that followed the iteration order
of a set of strings would show up as a nondeterminism error.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from orchestration.temporal._context import WorkerContext, register
from orchestration.temporal._workflow import RunWorkflow
from tests.support.temporal_runs import build_catalog


async def main(task_queue: str, paths: list[str]) -> int:
    register(task_queue, WorkerContext(catalog=build_catalog()))
    replayer = Replayer(workflows=[RunWorkflow])
    for path in paths:
        history = WorkflowHistory.from_json(Path(path).stem, Path(path).read_text())
        await replayer.replay_workflow(history)  # raises on any nondeterminism
        print(f"replayed {Path(path).stem}: {len(history.events)} events")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1], sys.argv[2:])))
