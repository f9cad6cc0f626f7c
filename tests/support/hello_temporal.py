"""The smallest workflow that needs the server to schedule real work: one workflow, one activity.

It lives in a module of its own that imports only ``temporalio``, because Temporal's
workflow sandbox re-imports the module that defines a workflow on every run; a test module
full of pytest and server imports would be re-imported (and checked) too.
"""

from __future__ import annotations

import os
from datetime import timedelta

from temporalio import activity, workflow


@activity.defn
async def describe_worker(name: str) -> str:
    """Runs on the worker, outside the sandbox: reports which process ran it."""
    return f"hello {name} from pid {os.getpid()} attempt {activity.info().attempt}"


@workflow.defn
class HelloWorkflow:
    """Schedules ``describe_worker`` once and returns its result."""

    @workflow.run
    async def run(self, name: str) -> str:
        return await workflow.execute_activity(describe_worker, name,
                                               start_to_close_timeout=timedelta(seconds=30))
