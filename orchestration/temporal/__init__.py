"""Scale out on Temporal: a run is a workflow, each step attempt an activity.

Install the extra (``pip install '.[temporal]'`` from a clone), set ``ORCH_BACKEND=temporal``
(with ``ORCH_TEMPORAL_ADDRESS``, ``ORCH_TEMPORAL_NAMESPACE``, ``ORCH_TEMPORAL_TASK_QUEUE``)
and start workers with ``dagwright worker``; ``Orchestrator.run``/``arun``/``resume`` then
start (or attach to) the run's workflow and return the same
:class:`~orchestration.result.RunResult` as the local backend. The workflow runs the same
engine; its tool and LLM calls are activities on the workers. See ``docs/scale-out.md``.

In code, :class:`DagwrightWorker` hosts runs whose catalog has Python tools::

    client = await connect(config)
    async with DagwrightWorker(client, catalog, config=config, llm=llm):
        ...  # polls the task queue until the block ends

``import orchestration`` never imports this package, so ``temporalio`` stays optional.
"""

try:
    import temporalio  # noqa: F401
except ImportError as exc:  # pragma: no cover - the extra is in the dev install
    from orchestration._extras import needs_extra

    raise ImportError(needs_extra("the Temporal backend", "temporal", exc.name)) from exc

from orchestration.temporal._payloads import WORKFLOW
from orchestration.temporal._worker import DagwrightWorker, connect

__all__ = ["WORKFLOW", "DagwrightWorker", "connect"]
