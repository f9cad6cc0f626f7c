"""One worker process of ``dagwright serve --workers N``.

uvicorn's supervisor starts N processes on the socket the parent bound (the kernel hands
each connection to one of them) and replaces a worker that dies. Each worker builds its
own orchestrator and app from the same ``ORCH_*`` settings (:func:`worker_app`, the
factory uvicorn imports in the worker); they share nothing but the run store, through
which any worker answers for any run (``docs/serve.md``).
"""

from __future__ import annotations

from starlette.applications import Starlette

from orchestration.config import OrchestratorConfig
from orchestration.logging_setup import configure_logging
from orchestration.orchestrator import Orchestrator
from orchestration.server._app import create_app
from orchestration.server._gc import tune_collector
from orchestration.server._security import LOOPBACK_HOSTS, is_loopback

__all__ = ["serve_app", "worker_app"]


def serve_app(config: OrchestratorConfig, orchestrator: Orchestrator) -> Starlette:
    """The app ``dagwright serve`` serves (one process, or each worker)."""
    token = config.serve_token.get_secret_value() if config.serve_token is not None else None
    token = token or None
    return create_app(orchestrator, token=token, close_orchestrator=True,
                      allowed_hosts=LOOPBACK_HOSTS
                      if token is None and is_loopback(config.serve_host) else None)


def worker_app() -> Starlette:
    """A worker's app, from the settings the parent left in the environment."""
    config = OrchestratorConfig()
    configure_logging(config)
    app = serve_app(config, Orchestrator.from_env(config=config))
    tune_collector(config.serve_gc)
    return app
