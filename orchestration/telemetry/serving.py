"""Serving ``/metrics`` for Prometheus, single-process or multiprocess.

A service that already exposes metrics passes its own ``CollectorRegistry`` to the
:class:`~orchestration.Orchestrator` and serves it however it likes. Otherwise
:func:`serve_metrics` starts prometheus-client's HTTP server in a daemon thread.

With several worker processes (gunicorn, uvicorn ``--workers``), each process has its
own counters; set ``PROMETHEUS_MULTIPROC_DIR`` to an empty directory before the workers
start, and :func:`serve_metrics` (called once, in any one process) serves the sum over
all workers. ``dagwright serve --workers`` sets it for its workers itself. See
``docs/observability.md``.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import REGISTRY, CollectorRegistry, start_http_server
from prometheus_client.multiprocess import MultiProcessCollector

__all__ = ["MULTIPROC_ENV", "MetricsServer", "multiprocess_registry", "serve_metrics"]

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


@dataclass
class MetricsServer:
    """A running ``/metrics`` endpoint; :meth:`close` stops it."""

    server: WSGIServer
    thread: threading.Thread
    registry: CollectorRegistry

    @property
    def port(self) -> int:
        return int(self.server.server_port)

    @property
    def url(self) -> str:
        host = self.server.server_address[0]
        host = host.decode() if isinstance(host, bytes) else str(host)
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def multiprocess_registry(path: str | None = None) -> CollectorRegistry:
    """A registry that collects the metric files every worker writes to ``path``.

    ``path`` defaults to ``$PROMETHEUS_MULTIPROC_DIR``. Only for serving: workers keep
    recording into the default registry (prometheus-client writes their values to files).
    """
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=path)
    return registry


def serve_metrics(
    port: int, registry: CollectorRegistry | None = None, *, addr: str = "127.0.0.1"
) -> MetricsServer:
    """Serve ``registry`` (default: the process's, or all workers' in multiprocess mode).

    It listens on loopback unless ``addr`` says otherwise (``"0.0.0.0"`` for every
    interface): metrics name tools and error rates, not for every network by default.

    ``port=0`` picks a free port (see :attr:`MetricsServer.port`).
    """
    if registry is None:
        registry = multiprocess_registry() if os.environ.get(MULTIPROC_ENV) else REGISTRY
    server, thread = start_http_server(port, addr=addr, registry=registry)
    return MetricsServer(server, thread, registry)
