"""``dagwright worker`` processes, as a deployment runs them, for the scale-out test and the
scale-out benchmark.

Each worker is ``python -m orchestration worker --identity NAME`` with the environment
given (``ORCH_CATALOG``, ``ORCH_TEMPORAL_*``...); it is ready once it printed that it
polls its task queue. Workers still alive when the context ends get SIGTERM (a graceful
shutdown), then SIGKILL.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.net import log_tail, wait_until

ROOT = Path(__file__).resolve().parent.parent.parent
READY = "polling task queue"


@dataclass
class WorkerProcess:
    identity: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return log_tail(self.log_path)

    def kill(self) -> None:
        """SIGKILL: the worker dies mid-whatever, as a machine that loses power."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def pause(self) -> None:
        """SIGSTOP: the worker freezes (a long GC pause, a VM paused, a laptop lid)."""
        self.process.send_signal(signal.SIGSTOP)

    def go_on(self) -> None:
        """SIGCONT: it wakes up where it was, believing no time passed."""
        self.process.send_signal(signal.SIGCONT)


@contextmanager
def start_workers(identities: list[str], env: Mapping[str, str],
                  start_timeout_s: float = 60,
                  module: str = "orchestration") -> Iterator[list[WorkerProcess]]:
    """Start one worker per identity (in parallel) and wait until each polls;
    ``module`` is what ``python -m`` runs (a test's instrumented worker)."""
    log_dir = Path(tempfile.mkdtemp(prefix="dagwright-workers-"))
    workers: list[WorkerProcess] = []
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    try:
        for identity in identities:
            log_path = log_dir / f"{identity}.log"
            with log_path.open("wb") as log:
                process = subprocess.Popen(
                    [sys.executable, "-m", module, "worker", "--identity", identity],
                    cwd=ROOT, env=full_env, stdout=log, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL)
            workers.append(WorkerProcess(identity, process, log_path))
        for worker in workers:
            def ready(w: WorkerProcess = worker) -> bool:
                if w.process.poll() is not None:
                    raise RuntimeError(f"worker {w.identity} exited with {w.process.returncode}:\n"
                                       f"{w.log()}")
                return READY in w.log()
            wait_until(f"worker {worker.identity}", ready, start_timeout_s, worker.log)
        yield workers
    finally:
        for worker in workers:
            if worker.process.poll() is None:
                worker.go_on()  # a paused worker must wake to be stopped
                worker.process.terminate()
        for worker in workers:
            try:
                worker.process.wait(15)
            except subprocess.TimeoutExpired:
                worker.process.kill()
                worker.process.wait()
