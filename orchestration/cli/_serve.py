"""``dagwright serve`` (the HTTP API and run viewer, the serve extra) and ``dagwright
worker`` (a Temporal worker hosting runs, the temporal extra): the long-running commands."""

from __future__ import annotations

import argparse
from typing import TextIO

from orchestration._extras import needs_extra
from orchestration.cli._parser import Commands, add_verbosity, server_log_level
from orchestration.config import OrchestratorConfig
from orchestration.errors import DagwrightError


def register(commands: Commands) -> None:
    http = commands.add_parser("serve", help="serve the HTTP API (/v1) and the run viewer "
                               "(/ui); settings ORCH_SERVE_*, needs ORCH_CATALOG")
    http.add_argument("--host", help="address to listen on (default: ORCH_SERVE_HOST, 127.0.0.1)")
    http.add_argument("--port", type=int, help="port (default: ORCH_SERVE_PORT, 8080; 0: any)")
    http.add_argument("--insecure", action="store_true",
                      help="allow a non-loopback address without ORCH_SERVE_TOKEN")
    http.add_argument("--workers", type=int, help="processes on the socket, sharing the run "
                      "store (default: ORCH_SERVE_WORKERS, 1)")
    add_verbosity(http, argparse.SUPPRESS, usual=SERVER_LOGS)
    http.set_defaults(fn=cmd_serve)
    worker = commands.add_parser("worker", help="host runs on Temporal: poll the task queue "
                                 "for run workflows and their tool and LLM calls (needs "
                                 "ORCH_CATALOG; see docs/scale-out.md)")
    worker.add_argument("--identity", help="this worker's name in Temporal (default host:pid)")
    worker.add_argument("--task-queue", help="the task queue (default ORCH_TEMPORAL_TASK_QUEUE)")
    add_verbosity(worker, argparse.SUPPRESS, usual=SERVER_LOGS)
    worker.set_defaults(fn=cmd_worker)


SERVER_LOGS = "ORCH_LOG_LEVEL, INFO unless set: a line as each run starts and ends"


def with_log_level(args: argparse.Namespace, config: OrchestratorConfig) -> OrchestratorConfig:
    """``config`` with the level -q/-v ask for: a long-running command's logs are all it
    says, and its processes (each worker of --workers) read the level from there."""
    return config.model_copy(update={"log_level": server_log_level(args, config)})


def cmd_serve(args: argparse.Namespace, out: TextIO) -> int:
    try:
        from orchestration.server import serve
    except ImportError as exc:
        raise DagwrightError(needs_extra("dagwright serve", "serve", exc.name)) from exc
    return serve(host=args.host, port=args.port, insecure=args.insecure,
                 workers=args.workers, config=with_log_level(args, OrchestratorConfig()),
                 out=out)


def cmd_worker(args: argparse.Namespace, out: TextIO) -> int:
    try:
        from orchestration.temporal._worker import serve
    except ImportError as exc:
        raise DagwrightError(needs_extra("dagwright worker", "temporal", exc.name)) from exc
    overrides = {"temporal_task_queue": args.task_queue} if args.task_queue else {}
    return serve(with_log_level(args, OrchestratorConfig(**overrides)), identity=args.identity)
