"""``dagwright serve``: the app under uvicorn, configured from ``ORCH_SERVE_*``.

The socket is bound and listening here before the address is printed, so the address
printed is the one listened on (``--port 0`` picks a free port) and a client that
connects the moment it reads the line is queued by the kernel until uvicorn accepts it,
never refused.
"""

from __future__ import annotations

import os
import socket
import sys
from typing import TextIO

import uvicorn

from orchestration.config import OrchestratorConfig
from orchestration.errors import ConfigError
from orchestration.logging_setup import configure_logging
from orchestration.orchestrator import Orchestrator
from orchestration.server._gc import tune_collector
from orchestration.server._security import check_exposure, check_token
from orchestration.server._tenants import Access, read_tenants
from orchestration.server._workers import WorkerSupervisor, reuse_port_sockets, serve_app
from orchestration.telemetry.exporters import tracer_provider_from_config

__all__ = ["serve"]

GRACEFUL_SHUTDOWN_S = 10
"""How long a stop waits for open requests (a ``wait`` call, an event stream)."""


LISTEN_BACKLOG = 2048
"""uvicorn's own default backlog."""


def _bind(host: str, port: int, *, reuse_port: bool = False) -> socket.socket:
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:  # the workers' sockets join it on the same address
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
        sock.listen(LISTEN_BACKLOG)
    except OSError as exc:
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc} "
                          "(choose another --port or --host)") from exc
    sock.set_inheritable(True)
    return sock


def serve(*, host: str | None = None, port: int | None = None, insecure: bool = False,
          workers: int | None = None, config: OrchestratorConfig | None = None,
          out: TextIO | None = None) -> int:
    """Serve until interrupted (SIGINT/SIGTERM: runs in flight stay resumable and are
    resumed at the next start). ``workers`` processes (default ``ORCH_SERVE_WORKERS``)
    share the socket and the run store. Raises :class:`ConfigError` for an address it
    must not or cannot listen on, a short token, or a missing catalog."""
    out = out or sys.stdout
    config = config or OrchestratorConfig()
    host = host or config.serve_host
    port = config.serve_port if port is None else port
    workers = config.serve_workers if workers is None else workers
    if workers < 1:
        raise ConfigError(f"--workers {workers}: give at least 1")
    if not 0 <= port <= 65535:  # the resolver would wrap it: 99999 is port 34463
        raise ConfigError(f"--port {port}: give a port from 1 to 65535, or 0 for any free one")
    if workers > 1 and config.store_url.strip().lower().startswith("memory:"):
        # each process would keep its runs to itself: a run started through one worker
        # would be unknown (404) to the others, and never taken over if its worker died
        raise ConfigError(
            f"--workers {workers} needs a run store its processes share, and "
            f"ORCH_STORE_URL={config.store_url} keeps each process's runs in its own memory; "
            "use sqlite:///PATH (one machine) or postgresql://… (docs/serve.md)")
    token = config.serve_token.get_secret_value() if config.serve_token is not None else None
    token = token or None
    check_token(token)
    tokens = config.serve_tokens.get_secret_value() if config.serve_tokens is not None else ""
    tenants = read_tenants(tokens) if tokens.strip() else None
    Access(token, tenants)  # both set is refused here, before anything starts
    check_exposure(host, token if tenants is None else "tenants", insecure)
    configure_logging(config)
    config = config.model_copy(update={"serve_host": host})
    # spans as ORCH_OTEL_EXPORTER says, as `dagwright run` and `worker` export them (each
    # worker of --workers builds its own: worker_app); an otlp without its extra fails here
    provider = tracer_provider_from_config(config)
    try:
        orchestrator = Orchestrator.from_env(  # a bad catalog fails here, once
            config=config, tracer_provider=provider)
    except BaseException:
        if provider is not None:
            provider.shutdown()
        raise
    sock = _bind(host, port, reuse_port=workers > 1)
    try:
        shown = f"[{host}]" if ":" in host else host
        actual = sock.getsockname()[1]
        needed = (f"{len({t.name for t in tenants.values()})} tenant(s), each with its own "
                  "bearer token" if tenants else "a bearer token is required" if token
                  else "no token")
        out.write(f"dagwright serve: http://{shown}:{actual}/ui/ (API under /v1; {needed}; "
                  f"at most {config.serve_max_runs} runs at once"
                  + (f" in each of {workers} processes" if workers > 1 else "") + ")\n")
        out.flush()
        if workers > 1:
            orchestrator.close()
            _serve_workers(config, workers, sock)
        else:
            app = serve_app(config, orchestrator, provider)
            server = uvicorn.Server(uvicorn.Config(
                app, log_level=config.log_level.lower(), lifespan="on",
                timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S, log_config=None))
            tune_collector(config.serve_gc)
            server.run(sockets=[sock])
    finally:
        sock.close()
        orchestrator.close()
        if provider is not None:
            provider.shutdown()  # flush the batched spans
    return 0


def _serve_workers(config: OrchestratorConfig, workers: int, sock: socket.socket) -> None:
    """``workers`` processes on ``sock`` under uvicorn's supervisor (which replaces a
    worker that dies and stops them all on SIGINT/SIGTERM). Each builds its app from the
    environment, so what the command line chose goes there first."""
    os.environ["ORCH_SERVE_HOST"] = config.serve_host
    os.environ["ORCH_LOG_LEVEL"] = config.log_level  # -q / -v of the command line
    uvicorn_config = uvicorn.Config(
        "orchestration.server._workers:worker_app", factory=True, workers=workers,
        log_level=config.log_level.lower(), lifespan="on",
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S, log_config=None)
    sockets = reuse_port_sockets(sock, workers, LISTEN_BACKLOG)
    try:
        WorkerSupervisor(uvicorn_config, sockets).run()
    finally:
        for extra in sockets[1:]:
            extra.close()
