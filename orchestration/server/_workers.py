"""The worker processes of ``dagwright serve --workers N``.

uvicorn's supervisor starts the workers and replaces one that dies. Each worker has a
listening socket of its own, all bound to the same address with ``SO_REUSEPORT``, so the
kernel spreads connections evenly over them: on one shared socket the worker that wakes
first takes every connection waiting (asyncio accepts up to the backlog at once), and a
burst of clients lands mostly on one process. Each worker builds its own orchestrator
and app from the same ``ORCH_*`` settings (:func:`worker_app`, the factory uvicorn
imports in the worker); they share nothing but the run store, through which any worker
answers for any run (``docs/serve.md``).

Each worker records its metrics as a single process does, and prometheus-client writes
them to files in ``PROMETHEUS_MULTIPROC_DIR``, where any worker's ``/metrics`` sums them
(:func:`worker_metrics_dir`): the supervisor makes a private directory for them unless the
operator named one.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from types import FrameType
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from prometheus_client.multiprocess import mark_process_dead
from starlette.applications import Starlette
from uvicorn.config import STARTUP_FAILURE, Config
from uvicorn.supervisors.multiprocess import Multiprocess, Process

from orchestration.config import OrchestratorConfig
from orchestration.logging_setup import configure_logging
from orchestration.orchestrator import Orchestrator
from orchestration.server._app import create_app
from orchestration.server._gc import tune_collector
from orchestration.server._security import LOOPBACK_HOSTS, is_loopback
from orchestration.server._tenants import read_tenants
from orchestration.telemetry.exporters import tracer_provider_from_config
from orchestration.telemetry.serving import MULTIPROC_ENV

__all__ = ["WorkerSupervisor", "reuse_port_sockets", "serve_app", "worker_app",
           "worker_metrics_dir"]


def serve_app(config: OrchestratorConfig, orchestrator: Orchestrator,
              provider: TracerProvider | None = None) -> Starlette:
    """The app ``dagwright serve`` serves (one process, or each worker): every worker
    reads the same ``ORCH_SERVE_TOKEN``/``ORCH_SERVE_TOKENS``, so a tenant's token (and a
    viewer's sign-in cookie, whose key is derived from them) works on any of them.
    ``provider``: the span exporter of ``ORCH_OTEL_EXPORTER``, flushed when the app stops."""
    token = config.serve_token.get_secret_value() if config.serve_token is not None else None
    token = token or None
    tokens = config.serve_tokens.get_secret_value() if config.serve_tokens is not None else ""
    tenants = read_tenants(tokens) if tokens.strip() else None
    guarded = token is not None or tenants is not None
    app = create_app(orchestrator, token=token, close_orchestrator=True, tenants=tenants,
                     allowed_hosts=LOOPBACK_HOSTS
                     if not guarded and is_loopback(config.serve_host) else None)
    _take_nothing_over_once_stopping(app)
    if provider is not None:
        _flush_spans_when_stopping(app, provider)
    return app


def _flush_spans_when_stopping(app: Starlette, provider: TracerProvider) -> None:
    """Export the spans still batched once the app has stopped (its runs stopped, their
    spans ended): after a graceful stop uvicorn re-raises SIGTERM, which ends the process
    before any ``finally`` or exit handler of ours could."""
    running = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[Any]:
        try:
            async with running(app) as state:
                yield state
        finally:
            provider.force_flush()

    app.router.lifespan_context = lifespan


def _take_nothing_over_once_stopping(app: Starlette) -> None:
    """From the moment this process is asked to stop (SIGTERM, Ctrl-C), it takes no run
    over: while it drains its open requests (up to GRACEFUL_SHUTDOWN_S), a replica or a
    sibling worker stopping at the same time lets its runs go, and taking them over here
    would only stop them again a moment later (their calls in flight cut twice).

    uvicorn handles those signals with handlers it installs around serving, so this
    chains onto them when the app starts (the lifespan runs inside them, on the main
    thread)."""
    runs = app.state.runs
    starting = app.router.lifespan_context

    def stop_taking_over(signum: int, frame: FrameType | None,
                         previous: Callable[[int, FrameType | None], Any]) -> None:
        runs.may_take_over = lambda: False
        previous(signum, frame)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[Any]:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                previous = signal.getsignal(sig)
                if callable(previous):
                    signal.signal(sig, functools.partial(stop_taking_over, previous=previous))
        async with starting(app) as state:
            yield state

    app.router.lifespan_context = lifespan


def worker_app() -> Starlette:
    """A worker's app, from the settings the parent left in the environment."""
    config = OrchestratorConfig()
    configure_logging(config)
    # the worker's own span exporter (ORCH_OTEL_EXPORTER), flushed as the app stops
    provider = tracer_provider_from_config(config)
    app = serve_app(config, Orchestrator.from_env(config=config, tracer_provider=provider),
                    provider)
    parent = _stop_with_parent()
    # once the supervisor is gone every worker stops within PARENT_CHECK_S, each when it
    # notices: one that noticed later must not take over the runs another has just let go
    # of, only to stop them again (a call in flight cut twice, a payment left unknown)
    app.state.runs.may_take_over = lambda: os.getppid() == parent
    tune_collector(config.serve_gc)
    return app


