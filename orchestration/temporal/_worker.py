"""The worker: a process that hosts dagwright runs on a Temporal task queue.

``dagwright worker`` (or :class:`DagwrightWorker` in code, for catalogs with Python
tools) polls ``ORCH_TEMPORAL_TASK_QUEUE`` for both the run workflow and its activities.
Start as many as the load needs, on any machines: they share the queue, Temporal hands
each task to one of them, and a run whose worker dies goes on on another.

Every worker of a task queue must load the same catalog (a run replayed on another
worker must see the capabilities it saw) and, for ``get_run``/``list_runs`` to see every
run, write to the same run store (``ORCH_STORE_URL``, PostgreSQL across machines).
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from datetime import timedelta
from types import TracebackType
from typing import TYPE_CHECKING, TextIO

from opentelemetry.trace import TracerProvider
from prometheus_client import CollectorRegistry
from temporalio.client import Client
from temporalio.converter import DataConverter
from temporalio.worker import Worker

from orchestration.catalog import Catalog
from orchestration.config import OrchestratorConfig
from orchestration.debug_store import LLMDebugStore
from orchestration.errors import ConfigError
from orchestration.llm._factory import client_from_config
from orchestration.llm.base import LLMClient
from orchestration.redaction import Redactor
from orchestration.store import RunStore, open_store
from orchestration.telemetry import Telemetry
from orchestration.telemetry._observer import Observer
from orchestration.temporal._activities import RunActivities
from orchestration.temporal._context import WorkerContext, register, unregister
from orchestration.temporal._key_order import keeping_key_order
from orchestration.temporal._payload_store import with_payload_store
from orchestration.temporal._workflow import RunWorkflow

if TYPE_CHECKING:
    from executors.recovery import RecoveryHandler
    from planners.planner import Planner

__all__ = ["DagwrightWorker", "connect", "serve"]


async def connect(config: OrchestratorConfig) -> Client:
    """A Temporal client for ``ORCH_TEMPORAL_ADDRESS`` / ``ORCH_TEMPORAL_NAMESPACE``, or a
    :class:`ConfigError` that says which server could not be reached."""
    try:
        return await Client.connect(config.temporal_address, namespace=config.temporal_namespace,
                                    data_converter=keeping_key_order(DataConverter.default))
    except Exception as exc:  # the SDK raises RuntimeError for an unreachable server
        raise ConfigError(
            f"cannot reach the Temporal server at ORCH_TEMPORAL_ADDRESS="
            f"{config.temporal_address} (namespace {config.temporal_namespace!r}): {exc}") from exc


class DagwrightWorker:
    """Hosts the run workflow and its activities on ``config.temporal_task_queue``.

    ``llm`` is the client the LLM activities use (default: the one the config describes,
    made on the first LLM call). ``handlers`` and ``planner`` replace the recovery chain
    and the planner as on :class:`~orchestration.orchestrator.Orchestrator`; ``store``
    replaces the run store ``config.store_url`` names. Use it as an async context manager
    (it polls while the block runs) or ``await worker.run()`` until :meth:`shutdown`.
    """

    def __init__(
        self,
        client: Client,
        catalog: Catalog,
        *,
        config: OrchestratorConfig | None = None,
        llm: LLMClient | None = None,
        identity: str | None = None,
        handlers: list[RecoveryHandler] | None = None,
        planner: Planner | None = None,
        store: RunStore | None = None,
        tracer_provider: TracerProvider | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.config = config = config or OrchestratorConfig()
        self.task_queue = config.temporal_task_queue
        self.identity = identity or f"{socket.gethostname()}:{os.getpid()}"
        redactor = Redactor.from_config(config, catalog)
        observer = Observer(Telemetry.create(tracer_provider, registry), redactor)
        # the workflows plan and validate against a snapshot: a source refreshed later must
        # not change what a replayed run sees
        self.context = WorkerContext(catalog=catalog.snapshot(), planner=planner,
                                     handlers=handlers)
        store = store if store is not None else open_store(config.store_url)
        # large payloads go to the run store, a reference into the history (claim-check)
        client = with_payload_store(client, store, config.temporal_payload_offload_bytes)
        self.activities = RunActivities(
            catalog, config, observer, llm=llm,
            llm_factory=None if llm is not None else (lambda: client_from_config(config)),
            store=store,
            debug_store=LLMDebugStore.from_config(config, redactor),
            owner=f"temporal:{self.identity}")
        self.worker = Worker(
            client, task_queue=self.task_queue, workflows=[RunWorkflow],
            activities=self.activities.activities(), identity=self.identity,
            max_concurrent_activities=config.temporal_max_concurrent_activities,
            sticky_queue_schedule_to_start_timeout=timedelta(
                seconds=config.temporal_sticky_timeout_s))

    async def run(self) -> None:
        """Poll until :meth:`shutdown` (or cancellation)."""
        register(self.task_queue, self.context)
        try:
            await self.worker.run()
        finally:
            unregister(self.task_queue)
            await self.activities.aclose()

    async def shutdown(self) -> None:
        await self.worker.shutdown()

    async def __aenter__(self) -> DagwrightWorker:
        register(self.task_queue, self.context)
        try:
            await self.worker.__aenter__()
        except BaseException:
            unregister(self.task_queue)
            raise
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        try:
            await self.worker.__aexit__(exc_type, exc, tb)
        finally:
            unregister(self.task_queue)
            await self.activities.aclose()


def serve(config: OrchestratorConfig, *, identity: str | None = None,
          out: TextIO | None = None) -> int:
    """``dagwright worker``: load ``ORCH_CATALOG``, poll until SIGTERM or Ctrl-C."""
    from orchestration.logging_setup import configure_logging
    from orchestration.telemetry import serve_metrics
    from orchestration.telemetry.exporters import tracer_provider_from_config

    if config.catalog is None:
        raise ConfigError("a worker calls the runs' tools: set ORCH_CATALOG to the catalog "
                          "file every worker of the task queue loads")
    configure_logging(config)
    catalog = Catalog.from_file(config.catalog)
    provider = tracer_provider_from_config(config)
    metrics = (serve_metrics(config.metrics_port, addr=config.metrics_host)
               if config.metrics_port is not None else None)
    stream = out or sys.stderr
    try:
        asyncio.run(_serve(config, catalog, identity, provider, stream))
    finally:
        catalog.close()
        if provider is not None:
            provider.shutdown()
        if metrics is not None:
            metrics.close()
    return 0


async def _serve(config: OrchestratorConfig, catalog: Catalog, identity: str | None,
                 provider: TracerProvider | None, out: TextIO) -> None:
    client = await connect(config)
    worker = DagwrightWorker(client, catalog, config=config, identity=identity,
                             tracer_provider=provider)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with worker:
        out.write(f"dagwright worker {worker.identity} polling task queue "
                  f"{worker.task_queue!r} at {config.temporal_address} "
                  f"(namespace {config.temporal_namespace!r}); "
                  f"{len(worker.context.catalog)} capabilities\n")
        out.flush()
        await stop.wait()
    out.write(f"dagwright worker {worker.identity} stopped\n")
    out.flush()