PARENT_CHECK_S = 1.0


def _stop_with_parent() -> int:
    """Stop this worker (as SIGTERM does: its runs stay resumable) once the process that
    started it is gone — a supervisor killed with SIGKILL cannot stop its workers, and a
    worker left behind would go on serving a socket nobody manages. Returns the
    supervisor's pid."""
    # the supervisor's pid as multiprocessing handed it over, not os.getppid(): a
    # supervisor killed while this worker was still starting has already left it to
    # init (or a subreaper), whose pid getppid() would now answer, and the watch below
    # would never see the supervisor go
    spawned_by = multiprocessing.parent_process()
    parent = spawned_by.pid if spawned_by is not None and spawned_by.pid else os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_CHECK_S)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="dagwright-parent-watch", daemon=True).start()
    return parent


def reuse_port_sockets(bound: socket.socket, count: int, backlog: int) -> list[socket.socket]:
    """``count`` listening sockets on the address of ``bound`` (itself one of them), each
    with ``SO_REUSEPORT``: one per worker, the kernel choosing one for each connection."""
    family, address = bound.family, bound.getsockname()
    sockets = [bound]
    for _ in range(count - 1):
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
        sock.listen(backlog)
        sock.set_inheritable(True)
        sockets.append(sock)
    return sockets


@contextmanager
def worker_metrics_dir() -> Iterator[str]:
    """The directory the workers' metric files go to, in ``PROMETHEUS_MULTIPROC_DIR`` for
    the workers to inherit: the operator's, left as it is, or else a private one (mode
    0700) made here and removed, with everything in it, when the block ends.

    prometheus-client chooses between in-memory and file-backed values once, when a
    process first imports it; the workers are spawned (a fresh interpreter each), so a
    variable set here, before they start, is there when they import it. Without it each
    worker's ``/metrics`` would answer with its own counters only, and a scrape would see
    them jump from one worker's to another's."""
    given = os.environ.get(MULTIPROC_ENV) or os.environ.get(MULTIPROC_ENV.lower())
    if given:
        yield given
        return
    previous = os.environ.get(MULTIPROC_ENV)  # set, but empty
    made = tempfile.mkdtemp(prefix="dagwright-metrics-")  # mode 0700
    os.environ[MULTIPROC_ENV] = made
    try:
        yield made
    finally:
        if previous is None:
            os.environ.pop(MULTIPROC_ENV, None)
        else:
            os.environ[MULTIPROC_ENV] = previous
        shutil.rmtree(made, ignore_errors=True)


class _Worker(Process):
    """A worker process whose live gauges stop counting once it has ended."""

    def __init__(self, config: Config, sockets: list[socket.socket],
                 metrics_dir: str | None) -> None:
        super().__init__(config, sockets)
        self.metrics_dir = metrics_dir

    def join(self) -> None:
        """Wait for the worker to end, then drop its ``live*`` gauge files (its counters
        and histograms stay: what it did still counts in the server's totals)."""
        super().join()
        if self.metrics_dir is not None and self.pid is not None:
            mark_process_dead(self.pid, self.metrics_dir)


class WorkerSupervisor(Multiprocess):
    """uvicorn's supervisor, each worker on a socket of its own (``sockets[i]`` for the
    ``i``-th worker, and for the worker that replaces it), all recording their metrics in
    one directory (:func:`worker_metrics_dir`) for as long as it runs."""

    def __init__(self, config: Config, sockets: list[socket.socket]) -> None:
        super().__init__(config, sockets)  # from here SIGINT/SIGTERM end run() normally
        self.processes_num = len(sockets)
        self.metrics_dir: str | None = None

    def run(self) -> None:
        """Serve until told to stop; the workers have all ended (and a directory made for
        their metrics is removed) when it returns."""
        with worker_metrics_dir() as self.metrics_dir:
            super().run()

    def _process(self, index: int) -> Process:
        return _Worker(self.config, [self.sockets[index]], self.metrics_dir)

    def init_processes(self) -> None:
        self.processes.extend(self._started(index) for index in range(self.processes_num))

    def restart_all(self) -> None:
        """SIGHUP: each worker replaced by a new one on its socket."""
        for index, old in enumerate(list(self.processes)):
            if self.should_exit.is_set():
                return
            old.terminate()
            old.join()
            self.processes[index] = self._started(index)

    def keep_subprocess_alive(self) -> None:
        """A worker that died (or hangs) is replaced on its socket; one that could not
        start stops the whole server, as uvicorn's supervisor does."""
        for index, old in enumerate(list(self.processes)):
            if self.should_exit.is_set():
                return
            if old.is_alive(timeout=self.config.timeout_worker_healthcheck):
                continue
            old.kill()
            old.join()
            if old.exitcode == STARTUP_FAILURE:
                self.should_exit.set()
                return
            self.processes[index] = self._started(index)

    def _started(self, index: int) -> Process:
        process = self._process(index)
        process.start()
        return process
